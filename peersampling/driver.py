"""Trio driver: runs a :class:`PeerSampler` over an abstract request/reply transport.

The node plugs in its real connections (and its server side calls
``sampler.on_request`` directly); tests plug in a fake network.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Protocol

import trio

from .core import PeerSampler
from .errors import PeerUnreachable
from .messages import ShuffleReply, ShuffleRequest

log = logging.getLogger(__name__)


class ShuffleTransport(Protocol):
    """Delivers one shuffle request and returns the peer's reply.

    Raises :class:`OSError`, :class:`TimeoutError` or :class:`PeerUnreachable`
    when the peer cannot be reached or does not answer.
    """

    async def request(self, address: str, req: ShuffleRequest) -> ShuffleReply: ...


def failure_reason(exc: BaseException, timeout: float) -> str:
    """Why a shuffle failed, never empty: the transport's reason (without the
    address, which the log line already names), or what kind of failure it was."""
    if isinstance(exc, trio.TooSlowError | TimeoutError) and not str(exc):
        return f"no reply within {timeout:g} s"
    if isinstance(exc, PeerUnreachable):
        return exc.reason
    return str(exc) or type(exc).__name__


async def _exchange(
    sampler: PeerSampler,
    transport: ShuffleTransport,
    address: str,
    req: ShuffleRequest,
    timeout: float,
    clock: Callable[[], float],
) -> None:
    pending = [(address, req)]
    while pending:  # on_failure may hand back a replacement shuffle
        address, req = pending.pop()
        try:
            with trio.fail_after(timeout):
                reply = await transport.request(address, req)
        except (OSError, TimeoutError, PeerUnreachable, trio.TooSlowError) as exc:
            log.info("shuffle with %s failed: %s", address, failure_reason(exc, timeout))
            pending.extend(sampler.on_failure(address, req))
            continue
        except Exception as exc:  # a buggy or hostile peer must not stop peer sampling
            log.warning("shuffle with %s failed unexpectedly: %r", address, exc)
            pending.extend(sampler.on_failure(address, req))
            continue
        sampler.on_reply(address, req, reply, clock())


async def run_round(
    sampler: PeerSampler,
    transport: ShuffleTransport,
    *,
    timeout: float,
    clock: Callable[[], float] = trio.current_time,
) -> int:
    """Run one period: send every request of the round concurrently.

    Returns the number of requests sent.
    """
    requests = sampler.start_shuffles(clock())
    async with trio.open_nursery() as nursery:
        for address, req in requests:
            nursery.start_soon(_exchange, sampler, transport, address, req, timeout, clock)
    return len(requests)


async def run_peer_sampling(
    sampler: PeerSampler,
    transport: ShuffleTransport,
    *,
    period: float,
    clock: Callable[[], float] = trio.current_time,
    timeout: float | None = None,
    max_backoff: float | None = None,
    rng: random.Random | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Shuffle every ``period`` seconds, forever.

    Each exchange must finish within ``timeout`` (default: ``period``). While
    the node is isolated (knows no peer), rounds are spaced by an exponential
    backoff from ``period`` up to ``max_backoff`` (default ``32 * period``),
    with +-10% jitter; ``sampler.is_isolated`` tells callers (``p2p status``).
    Transport errors are logged and reported to the sampler, never raised.
    """
    if period <= 0:
        raise ValueError(f"period must be > 0, got {period}")
    timeout = period if timeout is None else timeout
    max_backoff = 32 * period if max_backoff is None else max_backoff
    rng = rng or random.Random()
    backoff = period
    was_isolated = False
    task_status.started()
    while True:
        started = trio.current_time()
        sent = await run_round(sampler, transport, timeout=timeout, clock=clock)
        if sampler.is_isolated:
            if not was_isolated:
                if sampler.bootstrap_addresses:
                    log.warning(
                        "peer sampling: isolated (no peer answered; %d bootstrap addresses)",
                        len(sampler.bootstrap_addresses),
                    )
                else:
                    log.info("peer sampling: no peer known yet; waiting to be contacted")
            was_isolated = True
            delay = backoff * rng.uniform(0.9, 1.1)
            if sent:
                backoff = min(backoff * 2, max_backoff)
            log.debug("isolated: next attempt in %.1fs", delay)
        else:
            if was_isolated:
                log.info("peer sampling: joined the overlay (%d peers)", len(sampler.view()))
            was_isolated = False
            backoff = period
            delay = period
        await trio.sleep_until(started + delay)
