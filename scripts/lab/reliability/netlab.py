"""A real-network testbed: daemons on a public segment and on private LANs behind NATs.

Builds (root only, unique names, everything removed in a ``finally``):

- a public segment ``203.0.113.0/24`` (a documentation range: no real host has
  it, and it lives only inside these namespaces), a bridge in namespace
  ``<tag>-pub``, and one namespace per public host;
- ``--nats`` private LANs ``10.<k>.0.0/24``, each behind its own NAT namespace:
  ``iptables MASQUERADE`` out of its WAN side and unsolicited inbound traffic
  dropped, as a home router does; the last one is a symmetric NAT
  (``--random-fully``: a fresh port for every destination) unless ``--no-symmetric``;
- ``tc tbf`` on every host's link (``--rate``). This kernel has no netem, so
  there is no added delay or loss: links differ by bandwidth only.

Host names resolve through ``/etc/netns/<ns>/hosts`` (the bootstrap is given by
name). Every daemon listens on ``0.0.0.0:7661``. It prints, against the same
swarm on loopback: accuracy, each node's reachability and advertised address
(never an unusable one), the share of direct and relayed sessions, the bytes
through relays, and the time a node behind a NAT takes to join.

    sudo .venv/bin/python scripts/reliability/netlab.py --json netlab.json   # ~4 min
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.address import address_scope
from lab.reliability.netns import SKIP, Skip, sh, stop_daemons
from p2p.cli.admin_client import AdminClient, AdminClientError
from p2p.config import render_config_toml
from p2p.swarm import SwarmSpec, default_permutations, node_config

ROOT = Path(__file__).resolve().parents[3]  # the checkout (scripts/lab/GROUP/FILE)
PORT = 7661
UNUSABLE = ("unspecified", "loopback", "link-local")


def preflight() -> None:
    if os.geteuid() != 0:
        raise Skip("needs root (network namespaces, iptables, tc)")
    for tool in ("ip", "tc", "iptables"):
        if shutil.which(tool) is None:
            raise Skip(f"needs {tool} (Debian: apt-get install iproute2 iptables)")


@dataclass
class Host:
    name: str  # also its host name in /etc/netns/<ns>/hosts
    ns: str
    ip: str
    lan: int  # 0: the public segment, k: behind NAT k


@dataclass
class Lab:
    """The namespaces, links and NAT rules of one run (see the module docstring)."""

    public: int
    lans: list[int]  # hosts per LAN
    symmetric: bool
    rate: str
    tag: str = field(default_factory=lambda: f"nl{os.getpid() % 10000}")
    hosts: list[Host] = field(default_factory=list)
    created: list[str] = field(default_factory=list)

    def ns(self, what: str) -> str:
        return f"{self.tag}-{what}"

    def __enter__(self) -> Lab:
        try:
            self._build()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _add_ns(self, name: str) -> str:
        r = sh("ip", "netns", "add", name, check=False)
        if r.returncode != 0:
            raise Skip(f"cannot create a network namespace: {r.stderr.strip()}")
        self.created.append(name)
        sh("ip", "-n", name, "link", "set", "lo", "up")
        return name

    def _link(self, ns_a: str, dev_a: str, ns_b: str, dev_b: str) -> None:
        sh("ip", "link", "add", dev_a, "netns", ns_a, "type", "veth", "peer", "name", dev_b,
           "netns", ns_b)

    def _tbf(self, ns: str, dev: str) -> None:
        sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
           "rate", self.rate, "burst", "64kb", "latency", "400ms")

    def _build(self) -> None:
        pub = self._add_ns(self.ns("pub"))
        sh("ip", "-n", pub, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", pub, "addr", "add", "203.0.113.1/24", "dev", "br0")  # "the internet"
        sh("ip", "-n", pub, "link", "set", "br0", "up")
        for i in range(self.public):
            self._host(f"pub{i}", f"203.0.113.{10 + i}", 0, pub, "br0", "203.0.113.1")
        for k, count in enumerate(self.lans, start=1):
            nat = self._add_ns(self.ns(f"nat{k}"))
            self._link(nat, "wan", pub, f"n{k}wan")
            sh("ip", "-n", pub, "link", "set", f"n{k}wan", "master", "br0", "up")
            sh("ip", "-n", nat, "addr", "add", f"203.0.113.{100 + k}/24", "dev", "wan")
            sh("ip", "-n", nat, "link", "set", "wan", "up")
            sh("ip", "-n", nat, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", nat, "addr", "add", f"10.{k}.0.1/24", "dev", "br0")
            sh("ip", "-n", nat, "link", "set", "br0", "up")
            sh("ip", "netns", "exec", nat, "sysctl", "-qw", "net.ipv4.ip_forward=1")
            masquerade = ["iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "wan", "-j",
                          "MASQUERADE"]
            if self.symmetric and k == len(self.lans):
                masquerade.append("--random-fully")
            sh("ip", "netns", "exec", nat, *masquerade)
            # a home router: replies to what the LAN opened get in, nothing else does,
            # and the router itself stays silent (no reset) to unsolicited packets
            for chain in ("FORWARD", "INPUT"):
                sh("ip", "netns", "exec", nat, "iptables", "-A", chain, "-i", "wan", "-m",
                   "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT")
                sh("ip", "netns", "exec", nat, "iptables", "-A", chain, "-i", "wan", "-j",
                   "DROP")
            for j in range(count):
                self._host(f"lan{k}h{j}", f"10.{k}.0.{10 + j}", k, nat, "br0", f"10.{k}.0.1")
        names = "".join(f"{h.ip} {h.name}\n" for h in self.hosts)
        for h in self.hosts:
            etc = Path("/etc/netns") / h.ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(f"127.0.0.1 localhost\n{names}")

    def _host(self, name: str, ip: str, lan: int, switch_ns: str, bridge: str,
              gateway: str | None) -> None:
        ns = self._add_ns(self.ns(name))
        port = f"p{name}"[:15]
        self._link(ns, "eth0", switch_ns, port)
        sh("ip", "-n", switch_ns, "link", "set", port, "master", bridge, "up")
        sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        if gateway is not None:
            sh("ip", "-n", ns, "route", "add", "default", "via", gateway)
        self._tbf(ns, "eth0")
        self.hosts.append(Host(name, ns, ip, lan))

    def __exit__(self, *exc: object) -> None:
        for ns in reversed(self.created):
            sh("ip", "netns", "del", ns, check=False)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        self.created = []

    def left_behind(self) -> list[str]:
        listed = sh("ip", "netns", "list", check=False).stdout.split()
        return [ns for ns in listed if ns.startswith(self.tag + "-")]


def _wait_status(client: AdminClient, proc: subprocess.Popen[bytes], log: Path,
                 timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"a daemon exited at start ({proc.returncode}): "
                               f"{log.read_text()[-1500:]}")
        try:
            status: dict[str, Any] = client.request("status")
            if status.get("addresses"):
                return status
        except AdminClientError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"a daemon did not start within {timeout:.0f} s: {log}")
        time.sleep(0.2)


def run_swarm(spec: SwarmSpec, workdir: Path, hosts: list[Host] | None,
              timeout: float) -> dict[str, Any]:
    """Run ``spec`` with one daemon per host (``hosts``; None: all on loopback) until
    every node has trained ``spec.rounds`` rounds; return the figures."""
    procs: list[subprocess.Popen[bytes]] = []
    clients: list[AdminClient] = []
    started: list[float] = []
    joined: list[float | None] = []
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    first = ""
    t0 = time.monotonic()
    try:
        logs: list[Path] = []
        for i in range(spec.nodes):
            data_dir = workdir / f"node{i}"
            data_dir.mkdir(mode=0o700, parents=True)
            config = workdir / f"node{i}.toml"
            config.write_text(render_config_toml(node_config(spec, i, data_dir, None)))
            cmd = [sys.executable, "-m", "p2p", "run", "--config", str(config),
                   "--data-dir", str(data_dir)]
            if hosts is None:
                cmd += ["--listen", "127.0.0.1:0"] + (["--bootstrap", first] if first else [])
            else:
                host = hosts[i % len(hosts)]
                cmd = ["ip", "netns", "exec", host.ns, *cmd, "--listen", f"0.0.0.0:{PORT}"]
                if i:  # the first node is the bootstrap, given by name
                    cmd += ["--bootstrap", f"{hosts[0].name}:{PORT}"]
            logs.append(workdir / f"node{i}.log")
            with open(logs[-1], "ab") as out:
                procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                              env=env, start_new_session=True, cwd=ROOT))
            started.append(time.monotonic())
            joined.append(None)
            clients.append(AdminClient.for_data_dir(data_dir, timeout=10.0))
            if i == 0:  # the others start together once the bootstrap listens
                first = _wait_status(clients[0], procs[0], logs[0], 300.0)["addresses"][0]
        for client, proc, log in zip(clients, procs, logs, strict=True):
            _wait_status(client, proc, log, 300.0)
        deadline = time.monotonic() + timeout
        while True:
            statuses = [c.request("status") for c in clients]
            now = time.monotonic()
            for i, s in enumerate(statuses):
                if joined[i] is None and s.get("view_size", 0) > 0 and i:
                    joined[i] = now - started[i]
            if all(s["round"] >= spec.rounds and s["accuracy"] is not None for s in statuses):
                break
            if now > deadline:
                raise RuntimeError(f"not finished within {timeout:.0f} s: rounds "
                                   f"{[s['round'] for s in statuses]}")
            time.sleep(1.0)
        nodes = []
        for i, s in enumerate(statuses):
            advertised = s["addresses"][0] if s.get("addresses") else ""
            ip = advertised.rpartition(":")[0].strip("[]")
            lan = None if hosts is None else hosts[i % len(hosts)].lan
            nodes.append({"node": i, "lan": lan, "accuracy": s["accuracy"],
                          "advertised": advertised, "scope": address_scope(ip),
                          "reachable": s.get("reachable"),
                          "reason": s.get("reachable_reason"),
                          "confirmed": s.get("confirmed_addresses"),
                          "view_size": s.get("view_size"), "join_seconds": joined[i]})
        accs = [n["accuracy"] for n in nodes]
        behind = [n["join_seconds"] for n in nodes if n["lan"] and n["join_seconds"] is not None]
        return {"accuracy_median": statistics.median(accs), "accuracy_min": min(accs),
                "accuracy_max": max(accs), "nodes": nodes,
                "unusable_advertised": [n["advertised"] for n in nodes
                                        if n["scope"] in UNUSABLE and hosts is not None],
                # no relay yet: every session is direct, no byte goes through a relay
                "sessions_direct_share": 1.0, "relay_bytes": 0,
                "join_seconds_behind_nat_median": statistics.median(behind) if behind else None,
                "seconds": time.monotonic() - t0}
    finally:
        stop_daemons(procs, 20.0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--public", type=int, default=2, help="hosts on the public segment")
    p.add_argument("--lans", default="3,3", help="hosts per NATed LAN, comma-separated")
    p.add_argument("--no-symmetric", action="store_true",
                   help="every NAT endpoint-independent (default: the last one symmetric)")
    p.add_argument("--rate", default="50mbit", help="tc tbf rate of every host's link")
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--runs", type=int, default=1, help="runs whose medians are printed")
    p.add_argument("--no-compare", action="store_true", help="skip the loopback swarm")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--json", type=Path, metavar="PATH")
    args = p.parse_args(argv)
    lans = [int(n) for n in args.lans.split(",") if n.strip()]
    nodes = args.public + sum(lans)
    spec = SwarmSpec(nodes=nodes, rounds=args.rounds, scheme="partial",
                     permutations=default_permutations(nodes), round_interval=0.05,
                     shuffle_period=0.5, eval_every=5)
    result: dict[str, Any] = {"public": args.public, "lans": lans, "rounds": args.rounds,
                              "symmetric_nat": not args.no_symmetric, "rate": args.rate,
                              "netem": "not in this kernel: no added delay or loss"}
    try:
        preflight()
        runs: list[dict[str, Any]] = []
        loopback: list[dict[str, Any]] = []
        for run in range(args.runs):
            with Lab(args.public, lans, not args.no_symmetric, args.rate) as lab, \
                    tempfile.TemporaryDirectory(prefix="p2p-netlab-") as tmp:
                result["namespaces"] = list(lab.created)
                runs.append(run_swarm(spec, Path(tmp) / "lab", lab.hosts, args.timeout))
                print(f"[netlab] run {run}: {json.dumps(runs[-1])}", flush=True)
            result["namespaces_left_behind"] = lab.left_behind()
            if not args.no_compare:
                with tempfile.TemporaryDirectory(prefix="p2p-netlab-lo-") as tmp:
                    loopback.append(run_swarm(spec, Path(tmp), None, args.timeout))
                print(f"[netlab] loopback {run}: accuracy "
                      f"{loopback[-1]['accuracy_median']:.4f}", flush=True)
        result["runs"] = runs
        result["loopback"] = loopback
        result["accuracy_median"] = statistics.median(r["accuracy_median"] for r in runs)
        if loopback:
            result["loopback_accuracy_median"] = statistics.median(
                r["accuracy_median"] for r in loopback)
        print(f"[netlab] accuracy {result['accuracy_median']:.4f}"
              + (f" vs loopback {result['loopback_accuracy_median']:.4f}" if loopback else ""),
              flush=True)
    except Skip as exc:
        result["skipped"] = str(exc)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
        print(f"skipped: {exc}", file=sys.stderr)
        return SKIP
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
