"""The own-model benchmarks at toy size: the study's reference run, the overhead pair,
the memory script's process accounting and its dataset."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from lab.bench import loader_memory, own_model, train_step


def test_the_study_runs_the_reference_on_the_examples_module() -> None:
    study = own_model.Study("own-transformer", "mnist1d", 2, 1, True,
                            {"local": ("node.toml", ())}, "adam", 0.002)
    accuracy = own_model.reference_run(study, (), seed=0, rounds=1)
    assert 0.0 <= accuracy <= 1.0


def test_the_overhead_pair_times_the_trainer_and_a_plain_loop() -> None:
    row = train_step.bench_module("mlp", 8, inner=2, repeats=1)
    assert row["step_cpu_ms"] > 0 and row["torch_step_cpu_ms"] > 0  # type: ignore[operator]
    assert row["values"] == 64 * 48 + 48 + 48 * 32 + 32 + 32 * 10 + 10


def test_memory_is_summed_over_the_process_tree(tmp_path: Path) -> None:
    assert os.getpid() in loader_memory.tree(os.getppid())
    assert loader_memory.anonymous_kib(os.getpid()) > 0
    assert loader_memory.anonymous_kib(2**22 + 17) == 0  # gone: counts nothing


def test_the_memory_mapped_dataset_reads_one_sample_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "set.f32"
    count = loader_memory.write_set(path, 1)
    data = loader_memory.memmap_data(str(path))
    x, y = data["train"][count - 1]  # type: ignore[index]
    assert x.shape == loader_memory.SAMPLE and 0 <= y < loader_memory.CLASSES
    assert torch.equal(x, torch.from_numpy(np.fromfile(path, np.float32)[-x.numel():]
                                           .reshape(loader_memory.SAMPLE)))
