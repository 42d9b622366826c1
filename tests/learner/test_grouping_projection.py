"""The projection of a node for automatic groups (learner.grouping.projection)."""

from __future__ import annotations

import numpy as np
import pytest

from learner.grouping.projection import ProjectionError, class_mean_outputs, project_network


def test_class_mean_outputs_by_hand() -> None:
    outputs = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0], [0.2, 0.8]])
    labels = np.array([0, 0, 1, 1])
    # class 0: mean of rows 0, 1; class 1: rows 2, 3; class 2: no sample -> zeros
    expected = [0.75, 0.25, 0.1, 0.9, 0.0, 0.0]
    assert class_mean_outputs(outputs, labels, 3) == pytest.approx(expected)
    assert class_mean_outputs(outputs, labels, 3).dtype == np.float64


@pytest.mark.parametrize(("outputs", "labels", "message"), [
    (np.zeros((2, 2)), np.array([0, 5]), r"\[0, 3\)"),
    (np.zeros((2, 2)), np.array([0]), "match the outputs"),
    (np.zeros((0, 2)), np.zeros(0, dtype=np.int64), "public split"),
    (np.full((1, 2), np.nan), np.array([0]), "NaN"),
    (np.zeros(4), np.array([0]), "samples, outputs"),
])
def test_bad_outputs_name_the_problem(outputs: np.ndarray, labels: np.ndarray, message: str) -> None:
    with pytest.raises(ProjectionError, match=message):
        class_mean_outputs(outputs, labels, 3)


def test_project_network_averages_softmax_per_class() -> None:
    torch = pytest.importorskip("torch")
    module = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        module.weight.copy_(torch.eye(2) * 10.0)
    module.train()
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], dtype=np.float32)
    y = np.array([0, 1, 1])
    projection = project_network(module, x, y, 2)
    assert module.training  # the caller's mode is restored
    confident = 1.0 / (1.0 + np.exp(-10.0))  # softmax of logits (10, 0)
    # class 1 holds one input the network maps to output 0 and one to output 1
    assert projection == pytest.approx([confident, 1 - confident, 0.5, 0.5], abs=1e-6)
