"""Gossip-only simulation at scale: peer sampling and push-sum, no training, no torch.

Drives the daemon's own sans-IO cores cycle by cycle (as PeerSim's
cycle-driven mode): every node runs a :class:`~peersampling.PeerSampler` inside
:class:`~peersampling.Simulator` and a :class:`~gossip.pushsum.PushSum` core
averaging a static vector. A period is one shuffle per node, then one push-sum
exchange per node, completed at once. It measures per period the time (peer
sampling and push-sum apart), push-sum's error, the overlay and the rare-model
holder lookup. The engines (``--peer-sampling-engine`` with
:class:`~peersampling.lean.LeanPeriods`, ``--pushsum-engine`` with
:class:`BatchedPushPull`) and the signature and descriptor-check options change
only the cost, never the result; the output names the choices made.

Entry points: :func:`add_gossip_only_arguments`, :func:`run_gossip_only`.
Flags and output: docs/guide/simulation.md ("Gossip-only mode").
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import logging
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace

import numpy as np

from gossip.errors import RejectedAck, RejectedPush
from gossip.pushsum import PushSum
from peersampling import PeerSampler, SamplerTuning, Simulator
from peersampling.graph import in_degree_stats
from peersampling.lean import LeanPeriods, sample_address

log = logging.getLogger(__name__)

SIGNATURE_MODES = ("off", "shared-cache", "per-node")
#: How received descriptors are checked: "full" (every field of every received
#: descriptor, as a daemon does) or "in-process" (the core's ``in_process``
#: option: descriptors handed over by another core of this process were
#: checked when they entered it, so their fields are not checked again; the
#: views are the same, see ``tests/test_peersampling_pinned.py``).
DESCRIPTOR_CHECKS = ("in-process", "full")
#: How push-sum rounds run: every node's own :class:`~gossip.pushsum.PushSum` core
#: ("cores", the reference), or one numpy pass over the period's exchanges
#: (:class:`BatchedPushPull`, checked against the cores by the tests); "auto"
#: picks "batched" when it applies (no loss, f64 wire formats), else "cores".
PUSHSUM_ENGINES = ("auto", "cores", "batched")
#: How peer-sampling periods run: ``Simulator.run_period`` ("cores") or
#: :class:`~peersampling.lean.LeanPeriods` ("lean": the same draws and views,
#: plain exchanges without messages and checks); "auto" picks "lean" unless
#: the signatures are checked per node (a mode meant to measure those checks).
PEER_SAMPLING_ENGINES = ("auto", "cores", "lean")
#: The model every node holds and averages (its static vector).
GLOBAL_MODEL = hashlib.sha256(b"gossip-scale-global-model").digest()
#: The semi-local model held by a few nodes (holder lookup).
RARE_MODEL = hashlib.sha256(b"gossip-scale-rare-model").digest()


@dataclass(frozen=True)
class GossipScaleConfig:
    """One gossip-only run (the flags of :func:`add_gossip_only_arguments`)."""

    nodes: int = 10_000
    periods: int = 40
    seed: int = 0
    view_size: int = 20
    shuffle_length: int = 5
    dim: int = 8
    signatures: str = "shared-cache"
    # lossless and the cheapest to encode: the errors are push-sum's alone
    # (the daemon's defaults are f32 / int8: --encoding f32 --delta-encoding int8)
    encoding: str = "f64"
    delta_encoding: str = "f64"
    loss: float = 0.0
    crash: float = 0.0
    crash_at: int = 20
    holders: int = 3
    holders_at: int = 5
    period_seconds: float = 1.0
    ack_timeout: float = 2.0
    pushsum: bool = True  # False: peer sampling only (overlay and holder lookup figures)
    pushsum_engine: str = "auto"
    # peersampling's lookup_small (None: the core's default, l; 0: the rule before issue 17)
    lookup_small: int | None = None
    descriptor_checks: str = "in-process"
    peer_sampling_engine: str = "auto"

    def __post_init__(self) -> None:
        if self.nodes < 2:
            raise ValueError(f"nodes: expected >= 2, got {self.nodes}")
        if self.periods < 1:
            raise ValueError(f"periods: expected >= 1, got {self.periods}")
        if self.dim < 1:
            raise ValueError(f"dim: expected >= 1, got {self.dim}")
        if self.signatures not in SIGNATURE_MODES:
            raise ValueError(f"signatures: expected one of {SIGNATURE_MODES}, "
                             f"got {self.signatures!r}")
        if not 0.0 <= self.loss < 1.0:
            raise ValueError(f"loss: expected a probability in [0, 1), got {self.loss}")
        if not 0.0 <= self.crash < 1.0:
            raise ValueError(f"crash: expected a fraction in [0, 1), got {self.crash}")
        if not 0 <= self.holders < self.nodes:
            raise ValueError(f"holders: expected 0..nodes-1, got {self.holders}")
        if self.period_seconds <= 0:
            raise ValueError(f"period_seconds: expected > 0, got {self.period_seconds}")
        if self.descriptor_checks not in DESCRIPTOR_CHECKS:
            raise ValueError(f"descriptor_checks: expected one of {DESCRIPTOR_CHECKS}, "
                             f"got {self.descriptor_checks!r}")
        if self.peer_sampling_engine not in PEER_SAMPLING_ENGINES:
            raise ValueError(f"peer_sampling_engine: expected one of {PEER_SAMPLING_ENGINES}, "
                             f"got {self.peer_sampling_engine!r}")
        if self.pushsum_engine not in PUSHSUM_ENGINES:
            raise ValueError(f"pushsum_engine: expected one of {PUSHSUM_ENGINES}, "
                             f"got {self.pushsum_engine!r}")
        if self.pushsum_engine == "batched" and not self.batched_applies:
            raise ValueError("pushsum_engine: 'batched' needs --loss 0 and f64 encodings "
                             "(lossless exchanges that complete at once); use 'cores'")

    @property
    def batched_applies(self) -> bool:
        """Whether :class:`BatchedPushPull` computes what the cores would (within rounding)."""
        return self.loss == 0.0 and self.encoding == "f64" and self.delta_encoding == "f64"

    @property
    def sampling_engine(self) -> str:
        """The peer-sampling engine this run uses ("cores" or "lean")."""
        if self.peer_sampling_engine == "auto":
            # per-node signatures and full checks exist to measure what a daemon checks
            full = self.signatures == "per-node" or self.descriptor_checks == "full"
            return "cores" if full else "lean"
        return self.peer_sampling_engine

    @property
    def engine(self) -> str:
        """The push-sum engine this run uses ("cores" or "batched")."""
        if self.pushsum_engine == "auto":
            return "batched" if self.batched_applies else "cores"
        return self.pushsum_engine


def add_gossip_only_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of the gossip-only mode (``--gossip-only`` and ``--json`` are the caller's)."""
    d = GossipScaleConfig()
    g = parser.add_argument_group("gossip-only")
    g.add_argument("--nodes", type=int, default=d.nodes, help=f"nodes (default {d.nodes})")
    g.add_argument("--periods", "--rounds", dest="periods", type=int, default=d.periods,
                   help=f"simulated periods (default {d.periods})")
    g.add_argument("--seed", type=int, default=d.seed, help="seed of the whole run (default 0)")
    g.add_argument("--view-size", type=int, default=d.view_size,
                   help=f"peer sampling view size c (default {d.view_size})")
    g.add_argument("--shuffle-length", type=int, default=d.shuffle_length,
                   help=f"peer sampling shuffle length l (default {d.shuffle_length})")
    g.add_argument("--dim", type=int, default=d.dim,
                   help=f"length of each node's static vector (default {d.dim})")
    g.add_argument("--signatures", choices=SIGNATURE_MODES, default=d.signatures,
                   help="descriptor signatures of the simulated identities: off, checked "
                        "through one cache shared by all nodes (default), or per-node caches")
    g.add_argument("--encoding", default=d.encoding,
                   help=f"push-sum wire encoding of absolute values (default {d.encoding})")
    g.add_argument("--delta-encoding", default=d.delta_encoding,
                   help=f"push-sum encoding of deltas and replies (default {d.delta_encoding})")
    g.add_argument("--loss", type=float, default=d.loss,
                   help="probability that a message (and, independently, its answer) is lost")
    g.add_argument("--crash", type=float, default=d.crash, metavar="FRACTION",
                   help="crash this fraction of the nodes at --crash-at (default 0)")
    g.add_argument("--crash-at", type=int, default=d.crash_at, metavar="PERIOD",
                   help=f"period of the crash (default {d.crash_at})")
    g.add_argument("--holders", type=int, default=d.holders,
                   help=f"holders of the rare model for the lookup figures (default {d.holders}; "
                        "0: no lookup)")
    g.add_argument("--holders-at", type=int, default=d.holders_at, metavar="PERIOD",
                   help=f"period at which they start holding it (default {d.holders_at})")
    g.add_argument("--period-seconds", type=float, default=d.period_seconds,
                   help="simulated seconds per period (peer_sampling.period, default 1.0)")
    g.add_argument("--pushsum", action=argparse.BooleanOptionalAction, default=True,
                   help="run a push-sum round every period (default); --no-pushsum: peer "
                        "sampling only, for the overlay and holder lookup figures")
    g.add_argument("--pushsum-engine", choices=PUSHSUM_ENGINES, default=d.pushsum_engine,
                   help="push-sum rounds: each node's own PushSum core (cores, the reference), "
                        "one numpy pass per period checked against the cores (batched: lossless "
                        "f64 runs only), or batched when it applies (auto, default)")
    g.add_argument("--peer-sampling-engine", choices=PEER_SAMPLING_ENGINES,
                   default=d.peer_sampling_engine,
                   help="peer-sampling periods: every exchange through the cores' message "
                        "handlers (cores), or plain exchanges on the cores' state without "
                        "messages and checks, same draws and views (lean), or lean unless "
                        "--signatures per-node (auto, default)")
    g.add_argument("--lookup-small", type=int, default=d.lookup_small, metavar="K",
                   help="holders keep asking for partners every period while their model view "
                        "holds fewer than K holders (default: the core's, l; 0: the rule before "
                        "issue 17, one lookup every 4 periods once one partner is known)")
    g.add_argument("--descriptor-checks", choices=DESCRIPTOR_CHECKS, default=d.descriptor_checks,
                   help="received descriptors: fields not checked again when another core of "
                        "this process sent them (in-process, default: same views, less time) "
                        "or every field checked as a daemon does (full)")
    g.add_argument("--quiet", action="store_true", help="no per-period progress on stderr")


def config_from_args(args: argparse.Namespace) -> GossipScaleConfig:
    """The run described by parsed flags (ValueError naming a bad one)."""
    return GossipScaleConfig(
        nodes=args.nodes, periods=args.periods, seed=args.seed, view_size=args.view_size,
        shuffle_length=args.shuffle_length, dim=args.dim, signatures=args.signatures,
        encoding=args.encoding, delta_encoding=args.delta_encoding, loss=args.loss,
        crash=args.crash, crash_at=args.crash_at, holders=args.holders,
        holders_at=args.holders_at, period_seconds=args.period_seconds, pushsum=args.pushsum,
        pushsum_engine=getattr(args, "pushsum_engine", "auto"),
        lookup_small=getattr(args, "lookup_small", None),
        descriptor_checks=getattr(args, "descriptor_checks", "in-process"),
        peer_sampling_engine=getattr(args, "peer_sampling_engine", "auto"),
    )


def run_gossip_only(args: argparse.Namespace) -> dict[str, object]:
    """Run the gossip-only simulation the flags describe; return the JSON document."""
    progress = None if getattr(args, "quiet", False) else _print_progress
    return GossipScale(config_from_args(args)).run(progress)


def _print_progress(row: dict[str, object]) -> None:
    print(f"period {row['period']}: {row['wall_seconds']:.3f} s wall, {row['cpu_seconds']:.3f} s "
          f"CPU (peer sampling {row['peer_sampling_seconds']:.3f}, push-sum "
          f"{row['pushsum_seconds']:.3f}); push-sum max error {row['pushsum_max_error']}",
          file=sys.stderr, flush=True)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (reference counting still frees everything).

    A period at 10,000 nodes allocates some 10^5 short-lived descriptors and
    messages among millions of long-lived objects, so the collector would
    run hundreds of times per period and now and then walk every object;
    the cores make no reference cycles (a run of 10 periods leaves no cyclic
    garbage), so pausing it changes nothing but the time.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def node_peer_id(index: int) -> bytes:
    """The push-sum peer id of node ``index``."""
    return index.to_bytes(4, "big")


class GossipScale:
    """The population of one gossip-only run: samplers, push-sum cores, static vectors."""

    def __init__(self, config: GossipScaleConfig) -> None:
        self.config = cfg = config
        self.sim = Simulator(
            c=cfg.view_size, l=cfg.shuffle_length, seed=cfg.seed, loss=cfg.loss,
            signatures=cfg.signatures != "off",
            shared_signature_cache=cfg.signatures != "per-node",
            **_sampler_options(cfg),
        )
        started = time.perf_counter()
        with _collector_paused():
            self.addresses = self.sim.add_nodes(cfg.nodes)
            self.sim.fill_random_views()
        self.index = {a: i for i, a in enumerate(self.addresses)}
        self.lean = LeanPeriods(self.sim) if cfg.sampling_engine == "lean" else None
        self.rng = np.random.default_rng(cfg.seed)
        self.vectors = self.rng.normal(1.0, 1.0, size=(cfg.nodes, cfg.dim))
        self.truth = self.vectors.mean(axis=0)
        self.engine = cfg.engine if cfg.pushsum else "none"
        # push ids come from their own stream: both engines then draw the same
        # orders and holders from self.rng, so their runs can be compared
        ids_rng = np.random.default_rng([cfg.seed, 1])
        self.cores = [
            PushSum(GLOBAL_MODEL, self.vectors[i], rng=ids_rng, encoding=cfg.encoding,
                    delta_encoding=cfg.delta_encoding)
            for i in range(cfg.nodes)
        ] if self.engine == "cores" else []
        self.batched = BatchedPushPull(self.vectors) if self.engine == "batched" else None
        self.peer_ids = [node_peer_id(i) for i in range(cfg.nodes)]
        self.alive = np.ones(cfg.nodes, dtype=bool)
        self.setup_seconds = time.perf_counter() - started
        self.period = 0
        self.pushes = self.lost = self.refused = 0
        self.holders: list[int] = []
        self.joiner: int | None = None

    # ------------------------------------------------------------------ running

    def run(self, progress: Callable[[dict[str, object]], None] | None = None
            ) -> dict[str, object]:
        """Run every period; return the JSON document (see the module docstring)."""
        cfg = self.config
        rows: list[dict[str, object]] = []
        lookup = _HolderLookup(self) if cfg.holders else None
        started = time.perf_counter()
        with _collector_paused():
            for _ in range(cfg.periods):
                row = self.step()
                if lookup is not None:
                    lookup.observe(self.period)
                rows.append(row)
                if progress is not None:
                    progress(row)
        wall = time.perf_counter() - started
        period_walls = [float(r["wall_seconds"]) for r in rows]  # type: ignore[arg-type]
        last = rows[-1]
        return {
            "mode": "gossip-only",
            "nodes": cfg.nodes,
            "mean_accuracy": None,
            "worst_accuracy": None,
            "wall_seconds": wall,
            "simulated_seconds": cfg.periods * cfg.period_seconds,
            "periods": cfg.periods,
            "setup_seconds": self.setup_seconds,
            # flat copies of the headline figures (a one-line summary prints scalars only)
            "seconds_per_period_median": statistics.median(period_walls),
            "seconds_per_period_max": max(period_walls),
            "cpu_seconds_per_period_median": statistics.median(
                [float(r["cpu_seconds"]) for r in rows]),  # type: ignore[arg-type]
            "seconds_per_period": _spread(period_walls),
            "peer_sampling_seconds_per_period": _spread(
                [float(r["peer_sampling_seconds"]) for r in rows]),  # type: ignore[arg-type]
            "pushsum_seconds_per_period": _spread(
                [float(r["pushsum_seconds"]) for r in rows]),  # type: ignore[arg-type]
            "cpu_seconds_per_period": _spread(
                [float(r["cpu_seconds"]) for r in rows]),  # type: ignore[arg-type]
            "signatures": cfg.signatures,
            "signature_note": self.signature_note,
            "descriptor_checks": cfg.descriptor_checks,
            "descriptor_checks_note": self.descriptor_checks_note,
            "peer_sampling_engine": self.config.sampling_engine,
            "peer_sampling_engine_note": self.sampling_engine_note,
            "peer_sampling_turns": self.sampling_turns,
            "pushsum_engine": self.engine,
            "pushsum_max_error": last["pushsum_max_error"],
            "pushsum_mean_error": last["pushsum_mean_error"],
            "periods_to_error_1e-2": _first_below(rows, 1e-2),
            "periods_to_error_1e-4": _first_below(rows, 1e-4),
            "pushes": self.pushes,
            "pushes_lost": self.lost,
            "pushes_refused": self.refused,
            "holder_lookup": lookup.summary() if lookup is not None else None,
            "config": asdict(cfg),
            "per_period": rows,
        }

    @property
    def signature_note(self) -> str:
        """How this run treats the signatures of simulated identities."""
        note = f"{self.config.signatures}: {self.sim.signature_note}"
        if self.lean is not None and self.config.signatures != "off":
            note += ("; lean peer-sampling engine: not checked on plain exchanges between "
                     "nodes holding no model (honest simulated signatures could only verify), "
                     "checked as said on every exchange the cores run")
        return note

    @property
    def sampling_engine_note(self) -> str:
        """How this run's peer-sampling periods ran."""
        if self.lean is None:
            return "cores: every exchange through the cores' message handlers (Simulator)"
        return ("lean: plain Cyclon exchanges between nodes holding no model run on the cores' "
                "state without messages, descriptor copies, field or signature checks (they "
                "could only accept honest in-process descriptors), with the same random draws "
                "and views as the cores; every other exchange (model views, lookups, holders' "
                "descriptors) goes through the cores, checks included")

    @property
    def sampling_turns(self) -> dict[str, int]:
        """Node turns (a node's shuffles of one period) run lean / by the cores; lean turns
        handed over to the cores midway (an exchange that met a holder's descriptor)."""
        if self.lean is None:
            return {}  # every turn by the cores
        return {"lean": self.lean.lean_turns, "cores": self.lean.core_turns,
                "lean_handed_over": self.lean.handed_over}

    @property
    def descriptor_checks_note(self) -> str:
        """How this run checks the descriptors the cores receive."""
        if self.config.descriptor_checks == "full":
            return "full: every field of every received descriptor is checked, as daemons do"
        return ("in-process: descriptors sent by another core of this process are not checked "
                "field by field again (they were when they entered it); own-id, duplicate, "
                "failed-peer and signature checks still run; same views as full checks")

    def step(self) -> dict[str, object]:
        """One period: crashes due now, every node's shuffles, then a push-sum round."""
        cfg = self.config
        self.period += 1
        crashed: list[str] = []
        if cfg.crash and self.period == cfg.crash_at:
            spare = [self.addresses[i] for i in self.holders]
            crashed = self.sim.crash_fraction(cfg.crash, spare=spare)
            for a in crashed:
                self.alive[self.index[a]] = False
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        if self.lean is not None:
            self.lean.run_period()
        else:
            self.sim.run_period()
        t1 = time.perf_counter()
        if self.batched is not None:
            self.batched.run(self._pushsum_pairs())
        elif cfg.pushsum:
            self._pushsum_round(float(self.period))
        t2 = time.perf_counter()
        cpu = time.process_time() - cpu0
        row: dict[str, object] = {
            "period": self.period,
            "wall_seconds": t2 - t0,
            "cpu_seconds": cpu,
            "peer_sampling_seconds": t1 - t0,
            "pushsum_seconds": t2 - t1,
            "crashed": len(crashed),
        }
        if cfg.pushsum:
            row.update(self.pushsum_errors())
        else:
            row.update(pushsum_max_error=None, pushsum_mean_error=None)
        row.update(self.overlay_stats())
        return row

    def _pushsum_round(self, now: float) -> None:
        """Every live node, in a random order, pushes to a peer from its main view.

        Exchanges complete at once; a lost push or ack is retransmitted by
        ``expire`` after ``ack_timeout`` periods; a push to a crashed node is
        refused (surely not merged), as the daemon's driver reports it.
        """
        cores, ids, index, alive = self.cores, self.peer_ids, self.index, self.alive
        nodes = self.sim.nodes
        loss = self.config.loss
        timeout = self.config.ack_timeout
        rnd = self.rng.random
        order = np.flatnonzero(alive)
        self.rng.shuffle(order)
        for i in order.tolist():
            core = cores[i]
            sampler = nodes[self.addresses[i]]
            sends = core.expire(now, timeout) if core.outstanding else []
            peer = sampler.sample()
            if peer is not None:
                j = index.get(peer.address)
                if j is not None:
                    sends = [*sends, *core.make_pushes([ids[j]], now)]
            for pid, push in sends:
                j = int.from_bytes(pid, "big")
                self.pushes += 1
                if not alive[j]:
                    self.refused += 1
                    core.on_undelivered(push.push_id, maybe_delivered=False)
                    continue
                if loss and rnd() < loss:
                    self.lost += 1
                    continue
                try:
                    ack = cores[j].on_push(ids[i], push, now)
                except RejectedPush:
                    core.on_undelivered(push.push_id, maybe_delivered=False)
                    continue
                if loss and rnd() < loss:
                    self.lost += 1
                    continue
                try:
                    core.on_ack(ids[j], ack, now)
                except RejectedAck:
                    pass  # a duplicate ack of a retransmission (counted by the core)

    def _pushsum_pairs(self) -> list[tuple[int, int]]:
        """The period's push-pull exchanges (initiator, responder), in the order they happen.

        Picked exactly as :meth:`_pushsum_round` picks them (same random order,
        same main-view samples); a push to a crashed node is refused and
        changes nothing, so it is counted and left out.
        """
        index, alive, addresses = self.index, self.alive, self.addresses
        nodes = self.sim.nodes
        order = np.flatnonzero(alive)
        self.rng.shuffle(order)
        pairs: list[tuple[int, int]] = []
        for i in order.tolist():
            # = nodes[...].sample().address: the same draw, no descriptor copy
            address = sample_address(nodes[addresses[i]])
            if address is None:
                continue
            j = index.get(address)
            if j is None:
                continue
            self.pushes += 1
            if alive[j]:
                pairs.append((i, j))
            else:
                self.refused += 1
        return pairs

    def estimates(self) -> np.ndarray:
        """Every node's push-sum estimate (one row per node, crashed ones included)."""
        if self.batched is not None:
            return self.batched.x
        return np.stack([core.estimate_view() for core in self.cores])

    # ------------------------------------------------------------------ metrics

    def pushsum_errors(self) -> dict[str, float]:
        """Relative L2 error of every live estimate against the true average of the vectors."""
        live = np.flatnonzero(self.alive)
        if self.batched is not None:
            estimates = self.batched.x[live]
        else:
            estimates = np.stack([self.cores[i].estimate_view() for i in live.tolist()])
        err = np.linalg.norm(estimates - self.truth, axis=1) / np.linalg.norm(self.truth)
        return {"pushsum_max_error": float(err.max()), "pushsum_mean_error": float(err.mean())}

    def overlay_stats(self) -> dict[str, float | int]:
        """In-degree spread, staleness (entry ages) and dead entries of the main views."""
        graph: dict[str, list[str]] = {}
        ages: list[int] = []
        for a, s in self.sim.nodes.items():
            view = s.view()
            graph[a] = [d.address for d in view]
            ages.extend(d.age for d in view)
        deg = in_degree_stats(graph)
        links = len(ages)
        dead = sum(1 for targets in graph.values() for t in targets if t not in graph)
        return {
            "in_degree_mean": deg.mean, "in_degree_std": deg.std,
            "in_degree_min": deg.min, "in_degree_max": deg.max,
            "view_age_mean": sum(ages) / links if links else 0.0,
            "view_age_max": max(ages) if ages else 0,
            "dead_entry_fraction": dead / links if links else 0.0,
        }

    def sampler(self, i: int) -> PeerSampler:
        return self.sim.nodes[self.addresses[i]]


class BatchedPushPull:
    """A period's push-pull exchanges between static vectors, as one numpy pass per layer.

    What :class:`~gossip.pushsum.PushSum` computes for a lossless push-pull
    exchange with fanout 1, f64 wire formats and nothing in flight (see
    ``PushSum.make_pushes``, ``_reply`` and ``on_ack``): the initiator A offers
    the share ``s = w_A / 2`` of values ``q_A = x_A``; the responder B keeps
    ``r = min(s, w_B / 2)`` back and, with ``d = x_B - q_A``, lands on
    ``x_B - d (s - r) / w_B' - d r / w_B'`` with ``w_B' = w_B + s - r``; A
    lands on ``x_A + d r / w_A'`` with ``w_A' = w_A - s + r``.  Same operations
    in the same order, so an exchange whose request carries absolute values
    gives the cores' bits; later requests of a pair carry a delta against the
    pair's reference, which the cores round once more (a few ulps).

    The exchanges of a period happen one after the other; they are cut into
    layers of exchanges that share no node, each exchange in the layer after
    the last one that touched either end, so every node sees its exchanges in
    the same order as in the sequential run.  Tests compare it with the cores
    (``tests/test_gossip_scale_engines.py``).
    """

    def __init__(self, vectors: np.ndarray) -> None:
        self.x = np.array(vectors, dtype=np.float64, copy=True)
        self.w = np.ones(self.x.shape[0], dtype=np.float64)
        self.layers = 0  # layers in the latest period

    def run(self, pairs: Sequence[tuple[int, int]]) -> None:
        """Apply the exchanges ``(initiator, responder)`` in order (no node with itself)."""
        if not pairs:
            self.layers = 0
            return
        last: dict[int, int] = {}
        layer_of: list[int] = []
        for i, j in pairs:
            k = max(last.get(i, -1), last.get(j, -1)) + 1
            last[i] = last[j] = k
            layer_of.append(k)
        ends = np.asarray(pairs, dtype=np.intp)
        layer = np.asarray(layer_of, dtype=np.intp)
        by_layer = np.argsort(layer, kind="stable")
        bounds = np.searchsorted(layer[by_layer], np.arange(layer[by_layer[-1]] + 2))
        self.layers = len(bounds) - 1
        x, w = self.x, self.w
        for k in range(self.layers):
            rows = by_layer[bounds[k]:bounds[k + 1]]
            a, b = ends[rows, 0], ends[rows, 1]
            wa, wb = w[a], w[b]
            s = wa / 2
            r = np.minimum(s, wb / 2)
            d = x[b] - x[a]  # responder's x - q_A
            new_wb = wb + s - r
            xb = x[b] - d * ((s - r) / new_wb)[:, None]
            xb -= d * (r / new_wb)[:, None]
            new_wa = wa - s + r
            x[a] += d * (r / new_wa)[:, None]
            x[b] = xb
            w[a], w[b] = new_wa, new_wb


class _HolderLookup:
    """How fast the holders of a rare model find each other, then a newcomer finds them."""

    def __init__(self, run: GossipScale) -> None:
        self.run = run
        self.start: int | None = None
        self.first_partner: dict[int, int] = {}  # holder -> period it first had a holder
        self.all_known: int | None = None
        self.join_start: int | None = None
        self.join_found: int | None = None

    def observe(self, period: int) -> None:
        run, cfg = self.run, self.run.config
        if self.start is None:
            if period < cfg.holders_at:
                return
            live = np.flatnonzero(run.alive).tolist()
            picks = run.rng.choice(len(live), size=cfg.holders, replace=False)
            run.holders = [live[k] for k in picks.tolist()]
            for h in run.holders:
                run.sampler(h).set_tags({RARE_MODEL})
            self.start = period
            return
        holders = [h for h in run.holders if run.alive[h]]
        addresses = {run.addresses[h] for h in holders}
        for h in holders:
            known = {d.address for d in run.sampler(h).model_view(RARE_MODEL)}
            if h not in self.first_partner and known & addresses:
                self.first_partner[h] = period - self.start
        if self.all_known is None and all(
            addresses - {run.addresses[h]}
            <= {d.address for d in run.sampler(h).model_view(RARE_MODEL)} for h in holders
        ):
            self.all_known = period - self.start
        if self.join_start is None and self.all_known is not None:
            candidates = [i for i in np.flatnonzero(run.alive).tolist() if i not in run.holders]
            if candidates:
                run.joiner = candidates[int(run.rng.integers(len(candidates)))]
                run.sampler(run.joiner).set_tags({RARE_MODEL})
                self.join_start = period
        elif self.join_found is None and self.join_start is not None:
            assert run.joiner is not None
            known = {d.address for d in run.sampler(run.joiner).model_view(RARE_MODEL)}
            if known & addresses:
                self.join_found = period - self.join_start

    def summary(self) -> dict[str, object]:
        cfg = self.run.config
        firsts = list(self.first_partner.values())
        return {
            "holders": cfg.holders,
            "of_nodes": cfg.nodes,
            "declared_at_period": self.start,
            "periods_until_each_holder_has_a_holder": [
                self.first_partner.get(h) for h in self.run.holders],
            "periods_until_every_holder_has_a_holder": (
                max(firsts) if len(firsts) == len(self.run.holders) and firsts else None),
            "periods_until_every_holder_knows_all": self.all_known,
            "newcomer_joined_at_period": self.join_start,
            "periods_until_newcomer_has_a_holder": self.join_found,
        }


def _sampler_options(cfg: GossipScaleConfig) -> SamplerTuning:
    """Peer-sampling options the run sets (the rest are the core's defaults)."""
    options = SamplerTuning(in_process=cfg.descriptor_checks == "in-process")
    if cfg.lookup_small is not None:
        options["lookup_small"] = cfg.lookup_small
    return options


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "max": max(values), "min": min(values)}


def _first_below(rows: list[dict[str, object]], tolerance: float) -> int | None:
    for r in rows:
        error = r["pushsum_max_error"]
        if isinstance(error, float) and error < tolerance:
            return int(r["period"])  # type: ignore[call-overload]
    return None


def lookup_trials(config: GossipScaleConfig, trials: int) -> dict[str, object]:
    """The holder lookup over ``trials`` seeds (``config.seed`` on), peer sampling only.

    Returns every trial's :class:`_HolderLookup` summary and the medians over
    the trials of the periods until every holder has a holder, until every
    holder knows all others and until the newcomer has a holder (a trial that
    never got there counts as ``config.periods``, so the median is a lower
    bound when any did not; ``not_reached`` says how many).
    """
    if trials < 1:
        raise ValueError(f"trials: expected >= 1, got {trials}")
    runs: list[dict[str, object]] = []
    for k in range(trials):
        cfg = replace(config, seed=config.seed + k, pushsum=False)
        doc = GossipScale(cfg).run()
        summary = doc["holder_lookup"]
        assert isinstance(summary, dict)
        runs.append({"seed": cfg.seed, **summary})
    figures: dict[str, object] = {}
    for key in ("periods_until_every_holder_has_a_holder",
                "periods_until_every_holder_knows_all", "periods_until_newcomer_has_a_holder"):
        values = [r[key] for r in runs]
        reached = [v for v in values if isinstance(v, int)]
        figures[key] = {
            "median": statistics.median(
                [v if isinstance(v, int) else config.periods for v in values]),
            "values": values,
            "not_reached": len(values) - len(reached),
        }
    return {"nodes": config.nodes, "holders": config.holders, "trials": trials,
            "periods": config.periods, "lookup_small": config.lookup_small,
            **figures, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    """``python -m p2p.simulation.gossip_only``: the same as ``scripts/simulate.py --gossip-only``.

    With ``--lookup-trials K``: the holder lookup over K seeds instead (peer sampling only).
    """
    import json
    from pathlib import Path

    p = argparse.ArgumentParser(description="gossip-only simulation (no training)")
    p.add_argument("--json", type=Path, metavar="PATH", help="write every figure as JSON")
    p.add_argument("--lookup-trials", type=int, metavar="K",
                   help="measure the holder lookup over K seeds (--seed on, peer sampling "
                        "only) and print the medians")
    add_gossip_only_arguments(p)
    args = p.parse_args(argv)
    if args.lookup_trials:
        trials = lookup_trials(config_from_args(args), args.lookup_trials)
        print(json.dumps({k: v for k, v in trials.items() if k != "runs"}, indent=2))
        if args.json:
            args.json.write_text(json.dumps(trials, indent=2))
        return 0
    doc = run_gossip_only(args)
    print(json.dumps({k: v for k, v in doc.items() if k != "per_period"}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
