"""The user's datasets: what a data factory may return, private files, loaders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from module_kit import ItemDataset, blobs, item_data, tensor_data
from torch.utils.data import IterableDataset, TensorDataset

from learner.batches import LoaderBatches, evaluation_batches
from learner.data_factory import load_factory_data
from learner.user_code import FactoryError, FactoryRef


def load(factory: object, **options: object) -> object:
    settings: dict[str, object] = dict(path=None, node_index=0, num_nodes=1, seed=0,
                                       permutation=None)
    settings.update(options)
    return load_factory_data(FactoryRef.parse(factory, "data.factory"), **settings)  # type: ignore[arg-type]


def test_each_node_reads_its_own_private_file(tmp_path: Path) -> None:
    for index in range(2):
        x, y = blobs(index, samples=20 + index)
        np.savez(tmp_path / f"node-{index}.npz", x=x.numpy(), y=y.numpy())

    def private(path: str) -> tuple[object, object]:
        with np.load(path) as f:
            data = TensorDataset(torch.from_numpy(f["x"]), torch.from_numpy(f["y"]))
        return data, data

    data = load(private, path=str(tmp_path / "node-{node_index}.npz"), node_index=1,
                num_nodes=2)
    assert data.train_size == 21  # type: ignore[attr-defined]
    assert data.train_tensors is not None  # type: ignore[attr-defined]


def test_in_memory_and_item_datasets_and_their_class_count() -> None:
    memory = load(tensor_data)
    assert memory.train_tensors is not None and memory.num_classes == 5  # type: ignore[attr-defined]
    items = load(item_data)  # the class count from the train set's num_classes attribute
    assert items.train_tensors is None and items.num_classes == 5  # type: ignore[attr-defined]
    assert items.sample_shape == (16,)  # type: ignore[attr-defined]


def test_a_permutation_relabels_class_targets_on_both_paths() -> None:
    plain, swapped = load(tensor_data), load(tensor_data, permutation="3:4")
    y = plain.train_tensors[1]  # type: ignore[attr-defined]
    expected = y.clone()
    expected[y == 3], expected[y == 4] = 4, 3
    assert torch.equal(swapped.train_tensors[1], expected)  # type: ignore[attr-defined]
    relabelled = load(item_data, permutation="3:4").train  # type: ignore[attr-defined]
    original = item_data()[0]
    assert all(relabelled[i][1] == {3: 4, 4: 3}.get(original[i][1], original[i][1])
               for i in range(30))


class Stream(IterableDataset):
    def __iter__(self):  # type: ignore[no-untyped-def]
        yield torch.zeros(3), 0


@pytest.mark.parametrize(("result", "message"), [
    (lambda: [1, 2, 3, 4], "returned a list; expected \\(train, test\\)"),
    (lambda: {"train": tensor_data()["train"]}, "without test"),
    (lambda: (Stream(), Stream()), "IterableDataset; return a map-style"),
    (lambda: (TensorDataset(torch.zeros(0, 3), torch.zeros(0)),) * 2, "train set is empty"),
    (lambda: ([(torch.zeros(3),)], [(torch.zeros(3),)]), "item 0 of the train set is a tuple"),
    (lambda: ([("text", 1)], [("text", 1)]), "input of item 0 .* is a str"),
    (lambda: ([(torch.zeros(3), 0.5)], [(torch.zeros(3), 0.5)]), "needs a class index"),
    (lambda: ([(torch.zeros(3), 1)], [(torch.zeros(3), 1)]), "cannot tell the number"),
    (lambda: {"train": [(torch.zeros(3), 1)], "test": [(torch.zeros(4), 1)],
              "num_classes": 2}, "test set have shape \\(4,\\)"),
])
def test_what_a_factory_may_not_return_is_one_line(result: object, message: str) -> None:
    with pytest.raises(FactoryError, match=message) as caught:
        load(result)
    assert caught.value.field == "data.factory" and "\n" not in str(caught.value)


def test_loader_workers_start_with_forkserver_and_read_every_sample() -> None:
    x, y = blobs(0, samples=50)
    dataset = ItemDataset(x, y)
    stream = LoaderBatches(dataset, 16, seed=3, num_workers=1, start="forkserver")
    seen = [stream.next() for _ in range(6)]  # a pass of 3 full batches, then another
    assert all(bx.shape == (16, 16) for bx, _ in seen)
    first = torch.cat([by for _, by in seen[:3]])
    again = LoaderBatches(dataset, 16, seed=3)  # the same seeded order without workers
    assert torch.equal(first, torch.cat([again.next()[1] for _ in range(3)]))
    stream.close()
    total = sum(len(by) for _, by in evaluation_batches(dataset, batch_size=16))
    assert total == 50


def test_a_dataset_defined_in_a_file_reaches_spawned_workers(tmp_path: Path) -> None:
    """The file is imported under a name of its own (sys.path untouched); the workers,
    fresh interpreters, import it again before they unpickle its dataset."""
    (tmp_path / "my_data.py").write_text(
        "import torch\n"
        "class Squares(torch.utils.data.Dataset):\n"
        "    num_classes = 3\n"
        "    def __len__(self):\n        return 30\n"
        "    def __getitem__(self, i):\n        return torch.full((2,), float(i)), i % 3\n"
        "def load():\n    return Squares(), Squares()\n")
    data = load(f"{tmp_path / 'my_data.py'}:load")
    stream = LoaderBatches(data.train, 10, seed=0, num_workers=1, start="spawn")  # type: ignore[attr-defined]
    x, y = stream.next()
    assert x.shape == (10, 2) and torch.equal(y, x[:, 0].long() % 3)
    stream.close()
