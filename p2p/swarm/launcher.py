"""Launch a local swarm of real daemons and watch them through their admin sockets.

Every daemon is a separate ``python -m p2p run`` process listening on
127.0.0.1; they find each other from node 0's address.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from p2p.cli.admin_client import AdminClient, AdminClientError
from p2p.config import (
    generate_swarm_key,
    render_config_toml,
    write_swarm_key,
)
from p2p.runtime.checkpoint import CheckpointStore
from p2p.swarm.spec import (
    WIRE_BYTES_SENT,
    SwarmError,
    SwarmSpec,
    budget_spent,
    grouping_summary,
    groups_phase,
    latency_summary,
    node_config,
    rounds_per_second,
)

logger = logging.getLogger(__name__)


#: The directory holding the packages this process imported (p2p, gossip, ...).
_TREE = str(Path(__file__).resolve().parents[2])


def daemon_environment(base: Mapping[str, str]) -> dict[str, str]:
    """The environment of a swarm's daemon: ``base`` with one torch thread, and the
    tree this process runs from first on ``PYTHONPATH``, so the daemons run the
    code that wrote their configs (not whatever ``python -m p2p`` would find first,
    e.g. another checkout's editable install when comparing two trees)."""
    path = base.get("PYTHONPATH")
    return dict(base, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                PYTHONPATH=_TREE if not path else _TREE + os.pathsep + path)


@dataclass
class Daemon:
    """One running node process."""

    index: int
    data_dir: Path
    config_path: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    address: str | None = None
    status: dict[str, Any] = field(default_factory=dict)
    models: dict[str, Any] = field(default_factory=dict)
    history: list[tuple[float, int, float | None]] = field(default_factory=list)
    # seconds each `status` request of the watcher took, from connect to answer
    admin_latency: list[float] = field(default_factory=list)
    down: bool = False  # killed on purpose (Swarm.kill): not polled until restarted

    @property
    def client(self) -> AdminClient:
        return AdminClient.for_data_dir(self.data_dir, timeout=5.0)

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])


class Swarm:
    """Starts, watches and stops the daemons of one :class:`SwarmSpec`.

    Use as a context manager: leaving it stops every daemon (SIGTERM, then
    SIGKILL after a grace period) and removes the work directory unless
    ``keep``.
    """

    def __init__(self, spec: SwarmSpec, *, workdir: Path | None = None, keep: bool = False,
                 startup_timeout: float | None = None) -> None:
        self.spec = spec
        self.keep = keep
        # every daemon imports torch: on 2 cores that is a few seconds each
        self.startup_timeout = startup_timeout or max(120.0, 10.0 * spec.nodes)
        self._own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="p2p-swarm-"))
        self.daemons: list[Daemon] = []
        self.started_at = time.monotonic()

    # -------------------------------------------------------------- lifecycle

    def __enter__(self) -> Swarm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if not self.keep and self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _write_configs(self) -> None:
        key_file = None
        if self.spec.swarm_key:
            key_file = self.workdir / "swarm.key"
            write_swarm_key(key_file, generate_swarm_key())
        for i in range(self.spec.nodes):
            data_dir = self.workdir / f"node{i}"
            data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # a node refuses others'
            config_path = self.workdir / f"node{i}.toml"
            config_path.write_text(render_config_toml(
                node_config(self.spec, i, data_dir, key_file)))
            self.daemons.append(Daemon(i, data_dir, config_path, self.workdir / f"node{i}.log"))

    def _spawn(self, d: Daemon, bootstrap: Sequence[str]) -> None:
        cmd = [sys.executable, "-m", "p2p", "run", "--config", str(d.config_path),
               "--data-dir", str(d.data_dir), "--listen", "127.0.0.1:0"]
        if bootstrap:
            cmd += ["--bootstrap", ",".join(bootstrap)]
        env = daemon_environment(os.environ)
        with open(d.log_path, "ab") as log:
            d.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)

    def _wait_ready(self, d: Daemon, deadline: float) -> None:
        while time.monotonic() < deadline:
            if d.process is not None and d.process.poll() is not None:
                raise SwarmError(f"node{d.index} exited at start with status "
                                 f"{d.process.returncode}: {d.log_tail()}")
            try:
                status = d.client.request("status")
            except AdminClientError:
                time.sleep(0.1)
                continue
            if status.get("addresses"):
                d.address = status["addresses"][0]
                d.status = status
                return
            time.sleep(0.1)
        raise SwarmError(f"node{d.index} did not answer on its admin socket within "
                         f"{self.startup_timeout:.0f}s: {d.log_tail()}")

    def start(self) -> None:
        """Start node 0, then every other node bootstrapping from it."""
        self._write_configs()
        first, rest = self.daemons[0], self.daemons[1:]
        deadline = time.monotonic() + self.startup_timeout
        self._spawn(first, [])
        self._wait_ready(first, deadline)
        for d in rest:
            self._spawn(d, [first.address or ""])
        for d in rest:
            self._wait_ready(d, deadline)
        self.started_at = time.monotonic()

    def stop(self, grace: float = 10.0) -> list[int | None]:
        """Stop every daemon; returns their exit codes (None: had to be killed)."""
        for d in self.daemons:
            if d.process is not None and d.process.poll() is None:
                d.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        codes: list[int | None] = []
        for d in self.daemons:
            if d.process is None:
                codes.append(None)
                continue
            try:
                codes.append(d.process.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                logger.warning("node%d did not stop within %.0fs; killing it", d.index, grace)
                os.killpg(d.process.pid, signal.SIGKILL)
                d.process.wait()
                codes.append(None)
        return codes

    # -------------------------------------------------------------- watching

    def poll(self) -> None:
        """Refresh every daemon's status and models; raise if one died."""
        now = time.monotonic() - self.started_at
        for d in self.daemons:
            if d.down:
                continue
            if d.process is not None and d.process.poll() is not None:
                raise SwarmError(f"node{d.index} died with status {d.process.returncode}: "
                                 f"{d.log_tail()}")
            try:
                asked = time.perf_counter()
                d.status = d.client.request("status")
                d.admin_latency.append(time.perf_counter() - asked)
                d.models = d.client.request("models")
            except AdminClientError as exc:
                raise SwarmError(f"node{d.index} stopped answering its admin socket: "
                                 f"{exc}") from exc
            d.history.append((now, int(d.status.get("round", 0)), d.status.get("accuracy")))

    def finished(self) -> bool:
        """Every live daemon trained its rounds (or stopped for its privacy budget) and
        was evaluated (and with automatic groups, applied the agreed groups)."""
        return all((d.status.get("round", 0) >= self.spec.rounds or budget_spent(d.status))
                   and (d.status.get("accuracy") is not None or bool(d.status.get("metrics")))
                   and (not self.auto_groups() or groups_phase(d.status) == "agreed")
                   for d in self.daemons if not d.down)

    def kill(self, index: int) -> None:
        """Crash node ``index`` with SIGKILL: no final checkpoint, no goodbye."""
        d = self.daemons[index]
        if d.process is not None and d.process.poll() is None:
            os.killpg(d.process.pid, signal.SIGKILL)
            d.process.wait()
        d.down = True

    def restart(self, index: int, bootstrap: Sequence[str] | None = None) -> None:
        """Start a killed node again on its data directory (same identity, its checkpoint).

        ``bootstrap`` defaults to the addresses of up to three live nodes.
        """
        d = self.daemons[index]
        if d.process is not None and d.process.poll() is None:
            raise SwarmError(f"node{index} is still running")
        if bootstrap is None:
            bootstrap = [x.address for x in self.daemons
                         if not x.down and x is not d and x.address][:3]
        d.address = None
        self._spawn(d, bootstrap)
        self._wait_ready(d, time.monotonic() + self.startup_timeout)
        d.down = False

    def run_until_done(self, *, timeout: float = 900.0, interval: float = 0.5,
                       on_poll: Callable[[Swarm], None] | None = None) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            if on_poll is not None:
                on_poll(self)
            if self.finished():
                return
            if time.monotonic() > deadline:
                late = [f"node{d.index} (round {d.status.get('round')})" for d in self.daemons
                        if d.status.get("round", 0) < self.spec.rounds]
                if self.auto_groups():
                    late += [f"node{d.index} (groups {groups_phase(d.status)})"
                             for d in self.daemons
                             if not d.down and groups_phase(d.status) != "agreed"]
                raise SwarmError(f"swarm did not finish within {timeout:.0f}s: "
                                 f"{', '.join(late)}")
            time.sleep(interval)

    # -------------------------------------------------------------- results

    def shared_vectors(self, model: str) -> dict[int, np.ndarray]:
        """Each live daemon's current push-sum values of ``model``, via a fresh checkpoint."""
        out: dict[int, np.ndarray] = {}
        for d in self.daemons:
            d.client.request("checkpoint")
            state = CheckpointStore(d.data_dir).load()
            if state is not None and model in state.pushsum:
                out[d.index] = np.asarray(state.pushsum[model].values, dtype=np.float64)
        return out

    def peak_memory(self) -> dict[int, int]:
        """Peak resident memory (bytes, VmHWM) of each live daemon (Linux only)."""
        peaks: dict[int, int] = {}
        for d in self.daemons:
            if d.process is None or d.process.poll() is not None:
                continue
            try:
                status = Path(f"/proc/{d.process.pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    peaks[d.index] = int(line.split()[1]) * 1024
        return peaks

    def _metrics(self, d: Daemon) -> dict[str, Any]:
        if d.down:
            return {}
        try:
            counters = d.client.request("metrics").get("counters", {})
        except AdminClientError:
            return {}
        return counters if isinstance(counters, dict) else {}

    def _wire_bytes(self, d: Daemon) -> int | None:
        value = self._metrics(d).get(WIRE_BYTES_SENT)
        return int(value) if value is not None else None

    def _counter_sum(self, d: Daemon, counter: str) -> int:
        """``counter`` summed over the node's models (metrics keys ``<model>.<counter>``)."""
        return int(sum(v for k, v in self._metrics(d).items() if k.endswith(f".{counter}")))

    def auto_groups(self) -> bool:
        """Whether the nodes find their semi-local groups themselves."""
        return self.spec.semi_local and self.spec.grouping == "auto"

    def _groups(self, d: Daemon) -> dict[str, Any] | None:
        if d.down:
            return None
        try:
            return d.client.request("groups")
        except AdminClientError as exc:
            logger.warning("node%d did not report its groups: %s", d.index, exc)
            return None

    def grouping(self) -> dict[str, Any]:
        """The groups every node found, scored against the permutation groups
        (:func:`grouping_summary`)."""
        return grouping_summary([d.status.get("id") for d in self.daemons],
                                [self._groups(d) for d in self.daemons], self.spec.groups())

    def summary(self) -> dict[str, Any]:
        """Every figure of the run as plain data."""
        grouping = self.grouping() if self.auto_groups() else None
        rows = []
        for d in self.daemons:
            models = d.models.get("models", [])
            shared = [m for m in models if m.get("kind") != "local"]
            rows.append({
                "node": d.index,
                "permutation": self.spec.permutation(d.index) or "id",
                "accuracy": d.status.get("accuracy"),
                # the test set's metrics: accuracy, or the user's (training.metrics)
                "metrics": d.status.get("metrics") or {},
                "test_loss": d.status.get("test_loss"),
                "loss": d.status.get("loss"),
                "round": d.status.get("round"),
                "steps": d.status.get("steps"),
                # DP-SGD: epsilon spent at status' privacy.delta (None without DP)
                "epsilon": (d.status.get("privacy") or {}).get("epsilon"),
                "privacy": d.status.get("privacy"),
                # the collaboration strategy's own report (p2p status' "strategy")
                "strategy": d.status.get("strategy"),
                "pushes_sent": sum(m.get("pushes_sent", 0) for m in shared),
                "pushes_received": sum(m.get("pushes_received", 0) for m in shared),
                "pushes_rejected": sum(m.get("pushes_rejected", 0) for m in shared),
                "bytes_sent": sum(m.get("bytes_sent", 0) for m in shared),
                "bytes_received": sum(m.get("bytes_received", 0) for m in shared),
                # everything the node's transport wrote to sockets (every frame), if it says
                "wire_bytes_sent": self._wire_bytes(d),
                "waves": self._counter_sum(d, "waves"),
                "weights": {m["name"]: m.get("weight") for m in shared},
                "history": d.history,
            })
            if grouping is not None:
                found = grouping["per_node"][d.index]
                rows[-1].update(group=found["group"], group_model=found["model"],
                                group_fingerprint=found["fingerprint"])
        accs = [r["accuracy"] for r in rows if r["accuracy"] is not None]
        sent = [r["bytes_sent"] for r in rows]
        wire = [r["wire_bytes_sent"] for r in rows if r["wire_bytes_sent"] is not None]
        peaks = self.peak_memory()
        for row in rows:
            row["peak_rss_bytes"] = peaks.get(row["node"])
        return {
            "spec": dataclasses.asdict(self.spec),
            "nodes": rows,
            "mean_accuracy": sum(accs) / len(accs) if accs else None,
            "worst_accuracy": min(accs) if accs else None,
            "mean_metrics": mean_metrics(rows),
            "mean_bytes_sent": sum(sent) / len(sent) if sent else None,
            "mean_wire_bytes_sent": sum(wire) / len(wire) if wire else None,
            "wall_seconds": time.monotonic() - self.started_at,
            "rounds_per_second": {d.index: rounds_per_second(d.history) for d in self.daemons},
            "admin_status_ms": latency_summary(
                [x for d in self.daemons for x in d.admin_latency]),
            **({} if grouping is None else {
                "grouping": grouping,
                "identification": grouping["identification"],
                "differentiation": grouping["differentiation"],
                "fingerprints_agree": grouping["fingerprints_agree"]}),
        }




def mean_metrics(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Each task metric's mean over the nodes that report it."""
    values: dict[str, list[float]] = {}
    for row in rows:
        for name, value in (row.get("metrics") or {}).items():
            if isinstance(value, int | float):
                values.setdefault(name, []).append(float(value))
    return {name: sum(v) / len(v) for name, v in values.items()}
