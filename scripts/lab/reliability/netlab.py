"""A real-network testbed: daemons on a public segment and on private LANs behind NATs.

Builds (root only, unique names, everything removed in a ``finally``):

- a public segment ``203.0.113.0/24`` (a documentation range: no real host has
  it, and it lives only inside these namespaces; with ``--ipv6`` also
  ``2001:db8::/64``, dual-stack), a bridge in namespace ``<tag>-pub``, a host
  ``relay`` running ``p2p run --relay-only`` (the bootstrap, given by name), and
  ``--public`` hosts with a learning daemon each (they relay too: ``relay.serve``);
- ``--lans`` private LANs ``10.<k>.0.0/24``, each behind its own NAT namespace:
  ``iptables MASQUERADE`` out of its WAN side and unsolicited inbound traffic
  dropped (no reset), as a home router does; the last one is a symmetric NAT
  (``--random-fully``: a fresh port for every destination) unless ``--no-symmetric``;
- ``tc tbf`` on every host's link (``--rate``). This kernel has no netem, so
  there is no added delay or loss: links differ by bandwidth only.

Host names resolve through ``/etc/netns/<ns>/hosts``. Daemons listen on port
7661 (``[::]`` dual-stack on the public segment with ``--ipv6``). After the
rounds the swarm runs ``--settle`` seconds more, then the script reads every
node's status and peers and prints, against the same learning swarm on
loopback: accuracy, each node's reachability and advertised address (never an
unusable one), the paths of the connections between nodes on different
networks (direct, punched, reversed or relayed), the bytes relayed, and the
time a node behind a NAT takes to join.

    sudo .venv/bin/python scripts/reliability/netlab.py --runs 3 --json netlab.json
"""

from __future__ import annotations

import argparse
import dataclasses
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

from common.address import Circuit, address_scope, parse_dial_address
from lab.reliability.netns import SKIP, Skip, sh, stop_daemons
from p2p.cli.admin_client import AdminClient, AdminClientError
from p2p.config import render_config_toml
from p2p.swarm import SwarmSpec, default_permutations, node_config
from p2p.wire.dialer import DIRECT_PATHS

ROOT = Path(__file__).resolve().parents[3]  # the checkout (scripts/lab/GROUP/FILE)
PORT = 7661
UNUSABLE = ("unspecified", "loopback", "link-local")
RELAY_CONFIG = '[node]\nname = "relay"\n\n[peer_sampling]\nperiod = 0.5\n'


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
    ip6: str | None = None


@dataclass
class Lab:
    """The namespaces, links and NAT rules of one run (see the module docstring)."""

    public: int
    lans: list[int]  # hosts per LAN
    symmetric: bool
    rate: str
    ipv6: bool = False
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
        for i in range(self.public + 1):  # the relay first
            self._host("relay" if i == 0 else f"pub{i}", f"203.0.113.{10 + i}", 0, pub, "br0",
                       "203.0.113.1", ip6=f"2001:db8::{10 + i:x}" if self.ipv6 else None)
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
        names = "".join(f"{h.ip} {h.name}\n" + (f"{h.ip6} {h.name}\n" if h.ip6 else "")
                        for h in self.hosts)
        for h in self.hosts:
            etc = Path("/etc/netns") / h.ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(f"127.0.0.1 localhost\n{names}")

    def _host(self, name: str, ip: str, lan: int, switch_ns: str, bridge: str,
              gateway: str, ip6: str | None = None) -> None:
        ns = self._add_ns(self.ns(name))
        port = f"p{name}"[:15]
        self._link(ns, "eth0", switch_ns, port)
        sh("ip", "-n", switch_ns, "link", "set", port, "master", bridge, "up")
        sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        if ip6 is not None:
            sh("ip", "-n", ns, "addr", "add", f"{ip6}/64", "dev", "eth0", "nodad")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "route", "add", "default", "via", gateway)
        self._tbf(ns, "eth0")
        self.hosts.append(Host(name, ns, ip, lan, ip6))

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


@dataclass
class Swarm:
    """The daemons of one run: processes, admin clients, where they run."""

    workdir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    clients: list[AdminClient] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    started: list[float] = field(default_factory=list)

    def start(self, name: str, cmd: list[str], data_dir: Path) -> AdminClient:
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.logs.append(self.workdir / f"{name}.log")
        with open(self.logs[-1], "ab") as out:
            self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                               env=env, start_new_session=True, cwd=ROOT))
        self.started.append(time.monotonic())
        self.clients.append(AdminClient.for_data_dir(data_dir, timeout=10.0))
        return self.clients[-1]


def _learner_command(spec: SwarmSpec, i: int, workdir: Path, host: Host | None,
                     ipv6: bool) -> tuple[list[str], Path]:
    data_dir = workdir / f"node{i}"
    data_dir.mkdir(mode=0o700, parents=True)
    config = node_config(spec, i, data_dir, None)
    if host is not None and host.lan == 0:  # public learners relay for the others too
        config = dataclasses.replace(config, relay=dataclasses.replace(config.relay, serve=True))
    path = workdir / f"node{i}.toml"
    path.write_text(render_config_toml(config))
    cmd = [sys.executable, "-m", "p2p", "run", "--config", str(path), "--data-dir", str(data_dir)]
    return cmd, data_dir


def run_swarm(spec: SwarmSpec, workdir: Path, hosts: list[Host] | None, timeout: float, *,
              settle: float = 0.0, until_punched: float = 0.0,
              ipv6: bool = False) -> dict[str, Any]:
    """Run ``spec``'s learners, one per learning host of ``hosts`` (after the relay, which
    runs a relay-only daemon); None: all on loopback. Returns the figures."""
    workdir.mkdir(parents=True, exist_ok=True)
    swarm = Swarm(workdir)
    t0 = time.monotonic()
    relay_client = None
    learners = [h for h in hosts if h.name != "relay"] if hosts is not None else None
    try:
        first = ""
        if hosts is not None:
            relay = next(h for h in hosts if h.name == "relay")
            (workdir / "relay.toml").write_text(RELAY_CONFIG)
            relay_dir = workdir / "relay"
            relay_dir.mkdir(mode=0o700)
            listen = f"[::]:{PORT}" if ipv6 else f"0.0.0.0:{PORT}"
            relay_client = swarm.start("relay", [
                "ip", "netns", "exec", relay.ns, sys.executable, "-m", "p2p", "run",
                "--relay-only", "--config", str(workdir / "relay.toml"), "--data-dir",
                str(relay_dir), "--listen", listen], relay_dir)
            _wait_status(relay_client, swarm.procs[-1], swarm.logs[-1], 300.0)
        for i in range(spec.nodes):
            host = None if learners is None else learners[i % len(learners)]
            cmd, data_dir = _learner_command(spec, i, workdir, host, ipv6)
            if host is None:
                cmd += ["--listen", "127.0.0.1:0"] + (["--bootstrap", first] if first else [])
            else:
                listen = f"[::]:{PORT}" if ipv6 and host.lan == 0 else f"0.0.0.0:{PORT}"
                cmd = ["ip", "netns", "exec", host.ns, *cmd, "--listen", listen,
                       "--bootstrap", f"relay:{PORT}"]  # by name
            client = swarm.start(f"node{i}", cmd, data_dir)
            if host is None and i == 0:  # on loopback the first node is the bootstrap
                first = _wait_status(client, swarm.procs[-1], swarm.logs[-1],
                                     300.0)["addresses"][0]
        offset = 1 if relay_client is not None else 0
        clients = swarm.clients[offset:]
        for client, proc, log in zip(clients, swarm.procs[offset:], swarm.logs[offset:],
                                     strict=True):
            _wait_status(client, proc, log, 300.0)
        joined: list[float | None] = [None] * spec.nodes
        deadline = time.monotonic() + timeout
        while True:
            statuses = [c.request("status") for c in clients]
            now = time.monotonic()
            for i, s in enumerate(statuses):
                if joined[i] is None and s.get("view_size", 0) > 0:
                    joined[i] = now - swarm.started[offset + i]
            if all(s["round"] >= spec.rounds and s["accuracy"] is not None for s in statuses):
                break
            if now > deadline:
                raise RuntimeError(f"not finished within {timeout:.0f} s: rounds "
                                   f"{[s['round'] for s in statuses]}")
            time.sleep(1.0)
        lan_of = {s["id"]: (None if learners is None else learners[i % len(learners)].lan)
                  for i, s in enumerate(statuses)}
        end = time.monotonic() + max(settle, until_punched)
        while True:  # the swarm keeps averaging; connections settle
            statuses = [c.request("status") for c in clients]
            peers = [c.request("peers") for c in clients]
            sessions = _sessions(statuses, peers, lan_of)
            punched = any(v["punched"] for k, v in sessions.items() if k.startswith("lan"))
            relayed = all("/circuit/" in s["addresses"][0] for s in statuses
                          if lan_of[s["id"]])  # every node behind a NAT advertises a relay
            if time.monotonic() >= end or (until_punched and punched and relayed):
                break
            time.sleep(1.0)
        return _figures(spec, statuses, peers, sessions, joined, lan_of, relay_client,
                        [c.request("metrics")["counters"] for c in clients], t0)
    finally:
        stop_daemons(swarm.procs, 20.0)


def _lan_name(lan: int | None) -> str:
    return "loopback" if lan is None else ("public" if lan == 0 else f"lan{lan}")


def _sessions(statuses: list[dict[str, Any]], peers: list[dict[str, Any]],
              lan_of: dict[str, int | None]) -> dict[str, dict[str, int]]:
    """Open connections between learners on different networks, by the pair of
    networks: how many go direct (by hole punch, by reversal) and through a relay."""
    out: dict[str, dict[str, int]] = {}
    for s, p in zip(statuses, peers, strict=True):
        mine = lan_of[s["id"]]
        for row in p["view"]:
            theirs = lan_of.get(row["id"], -1)
            if theirs == -1 or row.get("path") is None or theirs == mine:
                continue
            key = "-".join(sorted([_lan_name(mine), _lan_name(theirs)]))
            tally = out.setdefault(key, {"direct": 0, "punched": 0, "reversed": 0,
                                         "relayed": 0})
            path = row["path"]
            tally[path if path in tally else "direct"] += 1
    return out


def _figures(spec: SwarmSpec, statuses: list[dict[str, Any]], peers: list[dict[str, Any]],
             sessions: dict[str, dict[str, int]], joined: list[float | None],
             lan_of: dict[str, int | None], relay: AdminClient | None,
             metrics: list[dict[str, Any]], t0: float) -> dict[str, Any]:
    nodes = []
    for i, (s, p) in enumerate(zip(statuses, peers, strict=True)):
        advertised = s["addresses"][0] if s.get("addresses") else ""
        target = parse_dial_address(advertised) if advertised else None
        hop = target.relay if isinstance(target, Circuit) else target
        nodes.append({
            "node": i, "lan": lan_of[s["id"]], "accuracy": s["accuracy"],
            "advertised": advertised, "scope": address_scope(hop.host) if hop else "",
            "relayed": isinstance(target, Circuit), "reachable": s.get("reachable"),
            "reason": s.get("reachable_reason"), "confirmed": s.get("confirmed_addresses"),
            "reserved_with": [r["relay"] for r in (s.get("relay") or {}).get(
                "reserved_with", []) if r["state"] == "active"],
            "hole_punch": (s.get("relay") or {}).get("hole_punch"),
            "view_size": s.get("view_size"),
            # holders known of each model ("relay": the relays a relay knows, no model)
            "model_view": min((len(v) for name, v in p["models"].items() if name != "relay"),
                              default=0),
            "join_seconds": joined[i]})
    accs = [n["accuracy"] for n in nodes]
    behind = [n["join_seconds"] for n in nodes if n["lan"] and n["join_seconds"] is not None]
    relayed_bytes = sum(int(m.get("relay.bytes_relayed", 0)) for m in metrics)
    if relay is not None:
        relayed_bytes += int(relay.request("metrics")["counters"].get("relay.bytes_relayed", 0))
    crossing = [v for k, v in sessions.items() if k != "loopback"]
    total = sum(sum(v.values()) for v in crossing)
    direct = sum(v[p] for v in crossing for p in v if p in DIRECT_PATHS)
    return {"accuracy_median": statistics.median(accs), "accuracy_min": min(accs),
            "accuracy_max": max(accs), "nodes": nodes,
            "unusable_advertised": [n["advertised"] for n in nodes
                                    if n["scope"] in UNUSABLE and n["lan"] is not None],
            "sessions_across_networks": sessions,
            "sessions_direct_share": direct / total if total else None,
            "relay_bytes": relayed_bytes,
            "model_view_min": min(n["model_view"] for n in nodes),
            "join_seconds_behind_nat_median": statistics.median(behind) if behind else None,
            "seconds": time.monotonic() - t0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--public", type=int, default=2, help="learning hosts on the public segment")
    p.add_argument("--lans", default="3,3", help="hosts per NATed LAN, comma-separated")
    p.add_argument("--no-symmetric", action="store_true",
                   help="every NAT endpoint-independent (default: the last one symmetric)")
    p.add_argument("--ipv6", action="store_true", help="a dual-stack public segment")
    p.add_argument("--rate", default="50mbit", help="tc tbf rate of every host's link")
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--runs", type=int, default=1, help="runs whose medians are printed")
    p.add_argument("--settle", type=float, default=30.0,
                   help="seconds the swarm runs on after its rounds before it is read")
    p.add_argument("--until-punched", type=float, default=0.0, metavar="SECONDS",
                   help="instead of --settle: read it once a path between two LANs is "
                        "punched, or after SECONDS")
    p.add_argument("--no-compare", action="store_true", help="skip the loopback swarm")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--keep", type=Path, metavar="DIR",
                   help="run in DIR and keep the daemons' logs and data (default: a "
                        "temporary directory, removed)")
    p.add_argument("--json", type=Path, metavar="PATH")
    args = p.parse_args(argv)
    lans = [int(n) for n in args.lans.split(",") if n.strip()]
    nodes = args.public + sum(lans)
    spec = SwarmSpec(nodes=nodes, rounds=args.rounds, scheme="partial",
                     permutations=default_permutations(nodes), round_interval=0.05,
                     shuffle_period=0.5, eval_every=5)
    settle = 0.0 if args.until_punched else args.settle
    result: dict[str, Any] = {"public": args.public, "lans": lans, "rounds": args.rounds,
                              "symmetric_nat": not args.no_symmetric, "rate": args.rate,
                              "ipv6": args.ipv6, "settle": settle,
                              "netem": "not in this kernel: no added delay or loss"}
    try:
        preflight()
        runs: list[dict[str, Any]] = []
        loopback: list[dict[str, Any]] = []
        for run in range(args.runs):
            with Lab(args.public, lans, not args.no_symmetric, args.rate, args.ipv6) as lab, \
                    tempfile.TemporaryDirectory(prefix="p2p-netlab-") as tmp:
                result["namespaces"] = list(lab.created)
                where = args.keep / f"run{run}" if args.keep else Path(tmp) / "lab"
                runs.append(run_swarm(spec, where, lab.hosts, args.timeout,
                                      settle=settle, until_punched=args.until_punched,
                                      ipv6=args.ipv6))
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
        shares = [r["sessions_direct_share"] for r in runs
                  if r["sessions_direct_share"] is not None]
        result["sessions_direct_share_median"] = statistics.median(shares) if shares else None
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
