"""An honest masked exchange never trips the receivers' magnitude bound.

Two halves. The push-sum core alone: whatever the interleaving, a payload is
at most the initial scale plus one mask tail per mask acknowledged so far
(merges are convex combinations, a compensation is at most one mask), far
below ``MAX_ABS_VALUE`` for the configured ``mask_std``. And the daemon: a
node must not fold noise its own estimate has not mixed into the values it
trains. When it did (its peers were busy training, so only it pushed),
SGD on mask-sized weights diverged to about 1e6 and its next pushes were
refused; that made ``test_node.py``'s masked test flaky on a loaded machine.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gossip import Push, PushAck, PushSum, decode
from gossip.masking import MaskSource
from gossip.validation import MAX_ABS_VALUE
from p2p.swarm import SwarmSpec
from p2p.testing import MemoryNetwork, memory_swarm, running, wait_until

FP = bytes(range(32))
DIM = 6

#: Largest |N(0, 1)| that MaskSource can draw: Box-Muller's radius
#: sqrt(-2 ln u1) with u1 >= 2**-53 (53-bit uniforms in (0, 1]).
MASK_TAIL = math.sqrt(-2.0 * math.log(2.0 ** -53))


def test_masks_never_exceed_their_tail() -> None:
    masks = MaskSource(bytes(32)).normal(200_000, 10.0)
    assert np.abs(masks).max() <= MASK_TAIL * 10.0
    assert MASK_TAIL < 8.6


ops = st.lists(
    st.tuples(st.sampled_from(["push", "deliver", "ack", "fail"]),
              st.integers(0, 3), st.integers(0, 3), st.integers(0, 10)),
    min_size=1, max_size=80,
)


@settings(max_examples=80, deadline=None)
@given(ops=ops, seed=st.integers(0, 2**16), fanout=st.integers(1, 2),
       masked_pushes=st.integers(1, 4), mask_std=st.sampled_from([1.0, 10.0, 100.0]))
def test_honest_masked_payloads_stay_within_the_mask_tail(
        ops: list[tuple[str, int, int, int]], seed: int, fanout: int, masked_pushes: int,
        mask_std: float) -> None:
    rng = np.random.default_rng(seed)
    init = rng.uniform(-1.0, 1.0, size=(4, DIM))
    nodes = [PushSum(FP, init[i], fanout=fanout, privacy="masked", masked_pushes=masked_pushes,
                     mask_std=mask_std, unmask_after=3, rng=rng) for i in range(4)]
    in_flight: list[tuple[int, int, object]] = []
    acks: list[tuple[int, int, object]] = []
    masks_acked = 0
    for op, i, j, k in ops:
        if op == "push":
            peers = [bytes([p]) for p in ((j + d) % 4 for d in range(4)) if p != i]
            for peer, push in nodes[i].make_pushes(peers, 0.0):
                bound = 1.0 + (masks_acked + 1) * MASK_TAIL * mask_std
                assert np.abs(decode(push.values, DIM)).max() <= bound
                in_flight.append((i, peer[0], push))
        elif op == "deliver" and in_flight:
            src, dst, push = in_flight.pop(k % len(in_flight))
            nodes[dst].on_push(bytes([src]), push, 0.0)  # raises if refused
            acks.append((src, dst, push))
        elif op == "ack" and acks:
            src, dst, push = acks.pop(k % len(acks))
            nodes[src].on_ack(bytes([dst]), PushAck(FP, push.push_id), 0.0)  # type: ignore[attr-defined]
            masks_acked += push.masked  # type: ignore[attr-defined]
        elif op == "fail" and in_flight:
            src, _, push = in_flight.pop(k % len(in_flight))
            nodes[src].on_failure(push.push_id)  # type: ignore[attr-defined]
    assert all(n.counters.rejected == 0 for n in nodes)
    # even every mask of the network acknowledged stays below the receivers' bound
    assert 1.0 + (4 * masked_pushes + 1) * MASK_TAIL * mask_std < MAX_ABS_VALUE


async def test_busy_peers_do_not_let_a_node_fold_unmixed_noise(tmp_path: Path) -> None:
    # Nodes 1 and 2 train slowly (a loaded machine): for a while only node 0
    # gossips. Its noise must not age with pushes nobody answers.
    # (a shuffle must answer within the period: 0.5 s leaves a loaded machine room)
    spec = SwarmSpec(nodes=3, rounds=12, scheme="full", round_interval=0.0,
                     shuffle_period=0.5, privacy="masked")
    nodes = memory_swarm(tmp_path, MemoryNetwork(), spec)
    for node in nodes[1:]:
        trainer = node.learning.trainer
        fast = trainer.train_steps

        def slow(steps: int, _fast: Callable[[int], float] = fast) -> float:
            time.sleep(0.3)  # in the worker thread: the node is busy, not the event loop
            return _fast(steps)

        trainer.train_steps = slow  # type: ignore[method-assign]
    async with running(nodes):
        await wait_until(lambda: all(n.progress.finished for n in nodes), 120)
        await wait_until(lambda: not any(n.cores["global"].noisy for n in nodes), 120)
        values = [n.cores["global"].values for n in nodes]
    for node in nodes:
        c = node.model_counters("global")
        # no push refused for its values (the magnitude bound); the merge guard, on by
        # default, may clip-refuse a clean push after a fold: its own count
        assert c["unmasks"] >= 1 and c["rejected"] == c["guard_refused"], \
            (node.config.node.name, c)
    # the trained values never took in mask-sized noise: still parameter-scale
    assert max(float(np.abs(v).max()) for v in values) < 10.0


def test_after_a_fold_a_clear_push_carrying_an_epoch_of_training_is_merged() -> None:
    # Issue 12, merge guard: a masked node's first clear pushes after its fold carry a
    # whole epoch of its training, while the clip radius followed the small updates of
    # the clear rounds before; one-way, the push could only be refused whole.  After
    # its own fold the receiver's radius is at least clip_factor times the training it
    # folded itself; a poisoner's update stays far beyond it.
    from gossip.masking.epochs import EpochSettings, magnitude_bound
    from gossip.merge_guard import GuardSettings, RefusedByGuard

    rng = np.random.default_rng(5)
    dim = 200
    start = rng.normal(0.0, 0.3, dim)
    opts: dict = dict(privacy="masked", masked_pushes=0, exchange="push",
                      guard=GuardSettings(), max_abs_value=magnitude_bound(EpochSettings()))
    receiver = PushSum(FP, start, **opts)
    # holders the receiver pushed to (its partners): only their updates set the radius
    for sender in [bytes([k + 1]) * 8 for k in range(4)] + [b"s" * 8, b"p" * 8]:
        receiver._guard.clip.note_partner(sender)  # type: ignore[union-attr]
    for k in range(4):  # clear rounds: updates of a round's drift set the radius
        peer = PushSum(FP, start + rng.normal(0.0, 1e-3, dim), privacy="masked",
                       masked_pushes=0, exchange="push")
        [(_, p)] = peer.make_pushes([b"r" * 8], float(k))
        receiver.on_push(bytes([k + 1]) * 8, p, float(k))
    epoch = rng.normal(0.0, 0.02, dim)  # an epoch of training, alike at every holder
    before = receiver.values

    def post_fold_push(sender_epoch: np.ndarray, t: float) -> Push:
        sender = PushSum(FP, before, **opts)
        sender.add_noise_mass(np.full(dim, 1e-9))  # an epoch: noise (negligible here)
        sender.set_values(sender.values + sender_epoch)
        assert sender.fold_noise()
        [(_, p)] = sender.make_pushes([b"r" * 8], t)
        assert not p.noisy
        return p

    with pytest.raises(RefusedByGuard, match="clip"):  # before the receiver's own fold
        receiver.on_push(b"s" * 8, post_fold_push(epoch + rng.normal(0.0, 0.01, dim), 5.0), 5.0)
    receiver.add_noise_mass(np.full(dim, 1e-9))
    receiver.set_values(receiver.values + epoch + rng.normal(0.0, 0.01, dim))
    assert receiver.fold_noise()
    w = receiver.weight
    receiver.on_push(b"s" * 8, post_fold_push(epoch + rng.normal(0.0, 0.01, dim), 6.0), 6.0)
    assert receiver.weight > w  # merged
    poison = PushSum(FP, receiver.values + rng.normal(0.0, 2.0, dim), **opts)
    [(_, bad)] = poison.make_pushes([b"r" * 8], 7.0)
    with pytest.raises(RefusedByGuard, match="clip"):
        receiver.on_push(b"p" * 8, bad, 7.0)


def test_the_fold_floor_ends_after_fold_floor_merges_clip_checks() -> None:
    # The floor above lets through any update within clip_factor x the folded training,
    # a poisoner's too: it lasts fold_floor_merges clip checks (the honest pushes that
    # need it come right after the swarm's folds), then the radius follows the recent
    # senders' updates again and the same push is refused.
    from gossip.masking.epochs import EpochSettings, magnitude_bound
    from gossip.merge_guard import GuardSettings, RefusedByGuard

    rng = np.random.default_rng(6)
    dim = 200
    start = rng.normal(0.0, 0.3, dim)
    guard = GuardSettings(fold_floor_merges=3)
    opts: dict = dict(privacy="masked", masked_pushes=0, exchange="push", guard=guard,
                      max_abs_value=magnitude_bound(EpochSettings()))
    receiver = PushSum(FP, start, **opts)

    def push_from(values: np.ndarray, t: float) -> Push:
        sender = PushSum(FP, values, privacy="masked", masked_pushes=0, exchange="push")
        [(_, p)] = sender.make_pushes([b"r" * 8], t)
        return p

    for k in range(4):  # holders the receiver pushed to (its partners): their updates count
        receiver._guard.clip.note_partner(bytes([k + 1]) * 8)  # type: ignore[union-attr]
    for k in range(4):  # clear rounds: updates of a round's drift set the radius
        receiver.on_push(bytes([k + 1]) * 8, push_from(start + rng.normal(0.0, 1e-3, dim),
                                                       float(k)), float(k))
    receiver.add_noise_mass(np.full(dim, 1e-9))
    epoch = rng.normal(0.0, 0.02, dim)
    for _ in range(20):  # the epoch's training, a round at a time (held apart meanwhile)
        receiver.set_values(receiver.values + epoch / 20)
    assert receiver.fold_noise()
    # a push moving the model by twice the folded training: within the floor (4x) ...
    for k in range(3):
        w = receiver.weight
        receiver.on_push(bytes([1]) * 8, push_from(receiver.values + 2.0 * epoch, 10.0 + k),
                         10.0 + k)
        assert receiver.weight > w
    # ... and refused once the floor's clip checks are spent
    with pytest.raises(RefusedByGuard, match="clip"):
        receiver.on_push(bytes([1]) * 8, push_from(receiver.values + 2.0 * epoch, 20.0), 20.0)
