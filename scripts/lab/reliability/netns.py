"""Real daemons in two network namespaces joined by a lossy, slow veth link.

Creates two fresh network namespaces (unique names), one veth pair between
them with addresses 10.200.<k>.1/24 and 10.200.<k>.2/24 (only inside those
namespaces), and ``tc netem loss <L>% delay <D>ms`` on both ends. Starts
``--nodes`` daemons alternating between the namespaces (so most gossip crosses
the link), waits until every node has trained ``--rounds`` rounds, samples
the push-sum weights of the global model over the admin sockets throughout,
and prints the figures. With ``--compare`` (default) the same swarm runs first
without netem. Everything is removed in a ``finally`` (processes killed,
namespaces deleted, which deletes the veth pair).

Needs root and iproute2 (``ip``, ``tc``); otherwise exits with status 77
("skipped") and says why.

    sudo .venv/bin/python scripts/reliability/netns.py --json netns.json   # ~2 min
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from p2p.cli.admin_client import AdminClient, AdminClientError
from p2p.config import render_config_toml
from p2p.swarm import SwarmSpec, default_permutations, node_config

ROOT = Path(__file__).resolve().parents[3]  # the checkout (scripts/lab/GROUP/FILE)

SKIP = 77


class Skip(Exception):
    """This machine does not allow the experiment."""


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


def preflight() -> None:
    if os.geteuid() != 0:
        raise Skip("needs root (network namespaces, tc)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise Skip(f"needs iproute2: {tool} not found")


class Link:
    """Two namespaces and a veth pair with netem on both ends."""

    def __init__(self, loss: float, delay_ms: float) -> None:
        tag = f"{os.getpid() % 100000}{int(time.time() * 1000) % 1000}"
        self.ns = (f"p2prel-a{tag}", f"p2prel-b{tag}")
        self.dev = (f"vra{tag}"[:15], f"vrb{tag}"[:15])
        k = os.getpid() % 250 + 1
        self.ip = (f"10.200.{k}.1", f"10.200.{k}.2")
        self.loss = loss
        self.delay_ms = delay_ms
        self.created: list[str] = []
        self.netem_error: str | None = None  # set when this kernel has no netem

    def __enter__(self) -> Link:
        try:
            for ns in self.ns:
                r = sh("ip", "netns", "add", ns, check=False)
                if r.returncode != 0:
                    raise Skip(f"cannot create a network namespace: {r.stderr.strip()}")
                self.created.append(ns)
            sh("ip", "link", "add", self.dev[0], "netns", self.ns[0], "type", "veth",
               "peer", "name", self.dev[1], "netns", self.ns[1])
            for ns, dev, ip in zip(self.ns, self.dev, self.ip, strict=True):
                sh("ip", "-n", ns, "link", "set", "lo", "up")
                sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
                sh("ip", "-n", ns, "link", "set", dev, "up")
            try:
                self.set_netem(self.loss, self.delay_ms)
            except Skip as exc:
                self.netem_error = str(exc)
        except BaseException:
            self.__exit__()
            raise
        return self

    def set_netem(self, loss: float, delay_ms: float) -> None:
        for ns, dev in zip(self.ns, self.dev, strict=True):
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root", check=False)
            if loss or delay_ms:
                r = sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root",
                       "netem", "loss", f"{loss:g}%", "delay", f"{delay_ms:g}ms", check=False)
                if r.returncode != 0:
                    raise Skip(f"tc netem not available: {r.stderr.strip()}")

    def __exit__(self, *exc: object) -> None:
        for ns in self.created:
            sh("ip", "netns", "del", ns, check=False)
        self.created = []


def run_swarm(link: Link, spec: SwarmSpec, workdir: Path, timeout: float) -> dict[str, Any]:
    procs: list[subprocess.Popen[bytes]] = []
    dirs: list[Path] = []
    addresses: list[str] = []
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    weights: list[float] = []
    t0 = time.monotonic()
    try:
        for i in range(spec.nodes):
            side = i % 2
            data_dir = workdir / f"node{i}"
            data_dir.mkdir(mode=0o700, parents=True)
            config = workdir / f"node{i}.toml"
            config.write_text(render_config_toml(node_config(spec, i, data_dir, None)))
            cmd = ["ip", "netns", "exec", link.ns[side], sys.executable, "-m", "p2p", "run",
                   "--config", str(config), "--data-dir", str(data_dir),
                   "--listen", f"{link.ip[side]}:0"]
            if addresses:
                cmd += ["--bootstrap", addresses[0]]
            with open(workdir / f"node{i}.log", "ab") as log:
                procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                              start_new_session=True, cwd=ROOT))
            dirs.append(data_dir)
            client = AdminClient.for_data_dir(data_dir, timeout=5.0)
            deadline = time.monotonic() + 300
            while True:
                if procs[-1].poll() is not None:
                    tail = (workdir / f"node{i}.log").read_text()[-1500:]
                    raise RuntimeError(f"node{i} exited at start with status "
                                       f"{procs[-1].returncode}: {tail}")
                try:
                    status = client.request("status")
                    if status.get("addresses"):
                        addresses.append(status["addresses"][0])
                        break
                except AdminClientError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"node{i} did not start")
                time.sleep(0.2)
        clients = [AdminClient.for_data_dir(d, timeout=10.0) for d in dirs]
        deadline = time.monotonic() + timeout
        while True:
            statuses = [c.request("status") for c in clients]
            total = 0.0
            for c in clients:
                for m in c.request("models")["models"]:
                    if m["name"] == "global":
                        total += m["weight"]
            weights.append(total / spec.nodes)
            if all(s["round"] >= spec.rounds and s["accuracy"] is not None for s in statuses):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"not finished within {timeout:.0f}s: rounds "
                                   f"{[s['round'] for s in statuses]}")
            time.sleep(0.5)
        models = [c.request("models")["models"] for c in clients]
        accs = [s["accuracy"] for s in statuses]
        pushes = sum(m["pushes_received"] for ms in models for m in ms if m["name"] == "global")
        rejected = sum(m["pushes_rejected"] for ms in models for m in ms
                       if m["name"] == "global")
        return {"accuracy_median": statistics.median(accs), "accuracy_min": min(accs),
                "accuracy_max": max(accs), "addresses": addresses,
                "weight_per_node_min": min(weights), "weight_per_node_max": max(weights),
                "weight_per_node_final": weights[-1], "pushes_received": pushes,
                "pushes_rejected": rejected, "seconds": time.monotonic() - t0}
    finally:
        stop_daemons(procs, 15.0)


def stop_daemons(procs: list[subprocess.Popen[bytes]], wait: float) -> None:
    """SIGTERM every daemon (each runs in its own session), SIGKILL those still up
    after ``wait`` seconds."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--loss", type=float, default=10.0, help="netem loss, percent")
    p.add_argument("--delay", type=float, default=50.0, help="netem delay, ms")
    p.add_argument("--no-compare", action="store_true", help="skip the run without netem")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--json", type=Path, metavar="PATH")
    args = p.parse_args(argv)
    spec = SwarmSpec(nodes=args.nodes, rounds=args.rounds, scheme="partial",
                     permutations=default_permutations(args.nodes), round_interval=0.05,
                     shuffle_period=0.5, eval_every=5)
    result: dict[str, Any] = {"nodes": args.nodes, "rounds": args.rounds, "loss": args.loss,
                              "delay_ms": args.delay}
    try:
        preflight()
        with Link(args.loss, args.delay) as link, \
                tempfile.TemporaryDirectory(prefix="p2p-netns-") as tmp:
            result["namespaces"] = list(link.ns)
            if link.netem_error is not None:
                # the namespaces and veth link work; only the fault injection is missing
                result["clean"] = run_swarm(link, spec, Path(tmp) / "clean", args.timeout)
                print(f"[netns] no netem: {result['clean']}", flush=True)
                raise Skip(link.netem_error)
            if not args.no_compare:
                link.set_netem(0, 0)
                result["clean"] = run_swarm(link, spec, Path(tmp) / "clean", args.timeout)
                print(f"[netns] no netem: {result['clean']}", flush=True)
                link.set_netem(args.loss, args.delay)
            result["netem"] = run_swarm(link, spec, Path(tmp) / "netem", args.timeout)
            print(f"[netns] netem loss {args.loss:g}% delay {args.delay:g}ms: "
                  f"{result['netem']}", flush=True)
    except Skip as exc:
        result["skipped"] = str(exc)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
        print(f"skipped: {exc}", file=sys.stderr)
        return SKIP
    leftover = [ns for ns in sh("ip", "netns", "list", check=False).stdout.split()
                if ns in result.get("namespaces", [])]
    result["namespaces_left_behind"] = leftover
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
