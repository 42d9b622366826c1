"""A small ResNet for 28x28 grey images: your own model, as a node trains it.

``build`` is the factory a node's config names (``[network] factory =
"model.py:build"``): it gets the shape of one input and the number of classes,
and returns a plain ``torch.nn.Module``. Nothing here knows about gossip or
partial models; the node config says which parameters are shared
(``node.toml``: by name; ``node-units.toml``: 80 % of every layer's units,
found by tracing the module).
"""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    """Two 3x3 convolutions with batch normalisation and a residual connection
    (a 1x1 convolution on the shortcut when the shape changes)."""

    def __init__(self, channels_in: int, channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut = nn.Sequential()
        if stride != 1 or channels_in != channels:
            self.shortcut = nn.Sequential(nn.Conv2d(channels_in, channels, 1, stride, bias=False),
                                          nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    """Stem, two residual stages (``width`` then ``2 * width`` channels), pooling to 4x4,
    a linear head."""

    def __init__(self, channels: int = 1, num_classes: int = 10, width: int = 8) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(channels, width, 3, 1, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            Block(width, width),
            Block(width, 2 * width, stride=2),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
        )
        self.head = nn.Linear(2 * width * 16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def build(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The node's model: images of ``input_shape`` (channels, height, width)."""
    return SmallResNet(channels=input_shape[0], num_classes=num_classes)
