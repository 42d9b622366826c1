"""Corrupt a node's checkpoints many ways and see what a restart does with them.

Two nodes train over the in-memory network, twice, so that node 0's data
directory holds ``checkpoint.pt`` and the older ``checkpoint.prev.pt``. Each
case copies that directory, injects one fault and builds node 0 on it, through
the very code a restart runs (:func:`p2p.runtime.state.resume_from`):

- ``truncate``: the newest cut at a random point;
- ``flip``: 1 to 200 random bytes of the newest changed at random places;
- ``zero-page``: a 4 KiB page of the newest zeroed;
- ``other-config``: the newest replaced by one this identity trained with
  another network;
- ``older-only``: a random fault in the older one only;
- ``both``: random faults in both;
- ``non-finite``: the newest re-sealed with a valid digest over NaN, infinite
  or out-of-bound values.

An outcome is *refused* (the node did not start, exit 2, or set the corrupt
file aside), *fallen back* (it resumed the older checkpoint), or *loaded
silently* (it resumed a corrupt file unannounced). Every case also checks that
no file was overwritten (a corrupt file is moved aside byte for byte).

    .venv/bin/python scripts/reliability/checkpoint_faults.py            # 200 cases, ~2 min
    .venv/bin/python scripts/reliability/checkpoint_faults.py --cases 14 --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import trio

from p2p.runtime.checkpoint import CheckpointConflict, CheckpointCorrupt, CheckpointStore
from p2p.testing import MemoryNetwork, fast_spec, memory_addresses, memory_node, running, wait_until

SPEC = fast_spec(rounds=2)
PAGE = 4096
KINDS = ("truncate", "flip", "zero-page", "other-config", "older-only", "both", "non-finite")
NEWEST, OLDER = "checkpoint.pt", "checkpoint.prev.pt"


async def _train(root: Path, rounds: int, layers: str | None = None) -> None:
    spec = dataclasses.replace(SPEC, rounds=rounds, layers=layers or SPEC.layers)
    net, addresses = MemoryNetwork(), memory_addresses(2)
    nodes = [memory_node(net, root / f"n{i}", spec, i, addresses[i],
                         bootstrap=addresses[:1] if i else ()) for i in range(2)]
    async with running(nodes):
        await wait_until(lambda: all(n.progress.finished for n in nodes))


async def prepare(root: Path) -> tuple[Path, bytes]:
    """Node 0's data directory with both checkpoints (rounds 2 and 4), and a checkpoint
    of the same identity trained with another network."""
    await _train(root / "swarm", 2)
    await _train(root / "swarm", 4)
    other = root / "other"
    shutil.copytree(root / "swarm", other)
    for node in ("n0", "n1"):
        for name in (NEWEST, OLDER):
            (other / node / name).unlink()
    await _train(other, 2, layers="64=40=32=10")
    return root / "swarm" / "n0", (other / "n0" / NEWEST).read_bytes()


def _random_fault(data: bytes, rng: np.random.Generator) -> bytes:
    """Truncation, byte flips or a zeroed page, picked at random."""
    return [_truncate, _flip, _zero_page][int(rng.integers(3))](data, rng)


def _truncate(data: bytes, rng: np.random.Generator) -> bytes:
    return data[:int(rng.integers(0, len(data)))]


def _flip(data: bytes, rng: np.random.Generator) -> bytes:
    out = bytearray(data)
    for where in rng.choice(len(data), size=int(rng.integers(1, 201)), replace=False):
        out[where] ^= int(rng.integers(1, 256))  # never the same byte again
    return bytes(out)


def _zero_page(data: bytes, rng: np.random.Generator) -> bytes:
    start = PAGE * int(rng.integers(0, (len(data) + PAGE - 1) // PAGE))
    out = bytearray(data)
    end = min(start + PAGE, len(out))
    out[start:end] = bytes(end - start)
    return bytes(out) if bytes(out) != data else _flip(data, rng)


def _non_finite(directory: Path, rng: np.random.Generator) -> bytes:
    """The newest checkpoint re-sealed (a valid digest) over values no node could hold."""
    store = CheckpointStore(directory)
    state = store.load()
    assert state is not None
    bad = float(rng.choice([np.nan, np.inf, -np.inf, 1e7, -3e30]))
    if rng.random() < 0.5:
        rec = state.pushsum["global"]
        values = rec.values.copy()
        values[rng.integers(values.size)] = bad
        state = dataclasses.replace(state, pushsum={"global": dataclasses.replace(
            rec, values=values)})
    else:
        flat = state.model_state["flat"].clone()
        flat[int(rng.integers(flat.numel()))] = bad
        state = dataclasses.replace(state, model_state={**state.model_state, "flat": flat})
    return store.encode(state)


def inject(kind: str, directory: Path, other_config: bytes,
           rng: np.random.Generator) -> dict[str, bytes]:
    """Apply fault ``kind`` to the checkpoints in ``directory``; the corrupted files' bytes."""
    newest, older = directory / NEWEST, directory / OLDER
    faults: dict[str, Callable[[], dict[str, bytes]]] = {
        "truncate": lambda: {NEWEST: _truncate(newest.read_bytes(), rng)},
        "flip": lambda: {NEWEST: _flip(newest.read_bytes(), rng)},
        "zero-page": lambda: {NEWEST: _zero_page(newest.read_bytes(), rng)},
        "other-config": lambda: {NEWEST: other_config},
        "older-only": lambda: {OLDER: _random_fault(older.read_bytes(), rng)},
        "both": lambda: {NEWEST: _random_fault(newest.read_bytes(), rng),
                         OLDER: _random_fault(older.read_bytes(), rng)},
        "non-finite": lambda: {NEWEST: _non_finite(directory, rng)},
    }
    corrupted = faults[kind]()
    for name, data in corrupted.items():
        (directory / name).write_bytes(data)
    return corrupted


def restart(directory: Path, corrupted: dict[str, bytes], good: dict[str, bytes],
            rounds: dict[str, int]) -> tuple[str, bool]:
    """Build node 0 on ``directory``; its outcome and whether nothing was overwritten."""
    try:
        node = memory_node(MemoryNetwork(), directory, SPEC, 0, "10.0.0.1:7000")
    except CheckpointConflict:
        outcome = "refused"  # another config or identity: exit 2, files untouched
    except CheckpointCorrupt:
        outcome = "refused"  # both corrupt: exit 2, both moved aside
    else:
        resumed = node.resumed_at
        if NEWEST in corrupted and resumed == rounds[OLDER]:
            outcome = "fallen back"
        elif NEWEST in corrupted:
            outcome = "loaded silently"
        elif resumed == rounds[NEWEST] and list(directory.glob(f"{OLDER}.corrupt-*")):
            outcome = "refused"  # the corrupt older one was set aside
        else:
            outcome = "loaded silently"
    kept = True
    for name, data in corrupted.items():
        aside = list(directory.glob(f"{name}.corrupt-*"))
        present = (directory / name).read_bytes() if (directory / name).exists() else None
        kept &= data in [p.read_bytes() for p in aside] + [present]
    for name, data in good.items():
        if name not in corrupted:
            kept &= (directory / name).read_bytes() == data
    return outcome, kept


def run(cases: int, seed: int, root: Path) -> dict[str, Any]:
    """``cases`` faults, kinds in turn; the outcomes per kind and in all."""
    source, other_config = trio.run(prepare, root)
    good = {name: (source / name).read_bytes() for name in (NEWEST, OLDER)}
    rounds = {}
    for name in (NEWEST, OLDER):
        state = CheckpointStore(source).load(path=source / name)
        assert state is not None
        rounds[name] = state.round
    rng = np.random.default_rng(seed)
    per_kind: dict[str, Counter[str]] = {kind: Counter() for kind in KINDS}
    overwritten = 0
    for i in range(cases):
        kind = KINDS[i % len(KINDS)]
        directory = root / "cases" / f"{i:03d}"
        shutil.copytree(source, directory)
        corrupted = inject(kind, directory, other_config, rng)
        outcome, kept = restart(directory, corrupted, good, rounds)
        per_kind[kind][outcome] += 1
        overwritten += not kept
        shutil.rmtree(directory)
    total: Counter[str] = sum(per_kind.values(), Counter())
    return {"cases": cases, "seed": seed, "loaded_silently": total["loaded silently"],
            "refused": total["refused"], "fallen_back": total["fallen back"],
            "overwritten": overwritten,
            "per_kind": {k: dict(v) for k, v in per_kind.items()}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=200, help="faults injected (default 200)")
    p.add_argument("--seed", type=int, default=0, help="seed of the faults (default 0)")
    p.add_argument("--json", type=Path, metavar="PATH", help="write the figures as JSON")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # each case's fallback line is the outcome
    with tempfile.TemporaryDirectory(prefix="checkpoint-faults-") as tmp:
        result = run(args.cases, args.seed, Path(tmp))
    for kind, outcomes in result["per_kind"].items():
        print(f"{kind:>13}: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    print(f"{result['cases']} corrupted checkpoints: loaded silently "
          f"{result['loaded_silently']}, refused or fallen back "
          f"{result['refused'] + result['fallen_back']} (refused {result['refused']}, "
          f"fallen back {result['fallen_back']}); files overwritten {result['overwritten']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if result["loaded_silently"] == 0 and result["overwritten"] == 0 else 1
