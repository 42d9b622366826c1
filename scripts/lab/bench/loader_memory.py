"""Benchmark: a node training on a memory-mapped dataset larger than memory should use.

Writes two training sets as raw float32 files read through ``np.memmap`` (a
2 GiB one and a 20 MiB one, same samples' shape, labels alike), then runs a
real node (``p2p run``) on each for the same rounds with ``data.factory =
"lab.bench.loader_memory:memmap_data"`` and ``data.num_workers`` loader
workers. Every 100 ms it reads ``RssAnon + RssShmem`` (``/proc/PID/status``:
anonymous and shared memory, not file-backed pages such as the memory map's)
of the node and every process below it (the forkserver and the loader
workers), and prints each run's peak of their sum and the difference.

    python scripts/bench/loader_memory.py [--large-mib 2048] [--rounds 20] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

SAMPLE = (1, 64, 64)  # one sample: 16 KiB of float32
CLASSES = 10


class MemmapSet(Dataset):
    """Samples of a raw float32 file, mapped on first use in each process (the map is
    never pickled: a loader worker maps the file itself)."""

    def __init__(self, path: str, count: int) -> None:
        self.path = path
        self.count = count
        self.num_classes = CLASSES
        self._x: np.ndarray | None = None

    def __len__(self) -> int:
        return self.count

    def __getstate__(self) -> dict[str, object]:
        return {"path": self.path, "count": self.count, "num_classes": self.num_classes,
                "_x": None}

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self._x is None:
            self._x = np.memmap(self.path, dtype=np.float32, mode="r",
                                shape=(self.count, *SAMPLE))
        sample = np.array(self._x[index])  # a copy of one sample, not of the map
        return torch.from_numpy(sample), int(sample[0, 0, 0] * CLASSES) % CLASSES


def memmap_data(path: str) -> dict[str, object]:
    """The factory the node's config names: ``path`` is the training file; its first
    1,000 samples are the test set."""
    count = os.path.getsize(path) // (4 * int(np.prod(SAMPLE)))
    return {"train": MemmapSet(path, count), "test": MemmapSet(path, min(count, 1000)),
            "num_classes": CLASSES}


def small_cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(input_shape[0], 8, 5, stride=2), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(128, num_classes))


def write_set(path: Path, mib: int) -> int:
    """A raw float32 file of ``mib`` MiB (written in chunks: never all in memory)."""
    per_sample = int(np.prod(SAMPLE))
    count = mib * 2**20 // (4 * per_sample)
    rng = np.random.default_rng(0)
    with path.open("wb") as f:
        for start in range(0, count, 4096):
            chunk = rng.random((min(4096, count - start), per_sample), dtype=np.float32)
            f.write(chunk.tobytes())
    return count


def tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        p = stack.pop()
        found.append(p)
        stack.extend(children.get(p, []))
    return found


def anonymous_kib(pid: int) -> int:
    """RssAnon + RssShmem of ``pid`` (0 once it has gone)."""
    total = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("RssAnon:", "RssShmem:")):
                total += int(line.split()[1])
    except OSError:
        return 0
    return total


def run_node(workdir: Path, data: Path, rounds: int, workers: int) -> dict[str, float]:
    """A node trained ``rounds`` rounds on ``data``; its peak anonymous memory (tree)."""
    config = workdir / f"{data.stem}.toml"
    config.write_text(
        '[network]\nfactory = "lab.bench.loader_memory:small_cnn"\n'
        '[[models]]\nname = "global"\nparams = ["0.*"]\n'
        f'[data]\nfactory = "lab.bench.loader_memory:memmap_data"\npath = "{data}"\n'
        f'num_workers = {workers}\n'
        f'[training]\nrounds = {rounds}\neval_every = {rounds}\nbatch_size = 64\n')
    command = [sys.executable, "-m", "p2p", "run", "--config", str(config), "--data-dir",
               str(workdir / f"{data.stem}-node")]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    peak, started = 0, time.monotonic()
    admin = workdir / f"{data.stem}-node" / "admin.sock"
    status: dict[str, Any] = {}
    while process.poll() is None:
        peak = max(peak, sum(anonymous_kib(p) for p in tree(process.pid)))
        if admin.exists() and not status.get("finished"):
            done = subprocess.run([sys.executable, "-m", "p2p", "status", "--socket",
                                   str(admin), "--json"], capture_output=True, text=True)
            if done.returncode == 0:
                status = json.loads(done.stdout)
                if status.get("round", 0) >= rounds and status.get("accuracy") is not None:
                    status["finished"] = True
                    subprocess.run([sys.executable, "-m", "p2p", "stop", "--socket",
                                    str(admin)], capture_output=True)
        time.sleep(0.1)
    if process.returncode != 0:
        raise RuntimeError(f"the node failed: {process.stderr.read()[-2000:]}")  # type: ignore[union-attr]
    return {"peak_mib": peak / 1024, "seconds": time.monotonic() - started,
            "rounds": float(status.get("round", 0))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--large-mib", type=int, default=2048)
    parser.add_argument("--small-mib", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--workdir", type=Path, help="where to write the files (default tmp)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        workdir = Path(tmp)
        rows = {}
        for label, mib in (("small", args.small_mib), ("large", args.large_mib)):
            path = workdir / f"{label}.f32"
            count = write_set(path, mib)
            row = run_node(workdir, path, args.rounds, args.workers)
            row.update(file_mib=path.stat().st_size / 2**20, samples=count)
            rows[label] = row
            print(f"{label}: {row['file_mib']:.0f} MiB file ({count} samples), peak RssAnon + "
                  f"RssShmem of the node and its loader workers {row['peak_mib']:.0f} MiB "
                  f"({row['seconds']:.0f} s, {row['rounds']:.0f} rounds)", flush=True)
            path.unlink()
    difference = rows["large"]["peak_mib"] - rows["small"]["peak_mib"]
    print(f"difference: {difference:+.0f} MiB ({args.workers} loader workers, "
          f"{args.rounds} rounds; file-backed pages of the map are not counted)")
    if args.json:
        args.json.write_text(json.dumps({"runs": rows, "difference_mib": difference}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
