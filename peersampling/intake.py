"""What peer sampling takes in: received shuffles and descriptors, checked.

Every request, reply and restored descriptor passes through :class:`Intake`
before a view sees it: the message's shape (a bounded tuple of entries, a
valid view field), each descriptor's fields and signature, and this node's
standing with the peer it names (:class:`Standing`: addresses that failed
on us, whose older copies are stale, and ids distrusted for a while).  A
problem costs the offender one line (rate-limited through the node's
:class:`~peersampling.offence_log.OffenceLog`); what is acceptable goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from .descriptor import MAX_TAGS, TAG_LENGTH, Descriptor, validate_descriptor
from .errors import InvalidDescriptor, InvalidMessage
from .messages import ShuffleReply, ShuffleRequest
from .offence_log import OffenceLog
from .stats import SamplerStats

#: Distrusted peers remembered at once (the oldest go first past the bound).
MAX_DISTRUSTED = 4096


class Standing:
    """Peers this node holds something against: addresses that failed, ids distrusted.

    Both maps are changed in place (the lean engine, :mod:`peersampling.lean`,
    shares them).
    """

    def __init__(self) -> None:
        # address -> period it failed: second-hand copies older than the failure
        # are ignored, so a dead peer's descriptor cannot bounce back in.
        self.failed: dict[str, int] = {}
        # node id -> period until which it is refused (see PeerSampler.distrust)
        self.distrusted: dict[bytes, int] = {}

    def refused(self, node_id: bytes, period: int) -> bool:
        """Whether ``node_id`` is distrusted at ``period`` (an expired entry is dropped)."""
        until = self.distrusted.get(node_id)
        if until is None:
            return False
        if until > period:
            return True
        del self.distrusted[node_id]
        return False

    def distrust(self, node_id: bytes, until: int) -> None:
        """Refuse ``node_id`` until period ``until`` (or longer if already refused)."""
        before = self.distrusted.pop(node_id, until)
        self.distrusted[node_id] = max(until, before)  # newest last
        while len(self.distrusted) > MAX_DISTRUSTED:
            self.distrusted.pop(next(iter(self.distrusted)))

    def prune(self, period: int, horizon: int) -> None:
        """Forget failures from before ``horizon`` and distrust that ended by ``period``."""
        for address in [a for a, p in self.failed.items() if p <= horizon]:
            del self.failed[address]
        for node_id in [n for n, u in self.distrusted.items() if u <= period]:
            del self.distrusted[node_id]


class Intake:
    """Checks what one sampler receives (see the module docstring).

    ``me`` is this node's current descriptor (kept up to date by the
    sampler); ``check_signature`` verifies a descriptor (None: unsigned);
    ``in_process``: descriptors received from another core of this process
    are not validated field by field again (see :class:`PeerSampler`).
    """

    def __init__(self, me: Descriptor, *, max_age: int, max_entries: int,
                 check_signature: Callable[[Descriptor], bool] | None, in_process: bool,
                 standing: Standing, stats: SamplerStats, offences: OffenceLog) -> None:
        self.me = me
        self.max_age = max_age
        self.max_entries = max_entries
        self.check_signature = check_signature
        self.in_process = in_process
        self.standing = standing
        self._stats = stats
        self._offences = offences

    def accept(self, raw: object, *, received: bool = False) -> Descriptor | None:
        """Validate one descriptor; ``None`` if it names this node.

        ``received``: it came in a message (an ``in_process`` core trusts those).
        """
        if received and self.in_process and type(raw) is Descriptor:
            d = raw  # built or validated by the sending core (see in_process)
        else:
            d = validate_descriptor(raw, max_age=self.max_age, max_tags=MAX_TAGS)
        if d.node_id == self.me.node_id or d.address == self.me.address:
            return None
        check = self.check_signature
        if check is not None and not check(d):
            raise self.signature_error(d)
        return d

    def signature_error(self, d: Descriptor) -> InvalidDescriptor:
        """Count a descriptor whose signature failed and say what was wrong."""
        self._stats.signatures_rejected += 1
        return InvalidDescriptor(
            "signature", "missing" if not d.signature else "does not verify for this node id"
        )

    def entries_shape(self, raw: object, what: str) -> Sequence[object]:
        """``raw`` if it is a tuple of at most ``max_entries`` items, else InvalidMessage."""
        if type(raw) is not tuple and (
            isinstance(raw, str | bytes) or not isinstance(raw, tuple | list)
        ):
            raise InvalidMessage(f"{what}.entries", f"expected a tuple, got {type(raw).__name__}")
        if len(raw) > self.max_entries:
            raise InvalidMessage(
                f"{what}.entries", f"{len(raw)} entries exceed the limit of {self.max_entries}"
            )
        return raw

    def entries(self, raw: object, what: str, now: float, period: int,
                source: str | ShuffleRequest) -> list[Descriptor]:
        """The acceptable descriptors of ``raw``; problems are logged against ``source``
        (an address, or a request: its sender, worked out only if there is a problem)."""
        raw = self.entries_shape(raw, what)
        out: list[Descriptor] = []
        seen: set[bytes] = set()
        problems: list[str] = []
        # accept, written out: this loop runs for every descriptor received
        me_id, me_address = self.me.node_id, self.me.address
        max_age, check = self.max_age, self.check_signature
        standing = self.standing
        failed, trusted = standing.failed, self.in_process
        for item in raw:
            if trusted and type(item) is Descriptor:
                d = item  # built or validated by the sending core (see in_process)
            else:
                try:
                    d = validate_descriptor(item, max_age=max_age, max_tags=MAX_TAGS)
                except InvalidDescriptor as exc:
                    problems.append(str(exc))
                    continue
            n = d.node_id
            if n == me_id or d.address == me_address:
                problems.append("descriptor points at this node")
                continue
            if check is not None and not check(d):
                problems.append(str(self.signature_error(d)))
                continue
            if n in seen:
                problems.append("duplicate node id")
                continue
            seen.add(n)
            if standing.distrusted and standing.refused(n, period):
                continue  # distrusted for now: not malformed, just refused
            failed_at = failed.get(d.address) if failed else None
            if failed_at is not None:
                if d.age >= period - failed_at:
                    continue  # issued before it failed on us: stale, not malformed
                del failed[d.address]  # issued since: it is back
            out.append(d)
        if problems:
            self._stats.descriptors_rejected += len(problems)
            if not isinstance(source, str):
                source = sender_key(source)
            self._offences.log(
                now, source, logging.WARNING,
                "dropped %d of %d descriptors in %s from %s: %s",
                len(problems),
                len(raw),
                what,
                source,
                "; ".join(sorted(set(problems))),
            )
        return out

    @staticmethod
    def view_field(raw: object, what: str) -> bytes | None:
        """A message's view field: None (the main view) or a fingerprint."""
        if raw is None:
            return None
        if type(raw) is not bytes or len(raw) != TAG_LENGTH:
            raise InvalidMessage(
                f"{what}.view", f"expected None or a {TAG_LENGTH}-byte fingerprint"
            )
        return raw

    def request(self, req: object, now: float, period: int
                ) -> tuple[Descriptor, list[Descriptor], bytes | None]:
        """A request's sender, acceptable entries and view, or InvalidMessage."""
        if not isinstance(req, ShuffleRequest):
            raise InvalidMessage("request", f"expected ShuffleRequest, got {type(req).__name__}")
        model = self.view_field(req.view, "request")
        # cheap checks of the whole message before any signature is verified
        self.entries_shape(req.entries, "request")
        try:
            sender = self.accept(req.sender, received=True)
        except InvalidDescriptor as exc:
            self._stats.descriptors_rejected += 1
            raise InvalidMessage("request.sender", str(exc)) from None
        if sender is None:
            self._stats.descriptors_rejected += 1
            raise InvalidMessage("request.sender", "sender claims to be this node")
        entries = [
            d for d in self.entries(req.entries, "request", now, period, req)
            if d.node_id != sender.node_id
        ]
        return sender, entries, model

    def reply(self, req: ShuffleRequest, reply: object, now: float, period: int,
              address: str) -> list[Descriptor]:
        """A reply's acceptable entries, or InvalidMessage."""
        if not isinstance(reply, ShuffleReply):
            raise InvalidMessage("reply", f"expected ShuffleReply, got {type(reply).__name__}")
        if reply.view != req.view:
            raise InvalidMessage("reply.view", "does not match the view of the request")
        return self.entries(reply.entries, "reply", now, period, address)


def sender_key(req: object) -> str:
    """Whom a request's log lines are counted against: the sender's whole node id
    (the node checks it is the authenticated peer before the core sees it)."""
    node_id = getattr(getattr(req, "sender", None), "node_id", None)
    if isinstance(node_id, bytes) and node_id:
        return node_id.hex()
    return "unnamed sender"
