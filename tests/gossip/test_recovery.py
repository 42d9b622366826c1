"""Rolling back a round's merges that made the held-out loss jump (gossip.recovery), and
what the partner choice makes of replies that give weight back for nothing."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from gossip import GuardSettings, ModelSync, PartnerChoice, Push, PushAck, PushSum, encode
from gossip.errors import InvalidValues
from gossip.recovery import MergeRecovery, RecoverySettings

FP = bytes(range(32))


def test_a_jump_for_the_worse_is_rolled_back_and_the_largest_movers_blamed() -> None:
    judge = MergeRecovery()
    moved = {b"liar": 5.0, b"other-liar": 3.0, b"honest": 0.2}
    assert not judge.judge(0.30, 0.40, moved).roll_back  # honest drift: within 1.5 x
    assert not judge.judge(0.05, 0.10, moved).roll_back  # 2 x, but only 0.05 above
    verdict = judge.judge(0.30, 2.30, moved)
    assert verdict.roll_back and verdict.blamed == (b"liar", b"other-liar")
    assert verdict.struck == ()  # a first blame: honest merges jump now and then
    assert "0.3 -> 2.3" in verdict.reason
    again = judge.judge(0.30, 2.30, {b"liar": 5.0, b"honest": 0.2})
    assert again.struck == (b"liar",)  # blamed in two rounds of the last 20
    assert judge.judge(0.30, math.nan, {}).roll_back  # a model that no longer evaluates
    assert not judge.judge(math.inf, 5.0, moved).roll_back  # nothing to compare with
    assert judge.rollbacks == 3
    later = MergeRecovery(RecoverySettings(blame_rounds=3))
    for _ in range(5):  # blamed once in every 4 rounds: forgiven each time
        assert later.judge(0.3, 2.3, {b"p": 1.0}).struck == ()
        for _ in range(3):
            later.judge(0.3, 0.3, {})
    with pytest.raises(InvalidValues):
        RecoverySettings(worse_ratio=0.5)


class _Net:
    """A network of one model: its values, as the trainer would hold them."""

    def __init__(self, values: np.ndarray) -> None:
        self.v = values.copy()

    def extract(self, name: str) -> np.ndarray:
        return self.v.copy()

    def assign(self, name: str, vector: np.ndarray) -> None:
        self.v = np.asarray(vector, dtype=np.float64).copy()


def test_a_roll_back_keeps_own_training_and_drops_the_rounds_merges() -> None:
    x0 = np.ones(50)
    core = PushSum(FP, x0, guard=GuardSettings())  # (a newcomer: no budget yet)
    net = _Net(x0)
    sync = ModelSync(net, {"m": core})
    trained = np.full(50, 0.01)
    net.v = x0 + trained  # a round of training ...
    poison = np.full(50, 1.3)  # ... while a merge came in
    core.on_push(b"liar", Push(FP, 7, encode(poison, "f64"), 1.0), 0.0)
    moved = core.take_moved()
    assert set(moved) == {b"liar"} and moved[b"liar"] > 0
    sync.sync()
    assert not np.allclose(net.v, x0 + trained)
    sync.roll_back()
    np.testing.assert_allclose(net.v, x0 + trained)  # own training kept, the merge gone
    np.testing.assert_allclose(core.values, x0 + trained)
    assert core.take_moved() == {}  # nothing since


def test_replies_that_give_nothing_prove_nothing() -> None:
    choice = PartnerChoice(random.Random(0))
    request = Push(FP, 1, encode(np.zeros(4), "f32"), 0.5, want_reply=True)
    reply = PushAck(FP, 1, reply=encode(np.zeros(4), "f32"), reply_weight=0.5)
    assert choice.on_answer(b"fake", request, reply, 0.0, reply="echo") == "echo"
    assert not choice.is_proven(b"fake") and choice.trust < 1.0  # a failed exploration
    assert choice.on_answer(b"honest", request, reply, 0.0, reply="useful") == "reciprocated"
    assert choice.is_proven(b"honest")
    # a proven peer whose reply the guard clipped to less than half loses its proof
    assert choice.on_answer(b"honest", request, reply, 1.0, reply="clipped") == "clipped"
    assert not choice.is_proven(b"honest") and not choice.is_paused(b"honest", 1.0)
    # a proven peer that once echoes (two exchanges in one round) keeps it
    choice.on_answer(b"honest", request, reply, 2.0)
    choice.on_answer(b"honest", request, reply, 3.0, reply="echo")
    assert choice.is_proven(b"honest")
