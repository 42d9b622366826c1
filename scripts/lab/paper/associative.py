"""The thesis' associative-network experiment (ch. 3 V.5) averaged through push-sum.

15 peers each train an :class:`learner.associative.AssociativeNetwork` (50
visible, 400 hidden neurons, learning rate 0.1, threshold 0.5) on a sparse
binary completion task; 2 peers have 1 of their 3 vectors modified. After every
mini-batch the shared partial model is averaged among the peers by the
project's push-sum cores (:class:`lab.sim.pushsum.Simulation`, the
``PushSum`` the daemon runs), carried in and out of each network by
:class:`gossip.model_sync.ModelSync` exactly as in the daemon. Schemes: no
averaging, partial averaging (the whole visible layer and 300 or 350 of the 400
hidden neurons; ``--levels``, the thesis also tried 100 and 200) and full
averaging; accuracy after 10, 20 and 30 mini-batches (``--checkpoints``, the
thesis also reports 40).

The task is the thesis' generator (ch. 3 V.5; every peer holds the same batch,
the thesis' generator being a function of ``k`` only). Vector ``k`` has ``m``
input 1s at ``3m (k mod s) + i`` (``i < m``) and ``m`` completion 1s at
``3m (k mod s) + i`` (``m <= i < 2m``; a modified peer uses ``2m <= i < 3m``
for the vectors with ``k mod s == 1``), coordinates modulo ``n = 50``,
periodicity ``s = 3``; the ``z = 2`` bits ``((k div s) + i n/z) mod n`` are
flipped in every vector. Training batch ``k = 0..8``, mini-batches of 3 drawn
from it; tests: the input part of ``k = 1000..1099``, expected to come back as
the complete vector. A test succeeds when expected AND returned has at least as
many 1s as expected XOR returned (the thesis' criterion).

Defaults follow the thesis where it speaks; where it is silent or
inconsistent, an option shows the alternative (docs/guide/strategies.md gives each
choice and its source line):

- ``--shared-init``: ``independent`` (default) lets each peer draw its whole
  network from its own seed, as the thesis' peers build their own randomly
  initialised networks; ``common`` (the project's rule) starts the shared
  model identically on every peer, from its fingerprint.
- ``--m``: 8 (default, the thesis' value; its generator then runs past bit 50
  and wraps); 4 reads "m = 8 (non-zero bits)" as 8 ones per complete vector,
  which fits the generator in 50 bits.
- ``--overflow``: ``wrap`` (default) takes the generator's coordinates past
  bit 50 modulo 50; ``drop`` leaves them out.
- ``--expected``: ``noisy`` (default) expects the complete test vector with its
  noise bits flipped; ``clean`` without.

Each cell: the mean accuracy over the 15 peers, median over seeds with the
interquartile range, and the paired difference (same seed: same local
initial weights and mini-batch order) partial minus none and partial minus
full, median and min..max over seeds.

    python scripts/paper/associative.py --seeds 7 --checkpoints 10,20,30,40
    python scripts/paper/associative.py --shared-init common --levels 300 --json out.json
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gossip.model_sync import ModelSync, VectorModel
from lab.sim.pushsum import ModelSpec, Simulation
from learner.associative import AssociativeNetwork, AssociativeSettings, associative_network_spec
from learner.layout import ModelLayout
from learner.spec import PartialModelSpec

logger = logging.getLogger(__name__)

PEERS = 15
MODIFIED = (0, 1)  # the peers whose task differs (2 of 15, as in the thesis)
HIDDEN = 400
CHECKPOINTS = (10, 20, 30)  # the thesis also reports 40 (--checkpoints)
PARTIAL_LEVELS = (300, 350)  # the thesis also tried 100 and 200 (--levels)
#: What the generator does with coordinates past the vector's end (ThesisTask.overflow).
OVERFLOWS = ("wrap", "drop")
#: Added to a peer's seed for its own draw of the shared model (``--shared-init independent``).
INDEPENDENT_SEED_OFFSET = 10**9


# ----------------------------------------------------------------- tasks
@dataclass(frozen=True)
class PeerData:
    """One peer's completion task: complete training vectors, test inputs and expectations."""

    train: np.ndarray  # (n_train, visible) 0/1
    test_input: np.ndarray  # (n_test, visible) 0/1
    test_expected: np.ndarray  # (n_test, visible) 0/1


@dataclass(frozen=True)
class ThesisTask:
    """The thesis' sparse-vector generator (V.5), parameters as in the thesis.

    ``m``: input 1s per vector (the thesis: 8; its generator then writes
    coordinates up to ``3m s - 1 = 71`` of a 50-bit vector). ``overflow``:
    what becomes of a coordinate past ``n``: ``"wrap"`` takes it modulo ``n``,
    ``"drop"`` leaves it out (the vector then has fewer 1s). ``noisy_expected``: whether the expected output of a
    test carries the test vector's noise (the thesis flips the noise bits in
    every vector fed to the network; the expected output is not fed to it).
    """

    n: int = 50
    m: int = 8
    s: int = 3
    z: int = 2
    batch: int = 9
    test_start: int = 1000
    tests: int = 100
    modified_residue: int = 1
    noisy_expected: bool = True
    overflow: str = "wrap"

    def __post_init__(self) -> None:
        if not 0 < 2 * self.m <= self.n:
            raise ValueError(f"task: m={self.m} needs 0 < 2m <= n={self.n}")
        if not 0 <= self.z <= self.n or self.s < 1 or self.batch < 1 or self.tests < 1:
            raise ValueError(f"task: z={self.z}, s={self.s}, batch={self.batch}, "
                             f"tests={self.tests} out of range")
        if self.overflow not in OVERFLOWS:
            raise ValueError(f"task: overflow {self.overflow!r} is not one of {OVERFLOWS}")
        if not 0 <= self.modified_residue < self.s:
            raise ValueError(f"task: modified_residue {self.modified_residue} is not in "
                             f"0..{self.s - 1}")

    @property
    def visible(self) -> int:
        return self.n

    def vectors(self, k: int, modified: bool) -> tuple[np.ndarray, np.ndarray]:
        """(test input, complete vector) number ``k``, noise included."""
        given, full = self.clean_vectors(k, modified)
        noise = [((k // self.s) + i * (self.n // self.z)) % self.n for i in range(self.z)]
        for v in (given, full):
            v[noise] = 1 - v[noise]
        return given, full

    def clean_vectors(self, k: int, modified: bool) -> tuple[np.ndarray, np.ndarray]:
        """(test input, complete vector) number ``k`` before the noise bits are flipped."""
        n, m = self.n, self.m
        base = 3 * m * (k % self.s)
        first = 2 * m if modified and k % self.s == self.modified_residue else m
        given = np.zeros(n)
        given[self._coordinates(base, range(m))] = 1
        full = given.copy()
        full[self._coordinates(base, range(first, first + m))] = 1
        return given, full

    def _coordinates(self, base: int, offsets: range) -> list[int]:
        """Coordinates ``base + i``: taken modulo ``n``, or those past ``n`` left out."""
        if self.overflow == "wrap":
            return [(base + i) % self.n for i in offsets]
        return [base + i for i in offsets if base + i < self.n]

    def peer(self, modified: bool) -> PeerData:
        train = np.array([self.vectors(k, modified)[1] for k in range(self.batch)])
        ks = range(self.test_start, self.test_start + self.tests)
        inputs = np.array([self.vectors(k, modified)[0] for k in ks])
        if self.noisy_expected:
            expected = np.array([self.vectors(k, modified)[1] for k in ks])
        else:
            expected = np.array([self.clean_vectors(k, modified)[1] for k in ks])
        return PeerData(train, inputs, expected)

    def accuracy(self, net: AssociativeNetwork, data: PeerData) -> float:
        out = net.complete(data.test_input).astype(bool)
        expected = data.test_expected.astype(bool)
        hits = (out & expected).sum(axis=1)
        misses = (out ^ expected).sum(axis=1)
        return float(np.mean(hits >= misses))


# ------------------------------------------------------------- one run
#: A task's scoring of one trained network on one peer's tests.
Accuracy = Callable[[AssociativeNetwork, PeerData], float]


def scheme_counts(scheme: str, visible: int) -> tuple[int, ...] | None:
    """Counts of the shared model (visible-hidden-visible), None for no averaging."""
    if scheme == "none":
        return None
    hidden = HIDDEN if scheme == "full" else int(scheme)
    return (visible, hidden, visible)


def run_scheme(scheme: str, peers: Sequence[PeerData], accuracy: Accuracy, seed: int, *,
               visible: int, rounds: int, checkpoints: Sequence[int],
               shared_init: str = "independent") -> dict[str, object]:
    """Train the peers for ``max(checkpoints)`` mini-batches under ``scheme``.

    ``shared_init``: ``"independent"`` starts the shared model from each peer's
    own seed (the thesis' peers initialise their own networks), so the first
    averaging mixes different networks; ``"common"`` starts it from its
    fingerprint on every peer (the project's rule).
    """
    counts = scheme_counts(scheme, visible)
    spec = associative_network_spec(visible, HIDDEN)
    # the seed is in the model's name, so each seed starts the shared part elsewhere
    models = [] if counts is None else [PartialModelSpec(f"shared{seed}", counts)]
    layout = ModelLayout(spec, models)
    settings = AssociativeSettings()
    nets = [AssociativeNetwork(layout, seed * 1000 + p, settings) for p in range(len(peers))]
    batch_rngs = [np.random.default_rng([seed, p]) for p in range(len(peers))]
    syncs: list[ModelSync] = []
    sim: Simulation | None = None
    if counts is not None:
        name = layout.shared_models[0]
        if shared_init == "independent":
            for net in nets:
                # a stream apart from the one that drew the peer's local weights
                net.assign(name, net.initial_values(name, seed=INDEPENDENT_SEED_OFFSET + net.seed))
        initial = np.array([net.extract(name) for net in nets])
        sim = Simulation([ModelSpec(name, tuple(range(len(peers))), initial)],
                         seed=seed)
        networks: list[VectorModel] = list(nets)
        syncs = [ModelSync(net, {name: sim.cores[(p, name)]}) for p, net in enumerate(networks)]
    out: dict[str, object] = {}
    spread: list[float] = []
    for batch in range(1, max(checkpoints) + 1):
        for net, data, rng in zip(nets, peers, batch_rngs, strict=True):
            chosen = rng.choice(len(data.train), size=min(3, len(data.train)), replace=False)
            net.learn(data.train[chosen])
        if sim is not None:
            for s in syncs:
                s.sync()  # fold this mini-batch into the push-sum cores
            sim.run(rounds)
            sim.drain()
            for s in syncs:
                s.sync()  # load the averaged values
            name = layout.shared_models[0]
            vals = np.array([net.extract(name) for net in nets])
            spread.append(float(np.abs(vals - vals.mean(axis=0)).max()))
        if batch in checkpoints:
            accs = [accuracy(net, data) for net, data in zip(nets, peers, strict=True)]
            out[str(batch)] = {
                "mean": float(np.mean(accs)),
                "modified": float(np.mean([accs[p] for p in MODIFIED])),
                "unmodified": float(np.mean([a for p, a in enumerate(accs) if p not in MODIFIED])),
            }
    out["max_gossip_deviation"] = max(spread) if spread else 0.0
    return out


# ---------------------------------------------------------------- table
def _q(xs: Sequence[float], q: float) -> float:
    return float(np.quantile(np.asarray(xs, dtype=float), q))


def summarise(results: dict[str, list[dict[str, object]]],
              checkpoints: Sequence[int], best: str) -> dict[str, object]:
    """Medians with IQR per scheme, and paired differences of ``best`` against none and full."""
    table: dict[str, object] = {}
    for scheme, runs in results.items():
        row = {}
        for c in checkpoints:
            xs = [float(r[str(c)]["mean"]) for r in runs]  # type: ignore[index]
            mod = [float(r[str(c)]["modified"]) for r in runs]  # type: ignore[index]
            row[str(c)] = {"median": _q(xs, 0.5), "q25": _q(xs, 0.25), "q75": _q(xs, 0.75),
                           "min": min(xs), "max": max(xs), "modified_median": _q(mod, 0.5)}
        table[scheme] = row
    diffs: dict[str, object] = {}
    for other in ("none", "full"):
        if other not in results or best not in results:
            continue
        per: dict[str, object] = {}
        for c in checkpoints:
            d = [float(a[str(c)]["mean"]) - float(b[str(c)]["mean"])  # type: ignore[index]
                 for a, b in zip(results[best], results[other], strict=True)]
            per[str(c)] = {"median": _q(d, 0.5), "min": min(d), "max": max(d),
                           "wins": sum(x > 0 for x in d), "runs": len(d)}
        diffs[f"{best}-{other}"] = per
    return {"table": table, "paired": diffs}


def format_table(summary: dict[str, object], checkpoints: Sequence[int]) -> str:
    lines = ["scheme  " + "".join(f"{c:>24}" for c in checkpoints),
             "        " + "".join(f"{'median [q25-q75]':>24}" for _ in checkpoints)]
    table = summary["table"]
    assert isinstance(table, dict)
    for scheme, row in table.items():
        cells = "".join(f"{row[str(c)]['median']:>10.3f} [{row[str(c)]['q25']:.3f}-"
                        f"{row[str(c)]['q75']:.3f}]" for c in checkpoints)
        lines.append(f"{scheme:<8}{cells}")
    paired = summary["paired"]
    assert isinstance(paired, dict)
    lines.append("")
    lines.append("paired difference, median [min..max] (wins/runs)")
    for label, per in paired.items():
        cells = "".join(f"{per[str(c)]['median']:>+8.3f} [{per[str(c)]['min']:+.3f}.."
                        f"{per[str(c)]['max']:+.3f}] ({per[str(c)]['wins']}/{per[str(c)]['runs']})"
                        for c in checkpoints)
        lines.append(f"{label:<14}{cells}")
    return "\n".join(lines)


# ------------------------------------------------------------------ main
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared-init", choices=("common", "independent"), default="independent",
                        help="shared model's start: drawn by each peer from its own seed (default, "
                             "as the thesis' peers) or the same on every peer (the project's rule)")
    parser.add_argument("--m", type=int, default=8,
                        help="input 1s per vector (thesis: 8; 4 reads its 'm = 8 (non-zero bits)' "
                             "as 8 ones in a complete vector)")
    parser.add_argument("--overflow", choices=OVERFLOWS, default="wrap",
                        help="generator coordinates past bit n: taken modulo n (default) or "
                             "left out")
    parser.add_argument("--expected", choices=("noisy", "clean"), default="noisy",
                        help="expected test output: the complete vector with its noise bits "
                             "flipped (default) or without")
    parser.add_argument("--seeds", type=int, default=7, help="number of seeds (default 7)")
    parser.add_argument("--levels", default=",".join(map(str, PARTIAL_LEVELS)),
                        help="hidden neurons shared by the partial schemes (comma-separated)")
    parser.add_argument("--best", type=int, default=300,
                        help="partial level compared pairwise with none and full (default 300)")
    parser.add_argument("--rounds", type=int, default=6,
                        help="push-sum rounds after each mini-batch (default 6)")
    parser.add_argument("--checkpoints", default=",".join(map(str, CHECKPOINTS)))
    parser.add_argument("--json", nargs="?", const="-", metavar="PATH",
                        help="write the results as JSON (to stdout with no PATH)")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    levels = [int(x) for x in args.levels.split(",") if x]
    checkpoints = [int(x) for x in args.checkpoints.split(",") if x]
    if any(not 0 < lv < HIDDEN for lv in levels) or args.best not in levels:
        print(f"--levels must be in 1..{HIDDEN - 1} and include --best", file=sys.stderr)
        return 2
    schemes = ["none", *map(str, levels), "full"]
    results: dict[str, list[dict[str, object]]] = {s: [] for s in schemes}
    try:
        task = ThesisTask(m=args.m, noisy_expected=args.expected == "noisy",
                          overflow=args.overflow)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    peers = [task.peer(p in MODIFIED) for p in range(PEERS)]
    for seed in range(args.seeds):
        for scheme in schemes:
            results[scheme].append(run_scheme(scheme, peers, task.accuracy, seed,
                                              visible=task.visible, rounds=args.rounds,
                                              checkpoints=checkpoints,
                                              shared_init=args.shared_init))
        logger.info("seed %d done", seed)
    summary = summarise(results, checkpoints, str(args.best))
    deviation = max(float(r["max_gossip_deviation"]) for runs in results.values()  # type: ignore[arg-type]
                    for r in runs)
    report = {"shared_init": args.shared_init, "m": args.m, "expected": args.expected,
              "overflow": args.overflow,
              "seeds": args.seeds, "peers": PEERS, "modified": list(MODIFIED),
              "rounds_per_batch": args.rounds, "max_gossip_deviation": deviation,
              "checkpoints": checkpoints, **summary, "runs": results}
    if args.json == "-":
        print(json.dumps(report, indent=1))
    else:
        print(f"shared init {args.shared_init}, m={args.m} ({args.overflow} past bit "
              f"{task.n}), {args.expected} expected output, "
              f"{PEERS} peers ({len(MODIFIED)} modified), {args.seeds} seeds, "
              f"{args.rounds} push-sum rounds per mini-batch; largest gap between a holder "
              f"and the holders' mean after gossip: {deviation:.2e}")
        print(format_table(summary, checkpoints))
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(main())
