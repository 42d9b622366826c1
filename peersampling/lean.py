"""A faster :meth:`Simulator.run_period` for plain Cyclon exchanges, draw for draw the same.

At 10,000 simulated nodes almost every shuffle is plain Cyclon between nodes
that hold no model, about descriptors never tagged nor reissued: the core's
checks can only accept and its copies only carry ages. :class:`LeanPeriods`
runs those exchanges on the cores' own state (views, counters, failed-peer
memory, random generator) without messages, copies or checks, making the same
random draws in the same order, so the views match :meth:`Simulator.run_period`
(``tests/test_peersampling_lean.py``, the pinned digests). Everything else
(Sybil adversaries, model holders, special nodes, distrust, bootstrap, logged
offences) goes through the cores' public methods. It reads and writes
:class:`PeerSampler` and :class:`PartialView` internals on purpose: it is
``core.py``'s shuffle and ``view.py``'s merge specialised to the plain case.

See docs/guide/simulation.md ("Gossip-only mode").
"""

from __future__ import annotations

from typing import cast

from .core import PeerSampler
from .descriptor import Descriptor, with_age
from .draws import sample
from .messages import ShuffleRequest, new_reply, new_request
from .simulator import Simulator
from .view import PartialView, next_victim

#: Entries of a lean message: (the sender's stored descriptor, its age now).
_Entries = list[tuple[Descriptor, int]]


class LeanPeriods:
    """Runs ``sim``'s periods like :meth:`Simulator.run_period`, plain exchanges faster.

    Create it once the population is built (it records every node's current
    descriptor); call :meth:`run_period` instead of ``sim.run_period()``.
    ``lean_turns`` / ``core_turns`` count node turns (a node's shuffles of one
    period) started lean / by the core; ``handed_over`` the lean turns that
    met a special node and finished through the core.
    """

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.lean_turns = 0
        self.core_turns = 0
        self.handed_over = 0
        self._base: dict[bytes, Descriptor] = {}
        self._special: set[bytes] = set()
        variants: dict[bytes, tuple[object, ...]] = {}
        for s in sim.nodes.values():
            me = s.self_descriptor
            self._base[me.node_id] = me
            # a stale copy of a reissued descriptor may already sit in views read
            # before this node: the cores would then replace it (_update_known)
            seen = variants.setdefault(me.node_id, (me.address, me.epoch, me.tags))
            if me.tags or not _plain(s) or seen != (me.address, me.epoch, me.tags):
                self._special.add(me.node_id)
            for v in (s._view, *s._models.values()):
                for d in v._desc.values():
                    n = d.node_id
                    seen = variants.setdefault(n, (d.address, d.epoch, d.tags))
                    if d.tags or seen != (d.address, d.epoch, d.tags):
                        self._special.add(n)

    # ---------------------------------------------------------------- periods

    def run_period(self) -> None:
        """One period: every live node runs its shuffles, in the simulator's random order."""
        sim = self.sim
        if sim.attack is not None:
            sim.run_period()  # the adversary's injections: the simulator's own loop
            return
        sim.period += 1
        now = float(sim.period)
        self._refresh_special()
        order = list(sim.nodes)
        sim.rng.shuffle(order)
        nodes, special = sim.nodes, self._special
        for address in order:
            s = nodes.get(address)
            if s is None:
                continue
            if (s._me.node_id in special or not s._view._born or s._in_flight
                    or s.island_due(s._period + 1)):  # also asks a bootstrap
                self.core_turns += 1
                self.sim.exchange(s, s.start_shuffles(now), now)
            else:
                self.lean_turns += 1
                self._lean_turn(s, now)

    def _refresh_special(self) -> None:
        """Mark nodes that are not plain, took a model or reissued their descriptor.

        Once special, always special (conservative: the cores handle it).
        """
        base, special = self._base, self._special
        for s in self.sim.nodes.values():
            me = s._me
            n = me.node_id
            if n in special:
                continue
            known = base.get(n)
            if known is None:
                base[n] = me
                if me.tags or not _plain(s):
                    special.add(n)
            elif known is not me or not _plain(s):
                special.add(n)

    # ------------------------------------------------------------- lean turn

    def _lean_turn(self, s: PeerSampler, now: float) -> None:
        """``start_shuffles`` and the main-view exchange of a plain node, on its state."""
        sim, special = self.sim, self._special
        nodes, loss, rnd = sim.nodes, sim.loss, sim.rng.random
        s._period += 1
        view = cast(PartialView, s._view)  # plain nodes only (see _plain)
        view._now += 1
        if s._round_shuffles:
            s._round_shuffles = {}
        if s._retries_left:
            s._retries_left = {}
        shot = _pop_oldest(s, view)
        stats = s._stats
        stats.shuffles_sent += 1
        if s._period % 32 == 0:
            s._prune_contacts()
        left = s.retries
        while shot is not None:
            target, target_age, sent = shot
            address = target.address
            peer = nodes.get(address)
            if special and (target.node_id in special
                            or any(d.node_id in special for d, _ in sent)
                            or (peer is not None and peer._me.node_id in special)):
                req = self._hand_over(s, target, target_age, sent, left)
                self.sim.exchange(s, [(address, req)], now)
                return
            sim.messages += 1
            if peer is None or (loss and rnd() < loss):
                sim.failures += 1
                shot, left = self._failed(s, address, left)
                continue
            reply = _answer(peer, s._me, sent, now)
            if loss and rnd() < loss:
                sim.failures += 1
                shot, left = self._failed(s, address, left)
                continue
            if special and any(d.node_id in special for d, _ in reply):
                req = self._hand_over(s, target, target_age, sent, left)
                s.on_reply(address, req, new_reply(
                    tuple([with_age(d, age) for d, age in reply]), None), now)
                return
            _take_reply(s, target, sent, reply, now)
            return

    def _hand_over(self, s: PeerSampler, target: Descriptor, target_age: int, sent: _Entries,
                   left: int) -> ShuffleRequest:
        """Give the core the state its ``start_shuffles`` would have left; return the request."""
        self.handed_over += 1
        entries = tuple([with_age(d, age) for d, age in sent])
        in_flight = with_age(target, target_age)
        s._in_flight[None] = in_flight
        req = new_request(s._me, entries, None)
        s._round_shuffles = {None: req}
        s._retries_left = {} if left == s.retries else {None: left}
        return req

    @staticmethod
    def _failed(s: PeerSampler, address: str, left: int
                ) -> tuple[tuple[Descriptor, int, _Entries] | None, int]:
        """``on_failure`` for the round's shuffle: drop the peer, maybe retry with the next oldest."""
        stats = s._stats
        stats.shuffles_failed += 1
        view = cast(PartialView, s._view)  # plain nodes only (see _plain)
        view.remove_address(address)
        s._directory.forget_address(address)
        s._last_contact.pop(address, None)
        s._failed[address] = s._period
        if left <= 0:
            return None, left
        shot = _pop_oldest(s, view)
        if shot is not None:
            stats.shuffles_sent += 1
        return shot, left - 1


def _plain(s: PeerSampler) -> bool:
    """Whether ``s`` runs plain Cyclon only (no model view, Sybil rules or special logging)."""
    return (not s._models and s._rules is None and not s._distrusted
            and not s._flush_offences and type(s._view) is PartialView)


def _pop_oldest(s: PeerSampler, view: PartialView) -> tuple[Descriptor, int, _Entries] | None:
    """``_shuffle_oldest`` on a plain view: the target (stored descriptor, age) and entries."""
    born = view._born
    if not born:
        return None
    keys = list(born)
    births = list(born.values())
    first = min(births)
    rng = s.rng
    if births.count(first) == 1:
        at = births.index(first)
        q = keys[at]
    else:
        q = rng.choice([k for k, b in born.items() if b == first])
        at = keys.index(q)
    del keys[at]  # = list(born) once q is gone (insertion order kept)
    now = view._now
    desc = view._desc
    target = desc.pop(q)
    target_age = now - born.pop(q)
    k = s.l - 1
    if len(keys) > k:
        keys = sample(rng, keys, k)
    return target, target_age, [(desc[n], now - born[n]) for n in keys]


def sample_address(s: PeerSampler) -> str | None:
    """``s.sample().address`` (a random main-view peer), the same draw without a copy."""
    born = s._view._born
    if not born:
        d = s.sample()
        return None if d is None else d.address
    return s._view._desc[s.rng.choice(list(born))].address


def _drop_stale(s: PeerSampler, entries: _Entries) -> _Entries:
    """The failed-peer check of ``_check_entries``: copies older than a failure are ignored."""
    failed = s._failed
    if not failed:
        return entries
    period = s._period
    kept: _Entries = []
    for d, age in entries:
        at = failed.get(d.address)
        if at is not None:
            if age >= period - at:
                continue  # issued before it failed on us
            del failed[d.address]  # issued since: it is back
        kept.append((d, age))
    return kept


def _answer(peer: PeerSampler, sender: Descriptor, sent: _Entries, now: float) -> _Entries:
    """``on_request`` of a plain responder: merge the offer, return its reply entries."""
    peer._stats.shuffles_received += 1
    entries = _drop_stale(peer, sent)
    peer._last_contact[sender.address] = now
    if peer._failed:
        peer._failed.pop(sender.address, None)
    view = cast(PartialView, peer._view)  # plain nodes only (see _plain)
    born, desc, vnow = view._born, view._desc, view._now
    x = sender.node_id
    keys = list(born)
    if x in born:
        keys.remove(x)
    length = peer.l
    if len(keys) > length:
        keys = sample(peer.rng, keys, length)
    reply = [(desc[n], vnow - born[n]) for n in keys]
    if not entries or len(reply) < length:
        me = peer._me
        reply = [(me, me.age), *reply[: length - 1]]
    _merge(view, [(sender, sender.age), *entries], [d.node_id for d, _ in reply], x)
    return reply


def _take_reply(s: PeerSampler, target: Descriptor, sent: _Entries, reply: _Entries,
                now: float) -> None:
    """``on_reply`` of a plain initiator to its main-view shuffle."""
    s._stats.replies_received += 1
    received = _drop_stale(s, reply)
    address = target.address
    s._last_contact[address] = now
    responder = None
    for d, _ in received:
        if d.address == address:
            responder = d.node_id
            break
    view = cast(PartialView, s._view)  # plain nodes only (see _plain)
    _merge(view, received, [d.node_id for d, _ in sent], responder)
    # it just answered: keep it if there is room (a known entry learns nothing new)
    n = target.node_id
    born = view._born
    if n not in born and len(born) < view.capacity:
        view._desc[n] = target
        born[n] = view._now


def _merge(view: PartialView, received: _Entries, sent: list[bytes], fresh_id: bytes | None
           ) -> None:
    """:meth:`PartialView.merge` for descriptors of plain nodes (same epoch, tags, address).

    A known entry then only changes when it is ``fresh_id`` (its age resets);
    the descriptor stored for a new entry is the sender's (its age field is
    never read: the view keeps ages as births).
    """
    desc, born, cap, now = view._desc, view._born, view.capacity, view._now
    fresh: _Entries = []
    for d, age in received:
        n = d.node_id
        if n in born:
            if n == fresh_id:
                desc[n] = d
                born[n] = now - age
        else:
            fresh.append((d, age))
    replaceable = [n for n in sent if n in born]
    replaceable.reverse()
    for d, age in fresh:
        n = d.node_id
        if n in born:
            continue
        if len(born) >= cap:
            victim = next_victim(replaceable, born)
            if victim is None:
                continue
            del desc[victim]
            del born[victim]
        desc[n] = d
        born[n] = now - age
