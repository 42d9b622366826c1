"""Partial models over torch: declarations, layouts, data, training, the synchronous reference.

The declarations (:mod:`learner.spec`, :mod:`learner.model_graph`,
:mod:`learner.layout`), data specs and permutations and :class:`TrainConfig`
are plain Python and numpy. The names that need torch (the network, the
trainer, the reference run) are imported on first use, so that the node's
config and the operator CLI can build the learner's own spec objects without
paying for ``import torch``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from learner.associative import AssociativeNetwork, AssociativeSettings, associative_network_spec
from learner.augment import check_shift, random_shifts
from learner.data import DataSpec, NodeData, load_node_data
from learner.data_errors import DataError
from learner.dp.accounting import PrivacyAccountant, PrivacySpent, noise_multiplier_for
from learner.dp.config import DPConfig, DPConfigError
from learner.errors import FieldError
from learner.grouping import Grouping, GroupingError, GroupingParams, find_groups, join_group
from learner.layout import ModelLayout
from learner.model_graph import ModelGraph
from learner.permutations import (
    format_permutation,
    last_classes_permutations,
    parse_cycles,
    parse_permutation,
)
from learner.schemes import SEMI_LOCAL_SCHEMES, averaging_level, semi_local_scheme
from learner.spec import NetworkSpec, PartialModelSpec, SpecError
from learner.tasks import TASKS, Task, TaskData, TaskShape, get_task, load_task, resolve_network
from learner.tasks.idx import read_idx, write_idx
from learner.train_config import OPTIMIZERS, TrainConfig, TrainConfigError

if TYPE_CHECKING:
    from learner.batched_training import train_steps_batched
    from learner.dp.sgd import PrivacyBudgetSpent, PrivateSGD
    from learner.network import PartialMLP, PartialNetwork, assign, extract
    from learner.reference import (
        NodeSetup,
        ReferenceResult,
        ReferenceSetupError,
        average_shared_models,
        run_reference,
    )
    from learner.trainer import Evaluation, Trainer, evaluate_model

__all__ = [
    "OPTIMIZERS",
    "SEMI_LOCAL_SCHEMES",
    "AssociativeNetwork",
    "AssociativeSettings",
    "DPConfig",
    "DPConfigError",
    "DataError",
    "DataSpec",
    "Evaluation",
    "FieldError",
    "Grouping",
    "GroupingError",
    "GroupingParams",
    "ModelGraph",
    "ModelLayout",
    "NetworkSpec",
    "NodeData",
    "NodeSetup",
    "PartialMLP",
    "PartialModelSpec",
    "PartialNetwork",
    "PrivacyAccountant",
    "PrivacyBudgetSpent",
    "PrivacySpent",
    "PrivateSGD",
    "ReferenceResult",
    "ReferenceSetupError",
    "SpecError",
    "TASKS",
    "Task",
    "TaskData",
    "TaskShape",
    "TrainConfig",
    "TrainConfigError",
    "check_shift",
    "random_shifts",
    "Trainer",
    "assign",
    "associative_network_spec",
    "average_shared_models",
    "averaging_level",
    "evaluate_model",
    "extract",
    "find_groups",
    "format_permutation",
    "get_task",
    "join_group",
    "last_classes_permutations",
    "load_node_data",
    "load_task",
    "noise_multiplier_for",
    "parse_cycles",
    "parse_permutation",
    "read_idx",
    "resolve_network",
    "run_reference",
    "semi_local_scheme",
    "train_steps_batched",
    "write_idx",
]

# name -> module holding it; these modules import torch
_TORCH_NAMES = {
    "PartialMLP": "learner.network",
    "PartialNetwork": "learner.network",
    "assign": "learner.network",
    "extract": "learner.network",
    "PrivacyBudgetSpent": "learner.dp.sgd",
    "PrivateSGD": "learner.dp.sgd",
    "NodeSetup": "learner.reference",
    "ReferenceResult": "learner.reference",
    "ReferenceSetupError": "learner.reference",
    "average_shared_models": "learner.reference",
    "run_reference": "learner.reference",
    "Evaluation": "learner.trainer",
    "Trainer": "learner.trainer",
    "evaluate_model": "learner.trainer",
    "train_steps_batched": "learner.batched_training",
}


def __getattr__(name: str) -> object:
    module = _TORCH_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'learner' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value
