"""A relay that never answers, or refuses: the node says which and why (``problem``, one
warning line per change of state), keeps retrying with growing waits, and reserves as
soon as the relay serves (virtual time, in-memory network)."""

from __future__ import annotations

import logging

import pytest
import trio

from p2p.runtime.protocol import register_node_messages
from p2p.runtime.relay.client import RelayReservations
from p2p.runtime.relay.service import RelayService
from p2p.testing import MemoryNetwork, wait_until
from p2p.wire.circuit import RelayLimits
from p2p.wire.dispatch import RequestDispatcher
from p2p.wire.identity import Identity

RELAY = "203.0.113.1:7661"
BEHIND = "10.1.0.10:7661"


@pytest.mark.parametrize("how", ["gone", "refusing"])
async def test_a_relay_that_is_gone_or_refuses_is_named_and_retried_with_backoff(
        how: str, autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture) -> None:
    register_node_messages()
    net = MemoryNetwork(seed=1)
    relay = net.transport(Identity.generate(), RELAY)
    behind = net.transport(Identity.generate(), BEHIND)
    service = RelayService(RelayLimits(), serving=lambda: how != "refusing",  # not relaying
                           node_id=relay.identity.node_id)
    relay_requests = RequestDispatcher()
    service.register(relay_requests)
    reservations = RelayReservations(behind, behind.identity.node_id,
                                     candidates=lambda: [(RELAY, None)], on_change=lambda: None,
                                     wanted=1)
    reservations.needed = True
    with caplog.at_level(logging.WARNING, logger="p2p.runtime.relay.client"):
        async with trio.open_nursery() as nursery:
            await nursery.start(behind.serve, RequestDispatcher())
            if how == "refusing":
                await nursery.start(relay.serve, relay_requests)
                nursery.start_soon(service.run)
            nursery.start_soon(reservations.run)
            await wait_until(lambda: RELAY in reservations.problem(), what="the relay named")
            started = trio.current_time()
            await trio.sleep(120.0)
            failures = reservations.relays[RELAY].failures
            # 1, 2, 4, ... s between attempts: a handful in two minutes, not one a second
            assert 3 <= failures <= 9, failures
            assert "retrying" in reservations.problem()
            lines = [r.getMessage() for r in caplog.records if RELAY in r.getMessage()]
            assert len(lines) == 1  # one line while the state stays the same
            assert ("refused" if how == "refusing" else "unreachable") in lines[0]
            assert reservations.relayed_addresses(trio.current_time()) == []
            if how == "gone":  # the relay comes (back): the next attempt reserves
                await nursery.start(relay.serve, relay_requests)
                nursery.start_soon(service.run)
                await wait_until(lambda: reservations.relayed_addresses(trio.current_time()),
                                 timeout=600.0, what="the reservation holds")
                assert reservations.problem() == ""
                assert trio.current_time() - started < 600.0
            nursery.cancel_scope.cancel()
    for t in (relay, behind):
        await t.aclose()
