"""A simulated network for many real nodes in one trio run on a virtual clock.

:class:`SimNetwork` is a :class:`~p2p.testing.memnet.MemoryNetwork` whose
links have a latency and a bandwidth, drawn once per ordered pair of
addresses from seeded distributions (:class:`Distribution`), and lose
messages with a given probability. A write of ``n`` bytes on a link waits
``latency + n / bandwidth`` seconds (virtual seconds under a mock clock) before
it is delivered; a lost write darkens the connection, as
:class:`~p2p.testing.memnet.FaultyStream` does (the peer times out). Its
streams (:class:`SimStream`) pass bytes straight from one end's write to the
other end's buffer.

Distributions are written ``VALUE`` (fixed), ``uniform:LOW:HIGH`` or
``lognormal:MEDIAN:SIGMA``; the command line gives latencies in milliseconds
and bandwidths in Mbit/s (:func:`parse_distribution` takes the unit).
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
from dataclasses import dataclass
from typing import Unpack

import trio
import trio.lowlevel

from p2p.simulation.handshake import TrustedHandshake
from p2p.testing.memnet import MemoryNetwork, MemoryTransport, TransportOptions
from p2p.wire.admission import Admission, Decision
from p2p.wire.identity import Identity
from p2p.wire.transport import Handler, Transport

__all__ = ["Distribution", "Link", "SimAdmission", "SimNetwork", "SimStream", "SimTransport",
           "parse_distribution"]

logger = logging.getLogger(__name__)

DISTRIBUTION_KINDS = ("fixed", "uniform", "lognormal")


@dataclass(frozen=True)
class Distribution:
    """A distribution of non-negative values: ``fixed`` (a), ``uniform`` (a..b), ``lognormal``
    (median a, log-space spread b)."""

    kind: str
    a: float
    b: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in DISTRIBUTION_KINDS:
            raise ValueError(f"distribution kind: expected one of {', '.join(DISTRIBUTION_KINDS)}"
                             f", got {self.kind!r}")
        if not (math.isfinite(self.a) and math.isfinite(self.b)) or self.a < 0 or self.b < 0:
            raise ValueError(f"distribution {self.kind}: parameters must be finite and >= 0, "
                             f"got {self.a!r}, {self.b!r}")
        if self.kind == "uniform" and self.b < self.a:
            raise ValueError(f"uniform distribution: HIGH ({self.b}) is below LOW ({self.a})")

    def draw(self, rng: random.Random) -> float:
        """One value."""
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b)
        return self.a * math.exp(rng.gauss(0.0, self.b))

    def mean(self) -> float:
        """The expected value."""
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        return self.a * math.exp(self.b**2 / 2)


def parse_distribution(text: str, *, scale: float = 1.0, what: str = "distribution") -> Distribution:
    """``"20"``, ``"uniform:5:50"`` or ``"lognormal:20:0.5"``, every value times ``scale``.

    Raises ValueError naming ``what`` when the text is not one of these forms.
    """
    parts = text.strip().split(":")
    try:
        numbers = [float(p) for p in parts[1:]] if len(parts) > 1 else [float(parts[0])]
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not VALUE, uniform:LOW:HIGH or "
                         "lognormal:MEDIAN:SIGMA") from None
    try:
        if len(parts) == 1:
            return Distribution("fixed", numbers[0] * scale)
        kind = parts[0]
        if kind not in ("uniform", "lognormal") or len(numbers) != 2:
            raise ValueError("expected uniform:LOW:HIGH or lognormal:MEDIAN:SIGMA")
        if kind == "uniform":
            return Distribution(kind, numbers[0] * scale, numbers[1] * scale)
        return Distribution(kind, numbers[0] * scale, numbers[1])  # sigma has no unit
    except ValueError as exc:
        raise ValueError(f"{what}: {text!r}: {exc}") from None


@dataclass(frozen=True)
class Link:
    """One direction of a link: seconds before a write arrives, and bytes per second."""

    latency: float
    bandwidth: float  # bytes/s; inf: no transmission time

    def delay(self, size: int) -> float:
        return self.latency + (size / self.bandwidth if math.isfinite(self.bandwidth) else 0.0)


class SimNetwork(MemoryNetwork):
    """A memory network whose connections know both ends and obey a :class:`Link` model.

    ``latency`` (seconds) and ``bandwidth`` (bytes/s; None: unlimited) are drawn
    per ordered pair of addresses from a generator seeded by ``seed`` and the
    pair, so a link is the same whatever order connections open in.
    ``message_loss`` is the probability that a write is lost (the connection
    then stays dark). Figures: ``messages``, ``bytes``, ``messages_dropped``,
    ``connections`` (opened) and ``reconnections``: connections opened from an
    address to one it had already opened a connection to (a pooled connection
    closed and dialled again; 0 in a run without churn or loss, see
    docs/guide/simulation.md).

    ``trusted_handshakes``: the transports made here skip the cryptography of the
    identities the simulation hands out (:class:`~p2p.simulation.handshake.TrustedHandshake`:
    the same messages and identity checks, no X25519, no Ed25519); False (default): the
    daemon's Noise handshake.

    ``connect_jitter`` (seconds, default 0): a connection takes a further delay drawn
    uniformly in ``[0, connect_jitter)`` to open (the time a real connect spends in the
    kernels and schedulers of both hosts), drawn from ``seed``, the two addresses and
    how many times that pair connected before, so the same dial always waits the same.
    Without it, nodes started at one instant shuffle at the same instants, and with
    zero latency every connection to a node opened in one round lands on it in the same
    virtual instant: more than its handshake slots (16), and the rest are refused (a
    dial and a retry each). With it, each lands at its own instant and (at zero
    latency) finishes its handshake there; at 1,000 nodes the most contacted nodes then
    refuse sessions instead, so ``scripts/simulate.py`` leaves it off unless asked
    (``--connect-jitter``). See docs/guide/simulation.md.
    """

    def __init__(self, *, seed: int = 0, latency: Distribution | None = None,
                 bandwidth: Distribution | None = None, message_loss: float = 0.0,
                 trusted_handshakes: bool = False, connect_jitter: float = 0.0) -> None:
        super().__init__(seed=seed, message_loss=message_loss)
        if not (connect_jitter >= 0 and math.isfinite(connect_jitter)):
            raise ValueError(f"connect_jitter must be >= 0 seconds, got {connect_jitter!r}")
        self.seed = seed
        self.connect_jitter = connect_jitter
        self.trusted_handshakes = trusted_handshakes
        self.latency = latency or Distribution("fixed", 0.0)
        self.bandwidth = bandwidth
        self._links: dict[tuple[str, str], Link] = {}
        self.messages = 0
        self.bytes = 0
        self.reconnections = 0
        self._dialled: set[tuple[str, str]] = set()  # (source, target) pairs connected once
        self._attempts: dict[tuple[str, str], int] = {}  # dials per pair (connect_jitter)

    def link(self, source: str, target: str) -> Link:
        """The link from ``source`` to ``target`` (drawn on first use)."""
        key = (source, target)
        link = self._links.get(key)
        if link is None:
            rng = random.Random(f"{self.seed}|{source}|{target}")
            bandwidth = math.inf if self.bandwidth is None else self.bandwidth.draw(rng)
            link = Link(self.latency.draw(rng), bandwidth if bandwidth > 0 else math.inf)
            self._links[key] = link
        return link

    def connect_delay(self, source: str, target: str, attempt: int) -> float:
        """Seconds the ``attempt``-th connection (0: the first) from ``source`` to ``target``
        takes to open: a function of the seed and its arguments only (see ``connect_jitter``)."""
        digest = hashlib.blake2b(f"{self.seed}|{source}|{target}|{attempt}".encode(),
                                 digest_size=8).digest()
        return self.connect_jitter * int.from_bytes(digest, "big") / 2**64

    def _listening(self, address: str) -> tuple[Transport, Handler, trio.Nursery]:
        """The server entry of ``address``; OSError if nothing listens there or it is cut off."""
        entry = self.servers.get(address)
        if entry is None or address in self.unreachable:
            raise OSError(f"connection to {address} refused (simulated network)")
        return entry

    async def connect_from(self, source: str, address: str) -> trio.abc.Stream:
        """Open a connection from ``source`` to the transport listening on ``address``."""
        self._listening(address)
        pair = (source, address)
        if self.connect_jitter:
            attempt = self._attempts.get(pair, 0)
            self._attempts[pair] = attempt + 1
            await trio.sleep(self.connect_delay(source, address, attempt))
        server, handler, nursery = self._listening(address)  # it may have stopped meanwhile
        self.connections += 1
        if pair in self._dialled:
            self.reconnections += 1
        else:
            self._dialled.add(pair)
        # every write is counted (and delayed or lost as the links say)
        client_end, server_end = SimStream.pair(self, self.link(source, address),
                                                self.link(address, source))
        nursery.start_soon(server.serve_stream, server_end, handler,
                           f"sim-{source}-{self.connections}")
        return client_end

    def transport(self, identity: Identity, address: str,
                  **options: Unpack[TransportOptions]) -> SimTransport:
        """A transport that will listen on ``address``; its connections start from there."""
        return SimTransport(self, address, identity, **options)


class _Pipe:
    """One direction of a connection: bytes written by one end, not yet read by the other."""

    __slots__ = ("buffer", "eof", "reader_gone", "waiting")

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.eof = False  # the writing end closed: the reader gets b"" once the buffer is drained
        self.reader_gone = False  # the reading end closed: a write fails
        self.waiting = trio.lowlevel.ParkingLot()  # the reader, waiting for bytes or eof


class SimStream(trio.abc.Stream):
    """One end of a simulated connection (made in pairs by :meth:`pair`).

    A write waits its link's delay (latency + size / bandwidth), may be lost
    (the connection then stays dark: this and every later write is dropped,
    as when a link goes dark under an open TCP connection), and otherwise
    appends its bytes to the other end's buffer. Written directly rather than
    over ``trio.testing.memory_stream_pair`` (two queues and a pump per
    direction, a lock per write): the bytes and their order are the same,
    for about half the scheduling steps, and at 1,000 nodes a simulation
    opens tens of thousands of connections.

    Like trio's streams: one writer and one reader at a time (a second
    concurrent call raises ``trio.BusyResourceError``), every call is a
    checkpoint, a write after the peer closed raises
    ``trio.BrokenResourceError``, a call on a closed end ``trio.ClosedResourceError``.
    """

    def __init__(self, network: SimNetwork, link: Link, outgoing: _Pipe, incoming: _Pipe) -> None:
        self.sim = network
        self.link = link
        self.dark = False  # once a write is lost, the link stays dark
        self._out = outgoing
        self._in = incoming
        self._closed = False
        self._sending = False
        self._receiving = False

    @classmethod
    def pair(cls, network: SimNetwork, forward: Link,
             backward: Link) -> tuple[SimStream, SimStream]:
        """The two ends of a connection: the first writes over ``forward``, the second
        over ``backward``."""
        there, back = _Pipe(), _Pipe()
        return cls(network, forward, there, back), cls(network, backward, back, there)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is writing to this stream")
        self._sending = True
        try:
            if self._closed:
                raise trio.ClosedResourceError("this end of the connection is closed")
            net = self.sim
            size = len(data) if type(data) is not memoryview else data.nbytes
            delay = self.link.delay(size)
            if delay > 0:
                await trio.sleep(delay)
            else:
                await trio.lowlevel.checkpoint()
            if self._closed:
                raise trio.ClosedResourceError("this end of the connection is closed")
            out = self._out
            if out.reader_gone:
                raise trio.BrokenResourceError("the peer closed the connection")
            if not self.dark and net.message_loss and net.rng.random() < net.message_loss:
                self.dark = True
                net.messages_dropped += 1
            if self.dark:
                return
            net.messages += 1
            net.bytes += size
            out.buffer += data
            out.waiting.unpark_all()
        finally:
            self._sending = False

    async def wait_send_all_might_not_block(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("this end of the connection is closed")
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if max_bytes is not None and max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        if self._receiving:
            raise trio.BusyResourceError("another task is reading this stream")
        self._receiving = True
        try:
            incoming = self._in
            if self._closed:
                raise trio.ClosedResourceError("this end of the connection is closed")
            if incoming.buffer or incoming.eof:
                await trio.lowlevel.checkpoint()
            while not incoming.buffer and not incoming.eof:
                await incoming.waiting.park()
                if self._closed:
                    raise trio.ClosedResourceError("this end of the connection is closed")
            buffer = incoming.buffer
            if max_bytes is None or max_bytes >= len(buffer):
                incoming.buffer = bytearray()
                return buffer
            data = buffer[:max_bytes]
            del buffer[:max_bytes]
            return data
        finally:
            self._receiving = False

    def close(self) -> None:
        """Close this end at once: the peer reads end of stream, its writes fail."""
        if self._closed:
            return
        self._closed = True
        self._out.eof = True
        self._out.waiting.unpark_all()
        self._in.reader_gone = True
        self._in.buffer = bytearray()  # nobody will read it
        self._in.waiting.unpark_all()  # a read of this end in progress fails

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()


class SimAdmission(Admission):
    """The daemon's :class:`~p2p.wire.admission.Admission` (same rules, same counts) that
    also remembers the reason of its latest refusal, so that :class:`SimTransport` can tell
    an admission refusal's log line from any other."""

    last_refusal: str | None = None

    def _refuse(self, rule: str, reason: str) -> Decision:
        self.last_refusal = reason
        return super()._refuse(rule, reason)


class SimTransport(MemoryTransport):
    """A memory transport on a :class:`SimNetwork`: it dials from its own address.

    Its admission refusals are counted, not logged: a daemon writes a (rate-limited)
    warning for each connection its admission refuses, which at 1,000 simulated nodes is
    thousands of lines saying what ``admission.refused`` already counts (the simulation
    reports those counts, by rule). Every other line a peer causes is logged as a
    daemon logs it. ``refusals_not_logged`` counts the lines left out.
    """

    def __init__(self, network: SimNetwork, address: str, identity: Identity,
                 **options: Unpack[TransportOptions]) -> None:
        super().__init__(network, address, identity, **options)
        # same limits, empty table (nothing was admitted yet): only the refusals' reasons
        # are remembered as well
        self.admission = self._sim_admission = SimAdmission(self.admission.limits)
        self.refusals_not_logged = 0
        if network.trusted_handshakes:
            self.handshake_class = TrustedHandshake

        async def connect(target: str) -> trio.abc.Stream:
            return await network.connect_from(address, target)

        self._base_connector = connect

    def _offence(self, source: str, msg: str, *args: object) -> None:
        if not self._refusal_counted(msg, args):
            super()._offence(source, msg, *args)

    def _busy(self, source: str, msg: str, *args: object) -> None:
        if not self._refusal_counted(msg, args):
            super()._busy(source, msg, *args)

    def _refusal_counted(self, msg: str, args: tuple[object, ...]) -> bool:
        # The transport logs an admission refusal right after the admission decided (no
        # checkpoint in between): at once for a handshake slot or a full node, as
        # "session refused: ..." for a session slot otherwise. The reason is the line's
        # last argument.
        refusal = self._sim_admission.last_refusal
        if refusal is not None and args and args[-1] in (refusal, f"session refused: {refusal}"):
            self._sim_admission.last_refusal = None
            self.refusals_not_logged += 1
            logger.debug(msg, *args)
            return True
        return False
