"""What `p2p config` and `p2p run` tell an operator about a config that cannot work.

- ``p2p config --json`` prints the resolved config as JSON.
- A network that does not fit the task (input features, classes) is refused by
  ``p2p config``, and by ``p2p run`` before it creates the data directory or
  the identity key.
- ``limits.max_frame_size`` too small for a push of the largest shared model
  is refused by ``p2p config``, naming the key and the minimum.
- ``p2p peers`` failures and ``p2p metrics`` count the same events (sends
  that got no answer), and the node whose pushes fail says so in its log.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import trio

from gossip import Push, PushAck, encode
from gossip.errors import PushUndelivered
from p2p.config import config_to_dict, load_config, push_frame_bytes
from p2p.runtime.protocol import register_node_messages
from p2p.testing import (
    MemoryNetwork,
    admin_request,
    fast_spec,
    memory_swarm,
    running,
    wait_until,
)
from p2p.wire import codec

ROOT = Path(__file__).resolve().parents[3]


def p2p(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "p2p", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": ""})


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_config_json_prints_the_resolved_config(tmp_path: Path) -> None:
    toml = write(tmp_path / "n.toml", '[node]\nname = "n0"\n[training]\nlr = 0.1\n')
    done = p2p("config", "--config", str(toml), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed == json.loads(json.dumps(config_to_dict(load_config(toml))))
    assert printed["node"]["name"] == "n0" and printed["training"]["lr"] == 0.1
    assert printed["data"]["scale"] == "standard"


def test_network_that_does_not_fit_the_task_is_refused_before_anything_starts(
        tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "mine.npz", x=rng.normal(size=(40, 13)), y=np.arange(40) % 3)
    write(tmp_path / "n.toml", '[network]\nlayers = "64=16=3"\n'
                 '[data]\ntask = "npz"\npath = "mine.npz"\n')
    expected = (f"n.toml: network.layers: the task 'npz' ({tmp_path / 'mine.npz'}) has 13 "
                "features and 3 classes, so layers must start with 13 and end with 3; got 64=16=3")
    done = p2p("config", "--config", "n.toml", cwd=tmp_path)
    assert done.returncode == 2 and expected in done.stderr, done.stderr
    data_dir = tmp_path / "n0"
    done = p2p("run", "--config", "n.toml", "--data-dir", str(data_dir), cwd=tmp_path)
    assert done.returncode == 2 and expected in done.stderr, done.stderr
    assert not data_dir.exists()  # no identity key, nothing half set up
    # digits: 64 features, 10 classes, known without loading anything
    digits = write(tmp_path / "d.toml", '[network]\nlayers = "64=16=3"\n')
    done = p2p("config", "--config", str(digits), cwd=tmp_path)
    assert done.returncode == 2
    assert "the task 'digits' has 64 features and 10 classes" in done.stderr
    missing = write(tmp_path / "m.toml", '[data]\ntask = "npz"\npath = "nope.npz"\n')
    done = p2p("config", "--config", str(missing), cwd=tmp_path)
    assert done.returncode == 2 and "data.path:" in done.stderr
    assert "nope.npz: no such .npz file" in done.stderr


def test_frame_size_too_small_for_a_push_is_refused(tmp_path: Path) -> None:
    toml = write(tmp_path / "n.toml", '[[models]]\nname = "global"\nneurons = "64-40-26-10"\n'
                 "[limits]\nmax_frame_size = 1024\n")
    done = p2p("config", "--config", str(toml), cwd=tmp_path)
    need = push_frame_bytes(3936)
    assert done.returncode == 2, done.stdout
    assert "limits.max_frame_size: 1024 bytes cannot carry a push of model 'global'" in done.stderr
    assert f"expected at least {need}" in done.stderr
    ok = write(tmp_path / "ok.toml", toml.read_text().replace("1024", str(need)))
    assert p2p("config", "--config", str(ok), cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("parameters", [1, 3936, 266_610])
def test_the_frame_size_bound_covers_an_encoded_push(parameters: int) -> None:
    register_node_messages()
    # f64, the largest encoding, asking for a reply (the ack's reply is no larger)
    push = Push(model=b"f" * 32, push_id=2**63 - 1, values=encode(np.full(parameters, np.pi),
                                                                  "f64"),
                weight=1e300, masked=True, noisy=True, noise_age=2**31, want_reply=True)
    sealing_overhead = 64  # AEAD tag and frame header, with room to spare
    assert len(codec.encode(push)) + sealing_overhead <= push_frame_bytes(parameters)
    # a push-pull reply travels in the ack: the same bound covers it
    ack = PushAck(model=b"f" * 32, push_id=2**63 - 1, reply=push.values, reply_weight=1e300)
    assert len(codec.encode(ack)) + sealing_overhead <= push_frame_bytes(parameters)


async def test_peers_failures_and_metrics_count_the_same_failed_pushes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    net = MemoryNetwork()
    a, b = memory_swarm(tmp_path, net, fast_spec(nodes=2, rounds=10_000))
    failing = 3
    calls = 0

    async def fail_then_hang(peer: bytes, push: Push) -> object:
        nonlocal calls
        calls += 1
        if calls > failing:
            await trio.sleep_forever()  # no further attempt: the counts stay still
        raise PushUndelivered("connection lost", maybe_delivered=True)

    async with running([a, b]):
        await wait_until(lambda: a.model_counters("global")["acks"] > 0, 60)
        with caplog.at_level(logging.INFO, logger="gossip.driver"):
            a.gossip._transport.push = fail_then_hang  # type: ignore[method-assign]
            await wait_until(lambda: calls > failing, 60)
        b_id = b.identity.node_id.hex()
        # b drops out of a's views for the moment a shuffle with it is in flight:
        # ask until the views show it
        with trio.fail_after(60):
            while True:
                peers = await admin_request(a.data_dir, "peers")
                rows = [row for row in peers["view"] + peers["models"]["global"]
                        if row["id"] == b_id]
                if rows:
                    break
                await trio.sleep(0.05)
        metrics = await admin_request(a.data_dir, "metrics")
    assert all(row["failures"] == failing for row in rows), (peers, b_id)
    assert metrics["counters"]["global.undelivered"] == failing
    lines = [r.getMessage() for r in caplog.records]
    short = b.identity.node_id[:4].hex()
    assert f"push of global to {short} failed (1 in a row): connection lost" in lines, lines
    assert not any("(2 in a row)" in line for line in lines)  # rate-limited: 1st, 10th, ...
