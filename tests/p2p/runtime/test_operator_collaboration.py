"""Issue 14, item 2: a node that shares no model with any peer says so, and why.

The verdict itself (:func:`p2p.runtime.collaboration.assess`) and when it is
logged (:class:`CollaborationReporter`) are sans-IO and tested directly; then
real nodes: two nodes whose networks differ join each other over loopback TCP
and ``p2p status`` (the real CLI, over the admin socket) says that nothing is
shared and which fingerprints each side holds; over the in-memory network a
node whose bootstrap is down, or holds another swarm key, says that.
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path

import pytest
import trio

from p2p.cli.main import main as p2p_main
from p2p.cli.render import render_status, to_text
from p2p.runtime.admin_server import to_jsonable
from p2p.runtime.collaboration import (
    CollaborationReporter,
    CollaborationState,
    ContactLog,
    assess,
)
from p2p.testing import MemoryNetwork, fast_spec, memory_node, running, tcp_node, wait_until

G = b"\x11" * 32  # this node's model
OTHER = b"\x9f" * 32  # a model of another shape
SEMI = b"\x22" * 32


# --------------------------------------------------------------------------- the verdict


def test_peers_with_other_fingerprints_are_a_shape_mismatch() -> None:
    status = assess({"global": G}, [frozenset({OTHER}), frozenset({OTHER})], isolated=False)
    assert status.state is CollaborationState.SHAPE_MISMATCH and not status.collaborating
    assert not status.isolated
    assert status.reason.startswith("no peer holds model global (fingerprint 11111111); "
                                    "peers hold 9f9f9f9f (2 peers)")
    assert "network.layers or [[models]] differ" in status.reason
    assert status.holders == {"global": 0}


def test_peers_holding_nothing_are_named_as_such() -> None:
    status = assess({"global": G}, [frozenset()], isolated=False)
    assert status.state is CollaborationState.SHAPE_MISMATCH
    assert "none of the 1 peer known shares any model" in status.reason


def test_one_holder_of_one_model_is_collaborating_and_the_rest_is_named() -> None:
    status = assess({"global": G, "perm-8-9": SEMI},
                    [frozenset({G}), frozenset({G, OTHER})], isolated=False)
    assert status.collaborating and status.holders == {"global": 2, "perm-8-9": 0}
    assert status.reason == ("sharing global with 2 peers; no known peer holds perm-8-9 "
                             "(fingerprint 22222222) yet")


def test_a_local_only_configuration_is_not_collaborating_by_design() -> None:
    status = assess({}, [frozenset({OTHER})], isolated=False)
    assert status.state is CollaborationState.LOCAL_ONLY and not status.collaborating
    assert "shares no model" in status.reason and status.isolation is None


def test_isolation_names_the_most_specific_reason() -> None:
    contacts = ContactLog()
    waiting = assess({"global": G}, [], isolated=True, contacts=contacts)
    assert waiting.state is CollaborationState.WAITING and waiting.isolated
    assert "no bootstrap address configured" in waiting.reason

    joining = assess({"global": G}, [], isolated=True, bootstrap=["10.0.0.1:7000"],
                     contacts=contacts)
    assert joining.state is CollaborationState.JOINING
    assert joining.isolation == "no peer known yet: contacting 10.0.0.1:7000"

    contacts.failed("10.0.0.1:7000", "connect failed: [Errno 111] Connection refused")
    down = assess({"global": G}, [], isolated=True, bootstrap=["10.0.0.1:7000"],
                  contacts=contacts)
    assert down.state is CollaborationState.BOOTSTRAP_UNREACHABLE
    assert down.reason == ("no bootstrap address answered: 10.0.0.1:7000 (connect failed: "
                           "[Errno 111] Connection refused); retrying with backoff")

    contacts.failed("10.0.0.1:7000", "handshake failed: wrong swarm key", handshake=True)
    key = assess({"global": G}, [], isolated=True, bootstrap=["10.0.0.1:7000"],
                 contacts=contacts, swarm_key=True)
    assert key.state is CollaborationState.HANDSHAKE_FAILED
    assert key.reason.startswith("handshake failed with 10.0.0.1:7000 (wrong swarm key): "
                                 "the address answers but admits no peer")
    assert "cannot be told apart from a node of another swarm" in key.reason
    assert "(this node uses a swarm key)" in key.reason

    contacts.answered("10.0.0.1:7000")  # it answered since: no failure to report
    assert assess({"global": G}, [], isolated=True, bootstrap=["10.0.0.1:7000"],
                  contacts=contacts).state is CollaborationState.JOINING


def test_a_local_only_node_still_says_why_it_is_isolated() -> None:
    status = assess({}, [], isolated=True)
    assert status.state is CollaborationState.LOCAL_ONLY
    assert status.isolation is not None and "waiting for a peer" in status.isolation


def test_contact_log_is_bounded() -> None:
    contacts = ContactLog(limit=2)
    for i in range(3):
        contacts.failed(f"10.0.0.{i}:1", "refused")
    assert contacts.get("10.0.0.0:1") is None and contacts.get("10.0.0.2:1") is not None


# --------------------------------------------------------------------------- when to log


def test_reporter_waits_for_the_grace_then_repeats_at_most_every_period() -> None:
    bad = assess({"global": G}, [frozenset({OTHER})], isolated=False)
    good = assess({"global": G}, [frozenset({G})], isolated=False)
    reporter = CollaborationReporter(grace=5.0, repeat=60.0)
    assert reporter.update(bad, 0.0) is None
    assert reporter.update(bad, 4.9) is None
    level, message = reporter.update(bad, 5.0) or (0, "")
    assert level == logging.WARNING and message.startswith("not collaborating: no peer holds")
    assert all(reporter.update(bad, t) is None for t in (6.0, 30.0, 64.9))
    assert reporter.update(bad, 65.0) is not None  # once per repeat period
    assert reporter.update(good, 66.0) == (logging.INFO, f"collaborating: {good.reason}")
    assert reporter.update(good, 67.0) is None  # said once
    assert reporter.update(bad, 68.0) is None  # a new spell of trouble waits for the grace


def test_reporter_announces_collaboration_once_and_local_only_once() -> None:
    good = assess({"global": G}, [frozenset({G})], isolated=False)
    reporter = CollaborationReporter(grace=5.0, repeat=60.0)
    assert reporter.update(good, 0.0) is not None
    assert reporter.update(good, 100.0) is None
    local = CollaborationReporter(grace=5.0, repeat=60.0)
    only = assess({}, [], isolated=False)
    assert local.update(only, 0.0) == (logging.INFO, f"not collaborating: {only.reason}")
    assert local.update(only, 1000.0) is None


# --------------------------------------------------------------------------- real nodes


def _cli(*argv: str) -> tuple[int, str]:
    """Run the ``p2p`` command in this process (a worker thread); exit status and stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = p2p_main(list(argv))
    return code, out.getvalue()


@pytest.mark.e2e
async def test_nodes_of_different_shapes_say_they_share_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="p2p.runtime.collaboration_watch")
    full = tcp_node(tmp_path / "a", fast_spec(scheme="full", rounds=1), 0)
    partial_spec = fast_spec(scheme="partial", rounds=1)
    async with running([full]) as (address,):
        partial = tcp_node(tmp_path / "b", partial_spec, 1, bootstrap=[address])
        async with running([partial]):
            await wait_until(lambda: partial.sampler.view() and full.sampler.view())
            mine = partial.learning.fingerprints["global"].hex()[:8]
            theirs = full.learning.fingerprints["global"].hex()[:8]
            expected = (f"no peer holds model global (fingerprint {mine}); peers hold "
                        f"{theirs} (1 peer)")
            # the log says so (after a grace of a few shuffle periods), as a warning
            await wait_until(lambda: any(
                r.levelno == logging.WARNING and f"not collaborating: {expected}" in r.getMessage()
                for r in caplog.records))
            code, text = await trio.to_thread.run_sync(
                _cli, "status", "--data-dir", str(tmp_path / "b"), "--json")
            assert code == 0
            assert '"collaborating": false' in text and '"shape-mismatch"' in text
            assert expected in text
            code, table = await trio.to_thread.run_sync(
                _cli, "status", "--data-dir", str(tmp_path / "b"))
            assert code == 0
            flat = " ".join(table.split())
            assert "isolated │ no" in flat
            assert "collaborating │ no: no peer holds model global" in flat


@pytest.mark.e2e
async def test_nodes_of_the_same_shape_report_collaborating(tmp_path: Path) -> None:
    net = MemoryNetwork(seed=3)
    spec = fast_spec(scheme="partial", rounds=1)
    a = memory_node(net, tmp_path / "a", spec, 0, "10.0.0.1:7000")
    b = memory_node(net, tmp_path / "b", spec, 1, "10.0.0.2:7000", bootstrap=["10.0.0.1:7000"])
    async with running([a, b]):
        await wait_until(lambda: b.collaboration().collaborating)
        status = to_jsonable(b.admin.status())
        assert isinstance(status, dict)
        assert status["collaborating"] is True
        assert status["collaboration_reason"] == "sharing global with 1 peer"
        assert "collaborating │ yes: sharing global with 1 peer" in to_text(render_status(status))


@pytest.mark.e2e
async def test_an_unreachable_bootstrap_is_named_with_its_error(tmp_path: Path) -> None:
    net = MemoryNetwork(seed=4)
    node = memory_node(net, tmp_path / "a", fast_spec(rounds=1), 0, "10.0.0.1:7000",
                       bootstrap=["10.0.0.9:7000"])
    async with running([node]):
        await wait_until(lambda: node.collaboration().state
                         is CollaborationState.BOOTSTRAP_UNREACHABLE)
        status = to_jsonable(node.admin.status())
        assert isinstance(status, dict) and status["isolated"] is True
        assert status["isolation_reason"] == (
            "no bootstrap address answered: 10.0.0.9:7000 (connect failed: connection to "
            "10.0.0.9:7000 refused (in-memory network)); retrying with backoff")
        assert "isolated │ yes: no bootstrap address answered: 10.0.0.9:7000" in " ".join(
            to_text(render_status(status)).split())


@pytest.mark.e2e
async def test_another_swarm_key_is_reported_as_a_failed_handshake(tmp_path: Path) -> None:
    net = MemoryNetwork(seed=5)
    spec = fast_spec(rounds=1)
    a = memory_node(net, tmp_path / "a", spec, 0, "10.0.0.1:7000", swarm_key=b"\x01" * 32)
    b = memory_node(net, tmp_path / "b", spec, 1, "10.0.0.2:7000", bootstrap=["10.0.0.1:7000"],
                    swarm_key=b"\x02" * 32)
    async with running([a, b]):
        await wait_until(lambda: b.collaboration().state is CollaborationState.HANDSHAKE_FAILED)
        reason = b.collaboration().reason
        assert reason.startswith("handshake failed with 10.0.0.1:7000 (")
        assert "a wrong or missing swarm key cannot be told apart" in reason
        assert reason.endswith("(this node uses a swarm key)")
