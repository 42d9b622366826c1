"""Random translations of image mini-batches (data augmentation).

A node holds a few hundred images at most (mnist5k over 16 nodes: 250 each);
a convolutional network memorizes them within a few dozen passes, its loss
reaches zero, and the gradients that carry what the other nodes learned
through the shared models vanish with it. Moving each training image by a few
pixels (zero-filled, as MNIST's borders are blank) keeps the loss informative
without changing what the images show. Test images are never moved.

``check_shift`` needs no torch (the node's config calls it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported on use: configs check `shift` without it
    import torch

__all__ = ["ImageShape", "check_shift", "random_shifts"]

ImageShape = tuple[int, int, int]  # channels, height, width


def check_shift(shift: int, image: ImageShape | None) -> None:
    """A clear error when ``shift`` pixels cannot apply to inputs of shape ``image``."""
    if shift == 0:
        return
    if image is None:
        raise ValueError(f"shift = {shift} moves images, but the network's input is flat; "
                         "use a network on images (notation starting with CxHxW, e.g. "
                         "1x28x28=c16k5=pool2=100=10) or shift = 0")
    _, height, width = image
    if not 0 < shift < min(height, width):
        raise ValueError(f"shift = {shift} pixels does not fit {height}x{width} images; "
                         f"expected 0 <= shift < {min(height, width)}")


def random_shifts(x: torch.Tensor, image: ImageShape, shift: int,
                  rng: np.random.Generator) -> torch.Tensor:
    """Each row of ``x`` (a flat ``C*H*W`` image) moved by up to ``shift`` pixels.

    Every image gets its own offsets, drawn uniformly in ``[-shift, shift]`` for
    rows and for columns; pixels moved in from outside are zero. Returns a new
    tensor of ``x``'s shape and dtype (``x`` is not modified).
    """
    import torch

    channels, height, width = image
    batch = x.shape[0]
    if x.shape[1:] != (channels * height * width,):
        raise ValueError(f"random_shifts: expected rows of {channels * height * width} values "
                         f"({channels}x{height}x{width}), got shape {tuple(x.shape)}")
    if shift == 0 or batch == 0:
        return x.clone()
    padded = torch.nn.functional.pad(x.view(batch, channels, height, width),
                                     (shift, shift, shift, shift))
    # offsets into the padded image: 0..2*shift, where `shift` is no move
    dy = torch.from_numpy(rng.integers(0, 2 * shift + 1, size=batch))
    dx = torch.from_numpy(rng.integers(0, 2 * shift + 1, size=batch))
    rows = (dy[:, None] + torch.arange(height))[:, None, :, None]
    cols = (dx[:, None] + torch.arange(width))[:, None, None, :]
    samples = torch.arange(batch)[:, None, None, None]
    planes = torch.arange(channels)[None, :, None, None]
    return padded[samples, planes, rows, cols].reshape(batch, -1)
