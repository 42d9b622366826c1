"""A node's projection for automatic groups (thesis ch. 5): its network's mean output per class.

Every node runs its network on the same benchmark inputs (the task's public
split, never the test part) and averages the softmax outputs over the inputs
of each true class. Nodes that learned the same task give close vectors even
though their parameters differ; a permuted label moves the mean output of the
permuted classes. The vector is flattened class-major: entry
``c * num_outputs + o`` is the mean probability of output ``o`` on class ``c``.

Torch is imported inside :func:`project_network` only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ProjectionError", "class_mean_outputs", "project_network"]


class ProjectionError(ValueError):
    """The outputs or labels given cannot be projected (the message says why)."""


def class_mean_outputs(outputs: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Flattened ``(num_classes * num_outputs,)`` float64: the mean output row per true class.

    `outputs` is ``(samples, num_outputs)`` (probabilities, e.g. softmax), `labels`
    ``(samples,)`` integers in ``[0, num_classes)``. A class with no sample gives
    a row of zeros (every node sees the same benchmark, so the row is zero on all).
    """
    outputs = np.asarray(outputs, dtype=np.float64)
    labels = np.asarray(labels)
    if num_classes < 1:
        raise ProjectionError(f"num_classes must be >= 1, got {num_classes}")
    if outputs.ndim != 2:
        raise ProjectionError(f"outputs must be (samples, outputs), got shape {outputs.shape}")
    if labels.shape != (outputs.shape[0],):
        raise ProjectionError(f"labels must be ({outputs.shape[0]},) to match the outputs, "
                              f"got shape {labels.shape}")
    if outputs.shape[0] == 0:
        raise ProjectionError("no benchmark sample: the projection needs the public split "
                              "(data.public_size > 0)")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ProjectionError(f"labels must be integers, got {labels.dtype}")
    if labels.min() < 0 or labels.max() >= num_classes:
        raise ProjectionError(f"labels must lie in [0, {num_classes}), got "
                              f"{int(labels.min())}..{int(labels.max())}")
    if not np.isfinite(outputs).all():
        raise ProjectionError("outputs hold NaN or infinite values")
    sums = np.zeros((num_classes, outputs.shape[1]), dtype=np.float64)
    np.add.at(sums, labels, outputs)
    counts = np.bincount(labels, minlength=num_classes).astype(np.float64)
    means = sums / np.maximum(counts, 1.0)[:, None]
    return means.reshape(-1)


def project_network(network_module: Any, x: np.ndarray, y: np.ndarray, num_classes: int) -> np.ndarray:
    """Run the torch module on the benchmark inputs (no grad, eval mode) and project its
    softmax outputs with :func:`class_mean_outputs`. The module's training mode is restored."""
    import torch

    was_training = bool(getattr(network_module, "training", False))
    network_module.eval()
    try:
        with torch.no_grad():
            inputs = torch.as_tensor(np.ascontiguousarray(x, dtype=np.float32))
            probabilities = torch.softmax(network_module(inputs), dim=1).double().numpy()
    finally:
        network_module.train(was_training)
    return class_mean_outputs(probabilities, np.asarray(y, dtype=np.int64), num_classes)
