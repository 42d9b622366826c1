"""A node's data from the user's code: torch ``Dataset`` objects, private to the node.

``data.factory`` names a function returning ``(train, test)`` or ``(train, test,
public)`` map-style Datasets, or a dict with those keys (and ``num_classes``).
It is called with the keyword arguments its signature takes among ``path``
(``data.path``, with ``{node_index}`` replaced: each node's own private file),
``node_index``, ``num_nodes`` and ``seed`` (for code that shards one shared
source). Items are ``(input, target)`` pairs; inputs are floating-point
tensors (or arrays), all of one shape. With the default cross-entropy loss a
target is a class index and the class count comes from ``num_classes`` (in the
dict, or an attribute of the train set), ``classes`` or ``targets``. A
``TensorDataset`` stays in memory and is indexed by whole batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, TensorDataset

from learner.data_errors import DataError
from learner.permutations import parse_permutation
from learner.user_code import (
    FactoryError,
    FactoryRef,
    Portable,
    call_with,
    describe_type,
    file_modules,
)

__all__ = ["DatasetData", "Relabelled", "load_factory_data", "node_path"]

KEY = "data.factory"


@dataclass(frozen=True, eq=False)
class DatasetData:
    """One node's datasets and what they look like.

    ``sample_shape``: one input's shape; ``num_classes``: None for targets that
    are not class indices (a custom loss); ``train_tensors``/``test_tensors``:
    the (inputs, targets) of an in-memory set (a ``TensorDataset``), else None.
    """

    train: Dataset
    test: Dataset
    public: Dataset | None
    sample_shape: tuple[int, ...]
    num_classes: int | None
    train_tensors: tuple[torch.Tensor, torch.Tensor] | None = None
    test_tensors: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def train_size(self) -> int:
        return len(self.train)  # type: ignore[arg-type]


class Relabelled(Dataset):
    """``dataset`` with every class target ``y`` replaced by ``mapping[y]``."""

    def __init__(self, dataset: Dataset, mapping: np.ndarray) -> None:
        self.dataset = dataset
        self.mapping = mapping

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> tuple[object, int]:
        x, y = self.dataset[index]
        return x, int(self.mapping[int(y)])


def node_path(path: str | None, node_index: int) -> str | None:
    """``data.path`` with ``{node_index}`` replaced (each node's own file)."""
    return None if path is None else path.replace("{node_index}", str(node_index))


def _error(detail: str) -> FactoryError:
    return FactoryError(detail, field=KEY)


def _split(result: object, text: str) -> tuple[object, object, object, object]:
    """(train, test, public, num_classes) of what the factory returned."""
    if isinstance(result, Mapping):
        missing = [k for k in ("train", "test") if k not in result]
        if missing:
            raise _error(f"{text} returned a dict without {' and '.join(missing)}; expected "
                         "keys train, test (and optionally public, num_classes)")
        return result["train"], result["test"], result.get("public"), result.get("num_classes")
    if isinstance(result, tuple | list) and len(result) in (2, 3):
        return result[0], result[1], result[2] if len(result) == 3 else None, None
    raise _error(f"{text} returned {describe_type(result)}; expected (train, test) or "
                 "(train, test, public) Datasets, or a dict with train and test")


def _dataset(value: object, what: str, text: str) -> Dataset:
    if isinstance(value, IterableDataset):
        raise _error(f"{text}: the {what} set is an IterableDataset; return a map-style Dataset "
                     "(len() and indexing), which shuffling needs")
    if not (hasattr(value, "__len__") and hasattr(value, "__getitem__")):
        raise _error(f"{text}: the {what} set is {describe_type(value)}; expected a torch "
                     "Dataset (len() and indexing)")
    if len(value) == 0:
        raise _error(f"{text}: the {what} set is empty")
    return value  # type: ignore[return-value]


def _item(dataset: Dataset, index: int, what: str, text: str, classes: bool
          ) -> tuple[torch.Tensor, object]:
    """Item ``index`` of ``dataset`` as (input tensor, target), checked."""
    try:
        item = dataset[index]
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        raise _error(f"{text}: reading item {index} of the {what} set raised "
                     f"{type(exc).__name__}: {first}") from None
    if not isinstance(item, tuple | list) or len(item) != 2:
        raise _error(f"{text}: item {index} of the {what} set is {describe_type(item)}; "
                     "expected a pair (input, target)")
    x, y = item
    try:
        tensor = torch.as_tensor(x)
    except Exception:
        raise _error(f"{text}: the input of item {index} of the {what} set is "
                     f"{describe_type(x)}; expected a tensor or an array") from None
    if not tensor.is_floating_point():
        raise _error(f"{text}: the inputs of the {what} set are {tensor.dtype}; return "
                     "floating-point inputs (e.g. x.float() / 255 for bytes)")
    if classes and not _is_class_index(y):
        raise _error(f"{text}: the target of item {index} of the {what} set is "
                     f"{describe_type(y)}; the default cross-entropy loss needs a class index "
                     "(an integer); set training.loss for other targets")
    return tensor, y


def _is_class_index(y: object) -> bool:
    if isinstance(y, bool):
        return False
    if isinstance(y, int | np.integer):
        return True
    if isinstance(y, torch.Tensor | np.ndarray):
        return y.ndim == 0 and not torch.as_tensor(y).is_floating_point() and y.dtype != bool
    return False


def _num_classes(train: Dataset, given: object, text: str) -> int:
    if given is None:
        given = getattr(train, "num_classes", None)
    if given is None and getattr(train, "classes", None) is not None:
        given = len(train.classes)  # type: ignore[attr-defined]
    if given is None and getattr(train, "targets", None) is not None:
        given = int(torch.as_tensor(train.targets).max()) + 1  # type: ignore[attr-defined]
    if given is None and isinstance(train, TensorDataset) and len(train.tensors) == 2:
        given = int(train.tensors[1].max()) + 1
    if isinstance(given, bool) or not isinstance(given, int) or given < 2:
        if given is None:
            raise _error(f"{text}: cannot tell the number of classes; return "
                         '{"train": ..., "test": ..., "num_classes": N} or give the train set '
                         "a num_classes attribute")
        raise _error(f"{text}: num_classes is {given!r}; expected an integer >= 2")
    return given


def _tensors(dataset: Dataset) -> tuple[torch.Tensor, torch.Tensor] | None:
    if isinstance(dataset, TensorDataset) and len(dataset.tensors) == 2:
        x, y = dataset.tensors
        return x, y
    return None


def load_factory_data(ref: FactoryRef, *, path: str | None, node_index: int, num_nodes: int,
                      seed: int, permutation: str | None, classes: bool = True) -> DatasetData:
    """Call the data factory and check what it returned (FactoryError naming ``data.factory``).

    ``classes``: targets are class indices (the default loss); ``permutation``
    then relabels them (``data.permutation``).
    """
    text = ref.text
    factory = ref.resolve(KEY)
    result = call_with(factory, {"path": node_path(path, node_index), "node_index": node_index,
                                 "num_nodes": num_nodes, "seed": seed}, key=KEY, text=text)
    train_raw, test_raw, public_raw, given = _split(result, text)
    train = _dataset(train_raw, "train", text)
    test = _dataset(test_raw, "test", text)
    public = None if public_raw is None else _dataset(public_raw, "public", text)
    x0, _ = _item(train, 0, "train", text, classes)
    shape = tuple(x0.shape)
    for other, what in ((test, "test"), (public, "public")):
        if other is not None:
            x, _ = _item(other, 0, what, text, classes)
            if tuple(x.shape) != shape:
                raise _error(f"{text}: inputs of the {what} set have shape {tuple(x.shape)}, "
                             f"those of the train set {shape}; expected one shape")
    num_classes = _num_classes(train, given, text) if classes else None
    train_tensors, test_tensors = _tensors(train), _tensors(test)
    if num_classes is not None:
        try:
            mapping = parse_permutation(permutation, num_classes)
        except DataError as exc:
            raise DataError(exc.detail, field="permutation") from None
        if np.any(mapping != np.arange(num_classes)):
            table = torch.from_numpy(np.asarray(mapping, dtype=np.int64))
            train, test = Relabelled(train, mapping), Relabelled(test, mapping)
            if train_tensors is not None:
                train_tensors = (train_tensors[0], table[train_tensors[1].long()])
            if test_tensors is not None:
                test_tensors = (test_tensors[0], table[test_tensors[1].long()])
    modules = file_modules()
    if modules:  # DataLoader workers must import the files that define these datasets
        train, test = Portable(train, modules), Portable(test, modules)  # type: ignore[assignment]
    return DatasetData(train, test, public, shape, num_classes, train_tensors, test_tensors)
