"""scripts/simulate.py and the simulation kit: real nodes on a virtual clock."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import trio
import trio.testing

from learner.trainer import Evaluation
from p2p.runtime.train_runner import InlineRunner, ThreadRunner
from p2p.simulation import cli as simulate_cli
from p2p.simulation.churn import ChurnEvent, parse_churn_script, random_churn
from p2p.simulation.network import Distribution, Link, SimNetwork, parse_distribution
from p2p.wire.codec import Message
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.messages import Ping, Pong


def test_distributions_parse_and_draw() -> None:
    assert parse_distribution("20", scale=1e-3) == Distribution("fixed", 0.02)
    uniform = parse_distribution("uniform:5:50", scale=1e-3)
    assert uniform == Distribution("uniform", 0.005, 0.05)
    rng = random.Random(1)
    assert all(0.005 <= uniform.draw(rng) <= 0.05 for _ in range(100))
    lognormal = parse_distribution("lognormal:10:0.5")
    assert lognormal.a == 10 and lognormal.b == 0.5
    for bad in ("fast", "uniform:5", "uniform:9:1", "gamma:1:2", "-3"):
        with pytest.raises(ValueError, match="--latency"):
            parse_distribution(bad, what="--latency")


def test_links_are_drawn_once_per_pair_and_seed() -> None:
    net = SimNetwork(seed=3, latency=Distribution("uniform", 0.0, 1.0))
    again = SimNetwork(seed=3, latency=Distribution("uniform", 0.0, 1.0))
    assert net.link("a:1", "b:1") == net.link("a:1", "b:1")
    assert again.link("b:1", "a:1") == net.link("b:1", "a:1")  # order of use does not matter
    assert net.link("a:1", "b:1") != net.link("b:1", "a:1")
    assert Link(0.01, 1000.0).delay(500) == pytest.approx(0.51)
    assert Link(0.01, math.inf).delay(10**9) == 0.01


async def test_a_write_arrives_after_latency_plus_transmission(
        autojump_clock: trio.testing.MockClock) -> None:
    net = SimNetwork(latency=Distribution("fixed", 0.1), bandwidth=Distribution("fixed", 1e4))
    received: list[tuple[float, bytes]] = []

    class Sink:
        async def serve_stream(self, stream: trio.abc.Stream, handler: object,
                               name: str) -> None:
            data = bytes(await stream.receive_some())
            received.append((trio.current_time(), data))

    async with trio.open_nursery() as nursery:
        net.servers["b:1"] = (Sink(), None, nursery)  # type: ignore[assignment]
        stream = await net.connect_from("a:1", "b:1")
        start = trio.current_time()
        await stream.send_all(b"x" * 1000)  # 0.1 s latency + 1000 B at 10 kB/s
        await trio.testing.wait_all_tasks_blocked()
    [(arrived, data)] = received
    assert arrived == pytest.approx(start + 0.2) and data == b"x" * 1000
    assert (net.messages, net.bytes) == (1, 1000)
    with pytest.raises(OSError, match="refused"):
        await net.connect_from("a:1", "nobody:1")


async def test_sim_streams_behave_as_trio_streams(autojump_clock: trio.testing.MockClock) -> None:
    from p2p.simulation.network import SimStream

    net = SimNetwork()
    a, b = SimStream.pair(net, Link(0.0, math.inf), Link(0.5, math.inf))
    await a.send_all(b"hello ")
    await a.send_all(memoryview(b"world"))
    assert await b.receive_some(3) == b"hel"  # at most max_bytes, the rest kept in order
    assert await b.receive_some() == b"lo world"
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        got: list[bytes] = []

        async def read() -> None:
            got.append(bytes(await a.receive_some()))
            got.append(bytes(await a.receive_some()))
        nursery.start_soon(read)
        await b.send_all(b"back")  # over the backward link: 0.5 s latency
        assert trio.current_time() - start == pytest.approx(0.5)
        await b.aclose()  # the reader gets the bytes, then end of stream
    assert got == [b"back", b""]
    with pytest.raises(trio.BrokenResourceError):
        await a.send_all(b"x")  # the peer is gone
    with pytest.raises(trio.ClosedResourceError):
        await b.receive_some()
    assert (net.messages, net.bytes) == (3, 15)


async def test_pooled_connections_are_reused_and_redials_counted(
        autojump_clock: trio.testing.MockClock) -> None:
    # The diagnosis of docs/guide/simulation.md, "Cost at scale": the simulation's new
    # connections are first contacts, not pooled connections closed and reopened.
    net = SimNetwork(latency=Distribution("fixed", 0.01))
    server = net.transport(Identity.generate(), "b:1")
    client = net.transport(Identity.generate(), "a:1", idle_timeout=5.0)

    async def no_reply(peer: PeerInfo, msg: Message) -> Message | None:
        return None

    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, no_reply)
        for _ in range(5):  # within the idle timeout: one connection, one handshake
            assert isinstance(await client.request(address, Ping(1)), Pong)
            await trio.sleep(1.0)
        assert (net.connections, net.reconnections) == (1, 0)
        await trio.sleep(10.0)  # the pool closes it once idle for idle_timeout
        assert isinstance(await client.request(address, Ping(2)), Pong)
        assert (net.connections, net.reconnections) == (2, 1)
        nursery.cancel_scope.cancel()


def test_churn_scripts_parse_and_name_bad_lines() -> None:
    text = "# t action node\n5 crash 3  # killed\n\n12 restart 3\n1 join 2\n"
    assert parse_churn_script(text, 4) == [ChurnEvent(1.0, 2, "join"),
                                           ChurnEvent(5.0, 3, "crash"),
                                           ChurnEvent(12.0, 3, "restart")]
    for bad, why in (("5 crash", "TIME ACTION NODE"), ("5 explode 1", "explode"),
                     ("5 crash 9", "not one of the 4"), ("x crash 1", "a number")):
        with pytest.raises(ValueError, match=why) as info:
            parse_churn_script(f"1 join 1\n{bad}\n", 4, where="c.txt")
        assert "c.txt:2" in str(info.value)


def test_random_churn_crashes_then_restarts_a_fraction() -> None:
    events = random_churn(21, 0.5, 10.0, seed=4)
    crashed = {e.node for e in events if e.action == "crash"}
    assert len(crashed) == 10 and 0 not in crashed
    for node in crashed:
        crash, restart = (e.time for e in events if e.node == node)
        assert 0 < crash < restart <= 10.0
    assert events == random_churn(21, 0.5, 10.0, seed=4)
    assert all(e.from_training for e in events)  # timed from the first round, not the start


def test_random_churn_happens_while_the_swarm_trains(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Timed from the start, the whole crash window (the first half of rounds x
    # (compute + interval)) fell in the start-up wait, before any node trained.
    out = tmp_path / "out.json"
    simulate = simulate_cli
    assert simulate.main(["--nodes", "6", "--rounds", "12", "--quiet", "--json", str(out),
                          "--churn", "0.5", "--checkpoint-interval", "0.05",
                          "--seed", "5"]) == 0
    doc = json.loads(out.read_text())
    crashes = [e for e in doc["churn"] if e["action"] == "crash"]
    assert len(crashes) == 2 and all(e["before"] == "up" for e in crashes)
    # every crashed node had trained, and came back from a checkpoint of its training
    assert all(e["round"] >= 1 for e in crashes), crashes
    rows = doc["nodes"]
    for e in crashes:
        assert rows[e["node"]]["resumed_at"], rows[e["node"]]
        assert rows[e["node"]]["round"] == 12


async def test_inline_runner_charges_simulated_compute_time(
        autojump_clock: trio.testing.MockClock) -> None:
    class Trainer:
        def train_steps(self, steps: int) -> float:
            return float(steps)

    runner = InlineRunner(0.25)
    start = trio.current_time()
    assert await runner.train_steps(Trainer(), 3) == 3.0  # type: ignore[arg-type]
    assert trio.current_time() - start == pytest.approx(0.25)
    ev = Evaluation(accuracy=0.5, loss=1.0, samples=10)
    assert await runner.evaluate(lambda: ev) is ev
    assert trio.current_time() - start == pytest.approx(0.25)  # evaluations cost no time
    with pytest.raises(ValueError, match="compute_seconds"):
        InlineRunner(-1.0)


async def test_thread_runner_runs_work_in_a_worker_thread() -> None:
    import threading
    main = threading.get_ident()
    assert await ThreadRunner().run_blocking(threading.get_ident) != main


def test_simulation_with_loss_and_a_crash_restarted_from_its_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "churn.txt"
    # node 2 crashes after its first checkpoints and comes back on its data directory
    script.write_text("0.8 crash 2\n1.2 restart 2\n1.0 leave 4\n")
    out = tmp_path / "out.json"
    simulate = simulate_cli
    code = simulate.main(["--nodes", "5", "--rounds", "10", "--quiet", "--json", str(out),
                          "--loss", "0.05", "--latency", "uniform:1:5", "--bandwidth", "100",
                          "--churn-script", str(script), "--checkpoint-interval", "0.2",
                          "--seed", "2", "--no-start-together"])
    assert code == 0
    doc = json.loads(out.read_text())
    for key in ("nodes", "mean_accuracy", "worst_accuracy", "wall_seconds",
                "simulated_seconds", "series", "network", "churn"):
        assert key in doc, key
    rows = doc["nodes"]
    assert [r["node"] for r in rows] == list(range(5))
    for r in rows:
        if r["state"] == "up":
            assert r["round"] == 10
            assert 0.0 <= r["accuracy"] <= 1.0
            assert r["pushes_sent"] > 0 and r["bytes_sent"] > 0 and r["view"]["max"] > 0
            assert isinstance(r["admission"], dict)
    assert doc["mean_accuracy"] > 0.2  # better than chance on digits
    crashed = rows[2]
    assert (crashed["state"], crashed["crashes"], crashed["restarts"]) == ("up", 1, 1)
    assert crashed["resumed_at"] is not None and crashed["resumed_at"] > 0
    assert rows[4]["state"] == "left"
    assert [e["action"] for e in doc["churn"]] == ["crash", "leave", "restart"]
    assert doc["network"]["messages"] > 0 and doc["network"]["messages_dropped"] > 0
    # lost writes and the restart make peers dial again: counted apart from first dials
    assert 0 < doc["network"]["reconnections"] < doc["network"]["connections"]
    assert doc["simulated_seconds"] >= 1.2
    # what is simulated differently from a daemon is named
    assert doc["simulation"]["descriptor_checks"] == "in-process"
    assert doc["simulation"]["max_connections_note"] == "the config's, as daemons"
    assert doc["simulation"]["connect_jitter_ms"] == simulate.DEFAULT_CONNECT_JITTER_MS
    assert doc["simulation"]["garbage_collector"]["frozen_objects"] > 0
    assert doc["network"]["admission_lines_not_logged"] == sum(
        doc["network"]["admission"].get(rule, 0) for rule in (
            "max_handshakes", "handshakes_per_source", "max_sessions", "sessions_per_source"))
    times = [p["time"] for p in doc["series"]]
    assert times == sorted(times) and len(times) >= 2


def test_simulated_transports_take_the_limits_of_the_node_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # as a daemon builds its transport from [limits]: caps, timeouts, rate limit, frame size
    from p2p.runtime.node_transport import node_frame_limit
    from p2p.simulation.host import Simulation

    simulate = simulate_cli
    args = simulate.build_parser().parse_args(["--nodes", "2", "--max-connections", "7"])
    plan = simulate.plan_simulation(args)
    sim = Simulation(plan.spec, tmp_path, plan.network, runner_for=plan.runner_for,
                     configure=plan.configure)
    node, transport = sim._build(sim.slots[1])
    limits = node.config.limits
    assert limits.max_connections == 7 and transport.max_connections == 7
    assert transport.admission.limits.max_sessions == 7
    assert transport.max_messages_per_second == limits.max_messages_per_second
    assert transport.read_timeout == limits.read_timeout
    assert transport.max_frame_size == node_frame_limit(node.config)
    # a session's silence before it gives way runs on the simulation's fast clock
    period = node.config.peer_sampling.period
    assert period < 1.0 and transport.admission.limits.silence == pytest.approx(15 * period)
    with pytest.raises(ValueError, match="--max-connections"):
        simulate.plan_simulation(simulate.build_parser().parse_args(
            ["--nodes", "2", "--max-connections", "0"]))


def test_bad_flags_stop_before_anything_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    simulate = simulate_cli
    assert simulate.main(["--nodes", "4", "--latency", "soon"]) == 2
    assert "--latency" in capsys.readouterr().err
    bad = tmp_path / "c.txt"
    bad.write_text("1 crash 7\n")
    assert simulate.main(["--nodes", "4", "--churn-script", str(bad)]) == 2
    assert "node 7" in capsys.readouterr().err


def test_gossip_only_dispatches_to_its_own_mode(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    simulate = simulate_cli
    out = tmp_path / "g.json"
    assert simulate.main(["--gossip-only", "--nodes", "40", "--rounds", "3", "--quiet",
                          "--holders", "0", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["nodes"] == 40 and doc["worst_accuracy"] is None
    assert "wall_seconds" in doc and "simulated_seconds" in doc


def test_large_swarms_default_to_lockstep_trusted_handshakes_and_aligned_rounds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    simulate = simulate_cli

    def plan(*argv: str) -> object:
        return simulate.plan_simulation(simulate.build_parser().parse_args(list(argv)))

    large = plan("--nodes", "300")
    assert large.network.trusted_handshakes
    assert simulate.max_connections_of(large_args := simulate.build_parser().parse_args(
        ["--nodes", "300"])) == simulate.LARGE_SWARM_MAX_CONNECTIONS == 256
    from p2p.swarm import node_config
    config = node_config(large.spec, 1, Path("unused"), None)
    assert config.limits.max_connections == 64  # daemons'
    assert large.configure(config).limits.max_connections == 256
    assert simulate.max_connections_of(simulate.build_parser().parse_args(
        ["--nodes", "300", "--max-connections", "64"])) == 64
    assert simulate.max_connections_of(simulate.build_parser().parse_args(
        ["--nodes", "256"])) is None  # the config's, as daemons
    assert large_args.descriptor_checks == "in-process"
    assert large.lockstep is not None and large.lockstep.batched
    assert large.lockstep.align == 0.0  # aligning holds model locks: off unless asked
    assert large.spec.eval_every == 10
    small = plan("--nodes", "8")
    assert not small.network.trusted_handshakes and small.lockstep is None
    chosen = plan("--nodes", "8", "--lockstep", "plain", "--lockstep-align", "0.5",
                  "--handshakes", "trusted")
    assert chosen.network.trusted_handshakes
    assert not chosen.lockstep.batched and chosen.lockstep.align == 0.5
    assert plan("--nodes", "300", "--lockstep", "off", "--handshakes", "noise").lockstep is None
    with pytest.raises(ValueError, match="--lockstep-align"):
        plan("--nodes", "8", "--lockstep", "batched", "--lockstep-align", "-1")


def test_simulated_samplers_trust_in_process_descriptors_daemons_check_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # peer sampling's in_process option: simulated nodes only (a daemon checks every field)
    from p2p.simulation.host import Simulation
    from p2p.swarm import SwarmSpec
    from p2p.testing.nodes import tcp_node

    simulate = simulate_cli

    def sampler_of_simulated(*flags: str) -> object:
        args = simulate.build_parser().parse_args(["--nodes", "2", *flags])
        plan = simulate.plan_simulation(args)
        sim = Simulation(plan.spec, tmp_path / "-".join(flags or ("default",)), plan.network,
                         runner_for=plan.runner_for, configure=plan.configure,
                         in_process_peers=plan.in_process_peers)
        node, _ = sim._build(sim.slots[1])
        node._start_sampler(sim.slots[1].address)
        return node.sampler

    assert sampler_of_simulated()._in_process is True  # type: ignore[attr-defined]
    full = sampler_of_simulated("--descriptor-checks", "full")
    assert full._in_process is False  # type: ignore[attr-defined]
    daemon = tcp_node(tmp_path / "daemon", SwarmSpec(nodes=2, rounds=1))
    assert daemon.in_process_peers is False
    daemon._start_sampler("127.0.0.1:7000")
    assert daemon.sampler._in_process is False  # type: ignore[attr-defined]
