"""Issue 30, items 2 and 5: status that tells the truth, logs for operators.

``collaborating: yes`` means every shared model a known peer holds had an
exchange accepted in the last max(30 s, 3 rounds); otherwise ``no:`` with the
most frequent refusal, in status and once in the log. Refusal lines a peer
drives are rate-limited on the sender's side too. ``training.min_peers`` counts
only peers holding one of the node's models, and the wait shows. A swarm at the
default level logs no protocol detail at INFO. The verdict's parts are sans-IO
and tested directly; then nodes over the in-memory network in virtual time.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from pathlib import Path

import pytest
import trio
import trio.testing

from gossip import RejectedPush
from p2p.runtime.collaboration import (
    CollaborationReporter,
    CollaborationState,
    assess,
    waiting_for_peers,
    with_exchanges,
)
from p2p.runtime.exchanges import ExchangeLedger, refusal_kind
from p2p.runtime.node import Node
from p2p.runtime.train_runner import InlineRunner
from p2p.swarm import SwarmSpec
from p2p.testing import MemoryNetwork, fast_spec, memory_addresses, memory_node, running, wait_until

G = b"\x11" * 32
LIMIT = 900.0  # virtual seconds


# --------------------------------------------------------------------------- the verdict


def test_refusals_are_counted_by_the_rule_that_refused() -> None:
    assert refusal_kind("clip_debt: a clipped merge of 0.079 clipped away ...") == "clip_debt"
    assert refusal_kind("flag_mode: a masked or noisy push, but ...") == "flag_mode"
    assert refusal_kind("values: magnitude 3e+30 exceeds the bound 1e+06") == "values"
    assert refusal_kind("node is shutting down") == "node is shutting down"


def test_the_ledger_window_spans_30_s_or_3_rounds() -> None:
    ledger = ExchangeLedger()
    assert ledger.window() == 30.0
    ledger.round_seen(0, 0.0)
    ledger.round_seen(4, 80.0)  # 20 s per round
    assert ledger.window() == 60.0
    ledger.acked("global", 10.0)
    assert ledger.model("global", 69.0).exchanging
    assert not ledger.model("global", 71.0).exchanging


def test_merges_count_only_while_no_push_of_this_node_is_refused() -> None:
    ledger = ExchangeLedger()
    ledger.merged("global", 1.0)
    assert ledger.model("global", 2.0).exchanging
    for t in (2.0, 3.0, 4.0):
        ledger.refused_by_peer("global", "values: magnitude 3e+30 exceeds the bound 1e+06", t)
    ledger.refused_here("global", "clip_debt: a clipped merge ...", 4.0)
    seen = ledger.model("global", 5.0)
    assert not seen.exchanging and (seen.sent_refused, seen.merged, seen.refused_here) == (3, 1, 1)
    assert seen.top_refusal == ("values", 3, "values: magnitude 3e+30 exceeds the bound 1e+06",
                                True)
    ledger.acked("global", 6.0)  # a push of ours got through: exchanging again
    assert ledger.model("global", 7.0).exchanging


def test_holders_without_an_accepted_exchange_are_not_collaborating() -> None:
    known = assess({"global": G}, [frozenset({G})], isolated=False)
    assert known.collaborating  # a holder is known: assess alone said yes
    ledger = ExchangeLedger()
    silent = with_exchanges(known, {"global": ledger.model("global", 50.0)}, 30.0)
    assert silent.state is CollaborationState.NO_EXCHANGE
    assert silent.reason.startswith("no exchange of global (1 peer hold it) accepted in the "
                                    "last 30 s")
    ledger.refused_by_peer("global", "flag_mode: a masked or noisy push, but this node runs "
                           "no masked mode", 40.0)
    refused = with_exchanges(known, {"global": ledger.model("global", 50.0)}, 30.0)
    assert refused.state is CollaborationState.REFUSED and not refused.collaborating
    assert refused.reason == (
        "no exchange of global accepted in the last 30 s (1 of its pushes refused by peers); "
        "most refusals (1): flag_mode: a masked or noisy push, but this node runs no masked "
        "mode")
    ledger.acked("global", 45.0)
    assert with_exchanges(known, {"global": ledger.model("global", 50.0)}, 30.0).collaborating


def test_refused_or_missing_exchanges_are_logged_once_while_they_last() -> None:
    reporter = CollaborationReporter(grace=2.0, repeat=60.0)
    known = assess({"global": G}, [frozenset({G})], isolated=False)
    ledger = ExchangeLedger()
    ledger.refused_by_peer("global", "values: bad", 0.0)
    refused = with_exchanges(known, {"global": ledger.model("global", 1.0)}, 30.0)
    said = [reporter.update(refused, float(t)) for t in range(0, 600, 5)]
    assert [s for s in said if s is not None] == [(logging.WARNING,
                                                   f"not collaborating: {refused.reason}")]


def test_the_wait_for_min_peers_is_a_state_of_its_own_logged_by_the_wait() -> None:
    status = waiting_for_peers(1, 2, "global", 60.0)
    assert status.state is CollaborationState.WAITING_FOR_PEERS and not status.collaborating
    assert status.reason == ("waiting for peers before the first round: 1 of 2 known hold "
                             "global (training.min_peers = 2; training starts anyway after 60 s)")
    assert CollaborationReporter(grace=0.0, repeat=1.0).update(status, 100.0) is None


# --------------------------------------------------------------------------- nodes


def _pair(tmp_path: Path, spec: SwarmSpec, other: SwarmSpec | None = None) -> list[Node]:
    net, addresses = MemoryNetwork(), memory_addresses(2)
    return [memory_node(net, tmp_path / f"n{i}", spec if i == 0 or other is None else other, i,
                        addresses[i], bootstrap=addresses[:1] if i else (),
                        train_runner=InlineRunner()) for i in range(2)]


async def test_a_node_whose_pushes_are_all_refused_says_so_with_the_reason(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        autojump_clock: trio.testing.MockClock) -> None:
    caplog.set_level(logging.INFO, logger="p2p.runtime.collaboration_watch")
    caplog.set_level(logging.DEBUG, logger="gossip.driver")  # last: it sets the handler's level
    spec = fast_spec(rounds=0, round_interval=1.0, steps_per_round=1, eval_every=100,
                     shuffle_period=1.0)
    a, b = _pair(tmp_path, spec)
    core = b.cores["global"]
    honest = core.on_push
    a_id = a.identity.node_id

    def refuse_a(sender: bytes, push: object, now: float) -> object:
        if sender == a_id:  # what a value check says of a corrupt node's pushes
            raise RejectedPush("values: magnitude 3.1e+30 exceeds the bound 1e+06")
        return honest(sender, push, now)  # type: ignore[arg-type]

    core.on_push = refuse_a  # type: ignore[method-assign]
    async with running([a, b]):
        with trio.fail_after(LIMIT):
            await wait_until(lambda: a.collaboration().state is CollaborationState.REFUSED,
                             timeout=LIMIT)
            await trio.sleep(180)  # three minutes of refusals
        elapsed = trio.current_time()
        status = a.admin.status()
        assert status.collaborating is False and status.collaboration_state == "refused"
        assert status.collaboration_reason is not None
        assert re.fullmatch(r"no exchange of global accepted in the last 30 s \(\d+ of its "
                            r"pushes refused by peers\); most refusals \(\d+\): values: "
                            r"magnitude 3\.1e\+30 exceeds the bound 1e\+06",
                            status.collaboration_reason), status.collaboration_reason
        assert b.collaboration().collaborating  # its own pushes get through
    said = [r for r in caplog.records if r.name == "p2p.runtime.collaboration_watch"
            and "not collaborating" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    refused = [r for r in caplog.records if r.name == "gossip.driver"
               and "refused" in r.getMessage()]
    # node a's lines about b: one per minute, then the count of the rest
    about_b = [r.getMessage() for r in refused if b.identity.node_id[:4].hex() in r.getMessage()]
    assert about_b and len(about_b) <= 2 * math.ceil(elapsed / 60), about_b
    assert all(r.levelno == logging.DEBUG for r in refused)
    assert any("more lines like this in the last 60 s" in line for line in about_b)


async def test_min_peers_counts_only_holders_and_the_wait_shows(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        autojump_clock: trio.testing.MockClock) -> None:
    caplog.set_level(logging.INFO, logger="p2p.runtime.collaboration_watch")
    spec = fast_spec(rounds=2, start_together=True, shuffle_period=1.0)  # min_peers 1
    other = dataclasses.replace(spec, layers="64=40=32=10")  # another network: no holder
    a, b = _pair(tmp_path, spec, other)
    assert b.config.training.min_peers == 1
    async with running([a, b]):
        await wait_until(lambda: b.collaboration_watch.waiting is not None)
        await wait_until(lambda: b.sampler.view() and a.sampler.view())
        # while it waits, the reason it would wait in vain is said, in status and the log
        await wait_until(lambda: any(r.levelno == logging.WARNING and "not collaborating: "
                                     "no peer holds model global" in r.getMessage()
                                     for r in caplog.records))
        status = b.admin.status()
        assert status.collaboration_state == "shape-mismatch"
        assert status.training == (
            "waiting for peers before the first round: 0 of 1 known hold global "
            f"(training.min_peers = 1; training starts anyway after "
            f"{b.config.training.peer_wait:g} s)")
        assert b.progress.round == 0
        with trio.fail_after(LIMIT):
            await wait_until(lambda: b.progress.finished, timeout=LIMIT)
        assert b.collaboration().state is CollaborationState.SHAPE_MISMATCH
    lines = [r.getMessage() for r in caplog.records]
    assert lines.count(status.training) == 2  # each node said it waits, once
    assert sum(m.startswith("only 0 of 1 peers known after") for m in lines) == 2


async def test_nodes_of_an_all_local_strategy_count_each_other(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    spec = fast_spec(rounds=1, start_together=True, strategy="graph", scheme="local")
    a, b = _pair(tmp_path, spec)
    assert not a.learning.fingerprints and a.config.data.public_size  # set by the spec
    tag = a.collaboration_watch.interest()
    assert tag == b.collaboration_watch.interest() and tag <= a.advertised_tags()
    async with running([a, b]):
        with trio.fail_after(LIMIT):
            await wait_until(lambda: a.progress.finished and b.progress.finished, timeout=LIMIT)
        assert trio.current_time() < a.config.training.peer_wait  # no wait to the end


async def test_a_swarm_at_the_default_level_logs_no_protocol_detail(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        autojump_clock: trio.testing.MockClock) -> None:
    caplog.set_level(logging.INFO)
    spec = fast_spec(nodes=4, rounds=0, round_interval=1.0, steps_per_round=1, eval_every=20,
                     shuffle_period=1.0)
    net, addresses = MemoryNetwork(), memory_addresses(4)
    nodes = [memory_node(net, tmp_path / f"n{i}", spec, i, addresses[i],
                         bootstrap=addresses[:1] if i else (), train_runner=InlineRunner())
             for i in range(4)]
    async with running(nodes):
        await trio.sleep(60)
        assert all(n.collaboration().collaborating for n in nodes)
    jargon = re.compile(r"flag_mode|clip_debt|base:|exchange \d+|push \d+ |\b\d{7,}\b")
    shown = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert shown and not [m for m in shown if jargon.search(m)]
