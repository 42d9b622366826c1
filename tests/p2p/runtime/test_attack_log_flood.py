"""Refusals a peer causes at will are logged at most twice per peer and interval.

A delta request naming a reference this node never held (any member, 50 a
second per session) and a grouping announcement alternating between two
fingerprints (one per GroupsPull) each wrote one INFO line, straight to the
logger: ~1,600 lines a second from one address until the disk fills. Both now
go through a LogLimiter keyed by the peer, like every other refusal.
"""

from __future__ import annotations

import logging

import numpy as np

from gossip import Push, encode
from gossip.pushsum import PushSum, RejectedPush
from p2p.config.schema import GossipConfig
from p2p.runtime.grouping.agreement import GroupingAgreement
from p2p.runtime.grouping.messages import GroupsPull, ProjectionRecord, record_payload
from p2p.wire.identity import Identity

PUSHES = 500


class _Lines(logging.Handler):
    """The lines of one logger from ``level`` up, kept from pytest's capture (it would
    print 500)."""

    def __init__(self, name: str, level: int = logging.INFO) -> None:
        super().__init__(level)
        self.log = logging.getLogger(name)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> list[logging.LogRecord]:
        self._saved = (self.log.level, self.log.propagate)
        self.log.setLevel(self.level)
        self.log.propagate = False
        self.log.addHandler(self)
        return self.records

    def __exit__(self, *exc: object) -> None:
        self.log.removeHandler(self)
        self.log.setLevel(self._saved[0])
        self.log.propagate = self._saved[1]


def test_delta_requests_naming_unknown_references_are_rate_limited_per_peer() -> None:
    g = GossipConfig()  # the daemon's defaults (merge guard on, push-pull, int8 deltas)
    model = b"m" * 32
    core = PushSum(model, np.zeros(64), fanout=g.fanout, exchange=g.exchange,
                   encoding=g.encoding, delta_encoding=g.delta_encoding,
                   max_in_flight=g.max_in_flight, guard=g.guard)
    liar = b"L" * 32
    refused = 0
    # a protocol detail (the sender falls back to absolute values): debug, rate-limited all
    # the same
    with _Lines("gossip.pushsum", logging.DEBUG) as lines:
        for i in range(1, PUSHES + 1):
            push = Push(model, i, encode(np.zeros(64), "int8"), 1e-3, want_reply=True, base=i)
            try:
                core.on_push(liar, push, now=i * 0.02)  # 50 a second, for 10 s
            except RejectedPush:
                refused += 1
    assert refused == PUSHES and core.weight == 1.0  # nothing merged
    # every other peer-caused refusal costs at most 2 lines per peer and interval
    assert len(lines) <= 2, (
        f"{PUSHES} refused delta pushes from ONE peer in 10 s wrote {len(lines)} lines, "
        f"e.g. {lines[0].getMessage()!r}")
    assert "refused a delta push" in lines[0].getMessage()
    assert core.counters.references_missing == PUSHES  # each still counted
    with _Lines("gossip.pushsum", logging.DEBUG) as lines:
        other = Push(model, 1, encode(np.zeros(64), "int8"), 1e-3, want_reply=True, base=1)
        try:
            core.on_push(b"M" * 32, other, now=11.0)  # another peer: a line of its own
        except RejectedPush:
            pass
    assert len(lines) == 1 and "refused a delta push from 4d4d4d4d" in lines[0].getMessage()


def _record(ident: Identity, epoch: int) -> ProjectionRecord:
    values = np.arange(4, dtype=np.float64) * 0.01
    return ProjectionRecord(ident.node_id, epoch, values,
                            ident.sign(record_payload(ident.node_id, epoch, values)))


class _Grouping:
    def __init__(self, groups: tuple[tuple[bytes, ...], ...]) -> None:
        self.groups, self.params = groups, None

    def fingerprint(self) -> str:
        return "f" * 64


def _find(projections: object, *, seed: int) -> _Grouping:
    return _Grouping((tuple(sorted(projections)),))  # type: ignore[call-overload]


def test_alternating_grouping_fingerprints_are_rate_limited_per_peer() -> None:
    me, other, liar = (Identity.from_seed(bytes([i]) * 32) for i in (1, 2, 3))
    agreement = GroupingAgreement(me.node_id, 3, 4, seed=0, find=_find,
                                  join=lambda *a: None, quiet_period=1.0)
    epoch = agreement.record_epoch
    agreement.set_own(_record(me, epoch), 0.0)
    agreement.on_pull(other.node_id, GroupsPull(epoch, (), (_record(other, epoch),), "", 2), 0.0)
    agreement.step(5.0)
    assert agreement.fingerprint  # this node has a candidate grouping
    with _Lines("p2p.runtime.grouping.agreement") as lines:
        for i in range(PUSHES):
            agreement.on_pull(liar.node_id, GroupsPull(epoch, (), (), "ab"[i % 2] * 12, 0),
                              6.0 + i * 0.02)
    assert len(lines) <= 2, (
        f"{PUSHES} pulls from ONE peer in 10 s wrote {len(lines)} INFO lines, "
        f"e.g. {lines[0].getMessage()!r}")
    assert lines and "re-syncing tables" in lines[0].getMessage()
    assert agreement.counters.disagreements == PUSHES  # each still counted
