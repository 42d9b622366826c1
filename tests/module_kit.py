"""Small user modules and datasets for the tests of network.factory and data.factory.

Importable as ``module_kit`` (tests/ is on the path, as for guard_kit), so a
config can name them: ``"module_kit:mlp"``, ``"module_kit:tensor_data"``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset


def mlp(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Flatten, Linear(features, 12), ReLU, Linear(12, classes): names "1.*" and "3.*"."""
    features = 1
    for size in input_shape:
        features *= size
    return nn.Sequential(nn.Flatten(), nn.Linear(features, 12), nn.ReLU(),
                         nn.Linear(12, num_classes))


class Block(nn.Module):
    """conv-bn-relu-conv-bn plus the input: a residual block."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(out + x)


class TinyResNet(nn.Module):
    """A stem convolution, one residual block, 2x2 pooling, flatten, a linear head."""

    def __init__(self, channels: int = 1, num_classes: int = 10, width: int = 4) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(channels, width, 3, padding=1),
                                      nn.BatchNorm2d(width), nn.ReLU(), Block(width),
                                      nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.head = nn.Linear(4 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def resnet(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return TinyResNet(input_shape[0], num_classes)


class Gated(nn.Module):
    """An operation tracing cannot follow (softmax across units) between two layers."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(64, 8)
        self.b = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x.flatten(1))
        return self.b(torch.softmax(h, dim=1) * h)


def gated() -> nn.Module:
    return Gated()


def blobs(node_index: int = 0, samples: int = 240, classes: int = 5, features: int = 16,
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples around ``classes`` shared centres; each node draws its own."""
    centres = torch.randn(classes, features, generator=torch.Generator().manual_seed(0))
    mine = torch.Generator().manual_seed(1000 + node_index)
    y = torch.randint(0, classes, (samples,), generator=mine)
    return centres[y] + torch.randn(samples, features, generator=mine), y


def tensor_data(node_index: int = 0) -> dict[str, object]:
    """In-memory datasets (TensorDataset: indexed by whole batches)."""
    x, y = blobs(node_index)
    xt, yt = blobs(node_index + 100, samples=100)
    return {"train": TensorDataset(x, y), "test": TensorDataset(xt, yt), "num_classes": 5}


class ItemDataset(Dataset):
    """A map-style dataset read item by item (the DataLoader path)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y
        self.num_classes = 5

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.x[index], int(self.y[index])


def item_data(node_index: int = 0) -> tuple[Dataset, Dataset]:
    x, y = blobs(node_index)
    xt, yt = blobs(node_index + 100, samples=100)
    return ItemDataset(x, y), ItemDataset(xt, yt)
