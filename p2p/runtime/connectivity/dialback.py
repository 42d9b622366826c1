"""Dial-backs: a peer asks this node to dial it back, to learn whether it is reachable.

The request names a port only: the address dialled is the requester's own
observed IP (where its connection comes from) with that port, never another
host, so no peer can use dial-backs to make this node scan or flood someone
else (libp2p's AutoNAT takes the same rule). :class:`DialBackGate` (sans-IO)
bounds them: one per requesting IP per ``interval``, at most ``per_minute``
in all, at most ``concurrent`` at once. Refusals are answered, never queued.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

from common.address import AddressError, HostPort, parse_host_port

__all__ = ["DIALBACK_MESSAGES", "DialBackGate", "DialBackReply", "DialBackRequest"]

#: Requesting IPs remembered by the gate (the oldest are forgotten first).
MAX_SOURCES = 1024


@dataclass(frozen=True)
class DialBackRequest:
    """Dial me back on ``port`` at the IP my connection comes from."""

    port: int

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise ValueError(f"port must be in 1..65535, got {self.port}")


@dataclass(frozen=True)
class DialBackReply:
    """What the dial-back did: ``address`` dialled; ``ok``; ``reason`` when it failed
    or was refused (``refused``: not tried at all, e.g. rate-limited)."""

    address: str
    ok: bool
    reason: str
    refused: bool = False


DIALBACK_MESSAGES = ((DialBackRequest, "dial_back_request"), (DialBackReply, "dial_back_reply"))


class DialBackGate:
    """Which dial-back requests this node serves (see the module docstring)."""

    def __init__(self, *, interval: float = 30.0, per_minute: int = 20,
                 concurrent: int = 2) -> None:
        self.interval = interval
        self.per_minute = per_minute
        self.concurrent = concurrent
        self._last: OrderedDict[str, float] = OrderedDict()  # source IP -> last dial-back
        self._recent: deque[float] = deque()  # when the last minute's dial-backs started
        self.running = 0
        self.served = 0
        self.refused = 0

    def admit(self, remote: str, port: int, now: float) -> tuple[str | None, str]:
        """(address to dial, "") or (None, why not) for a request from ``remote``."""
        try:
            source = parse_host_port(remote)
        except AddressError:
            return self._refuse("cannot tell where your connection comes from")
        last = self._last.get(source.host)
        if last is not None and now - last < self.interval:
            return self._refuse(f"one dial-back per {self.interval:g} s per address; "
                                "try again later")
        while self._recent and now - self._recent[0] >= 60.0:
            self._recent.popleft()
        if len(self._recent) >= self.per_minute or self.running >= self.concurrent:
            return self._refuse("busy: too many dial-backs at the moment; try again later")
        self._last.pop(source.host, None)
        self._last[source.host] = now
        while len(self._last) > MAX_SOURCES:
            self._last.popitem(last=False)
        self._recent.append(now)
        self.running += 1
        self.served += 1
        return str(HostPort(source.host, port)), ""

    def done(self) -> None:
        """A dial-back :meth:`admit` let through has finished."""
        self.running -= 1

    def _refuse(self, why: str) -> tuple[None, str]:
        self.refused += 1
        return None, why
