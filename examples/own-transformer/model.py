"""A 2-layer transformer encoder reading a 1-D signal as a sequence of tokens.

Every 4 consecutive points are a token: a linear embedding of them plus a
learned position, two encoder layers (self-attention and feed-forward), the
mean over the tokens, a linear head. The node config shares everything below
the head (``embed.*``, ``position``, ``encoder.*``) and keeps the head on each
node (``node.toml``). Tracing cannot split attention by units, so this model
is split by parameter name.
"""

from __future__ import annotations

import torch
from torch import nn


class SignalTransformer(nn.Module):
    def __init__(self, length: int, num_classes: int, width: int = 32, heads: int = 4,
                 layers: int = 2, patch: int = 4) -> None:
        super().__init__()
        self.patch = patch
        self.embed = nn.Linear(patch, width)
        self.position = nn.Parameter(torch.zeros(1, length // patch, width))
        nn.init.normal_(self.position, std=0.02)
        layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=2 * width,
                                           dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(x.reshape(x.shape[0], -1, self.patch)) + self.position
        return self.head(self.encoder(tokens).mean(dim=1))


def build(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Inputs of ``input_shape`` (1, length): one channel, ``length`` points (a multiple of 4)."""
    return SignalTransformer(input_shape[-1], num_classes)
