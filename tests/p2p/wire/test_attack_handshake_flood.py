"""Handshake slot floods: silent connections cannot keep honest handshakes out.

Sixteen IPv6 /64s (one /56 customer allocation holds 256) used to keep every
handshake slot taken by connecting ~32 times a second and never sending a
byte: each source held one slot (so the fair-share rule never bit) and each
slot was younger than the grace. Now handshakes are counted per /48 as well,
and a newcomer displaces the oldest handshake that has not delivered its
first frame within first_frame_grace (0.1 s); a handshake that has spoken is kept.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from p2p.wire.admission import Admission, AdmissionLimits, site_of, source_of
from p2p.wire.codec import Message
from p2p.wire.handshake import Handshake, PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.messages import Ping, Pong
from p2p.wire.transport import MessageStream, Transport


def _flood(adm: Admission, sources: list[str], *, seconds: float = 60.0,
           rate: float = 32.0) -> tuple[int, int]:
    """Silent connections round robin over ``sources`` at ``rate`` a second, an
    honest peer now and then; returns its (admitted, refused) handshakes."""
    conn = admitted = refused = 0
    step = 1.0 / rate
    for tick in range(int(seconds * rate)):
        now = tick * step
        conn += 1
        adm.open_handshake(conn, sources[tick % len(sources)], now)  # silent: never finishes
        if tick % 7 == 3:  # an honest peer tries now and then (~4.6 times a second)
            conn += 1
            decision = adm.open_handshake(conn, "192.0.2.10", now + step / 2)
            if decision.admitted:
                admitted += 1
                adm.close(conn)  # its handshake takes a few ms
            else:
                refused += 1
    return admitted, refused


def test_sixteen_v6_prefixes_cannot_keep_an_honest_peer_out_of_the_handshake_slots() -> None:
    limits = AdmissionLimits.for_connections(64)  # the daemon's default caps
    adm = Admission(limits)
    prefixes = [source_of(f"[2001:db8:0:{i:x}::1]:4000") for i in range(limits.max_handshakes)]
    assert len(set(prefixes)) == limits.max_handshakes  # 16 "sources", one /56
    admitted, refused = _flood(adm, prefixes)
    assert refused == 0 and admitted > 200, (
        f"honest handshakes: {admitted} admitted, {refused} refused in 60 s "
        f"while 16 IPv6 /64s opened 32 silent connections a second (refusals: {adm.refused})")
    # one /48 holds at most handshakes_per_source slots, the rest stay free
    assert adm.refused["handshakes_per_source"] > 0 and adm.handshakes <= 8


def test_sixteen_v4_hosts_cannot_keep_an_honest_peer_out_of_the_handshake_slots() -> None:
    # one slot per source and per site: only the "sent nothing yet" rule helps
    limits = AdmissionLimits.for_connections(64)
    adm = Admission(limits)
    admitted, refused = _flood(adm, [f"198.51.100.{i}" for i in range(1, 17)])
    assert refused == 0 and admitted > 200, (admitted, refused, adm.refused)


def test_sites_group_v6_prefixes_by_48() -> None:
    assert site_of("2001:db8:0:ff::/64") == site_of("2001:db8::/64") == "2001:db8::/48"
    assert site_of("2001:db8:1::/64") == "2001:db8:1::/48"
    assert site_of("198.51.100.7") == "198.51.100.7"  # anything else: its own site
    assert site_of("peer-a:1") == "peer-a:1"


def test_a_handshake_that_spoke_outlives_mute_ones_until_the_grace() -> None:
    adm = Admission(AdmissionLimits(max_handshakes=2, handshakes_per_source=2,
                                    handshake_grace=1.0, first_frame_grace=0.1))
    assert adm.open_handshake(1, "10.0.0.1", 0.0).admitted
    adm.first_frame(1)
    assert adm.open_handshake(2, "10.0.1.2", 0.0).admitted
    # a mute slot younger than first_frame_grace is not given up (its hello
    # may be on its way): a burst of dials is refused, as before
    assert not adm.open_handshake(3, "10.0.1.3", 0.05).admitted
    for conn in range(4, 10):  # older mute newcomers take each other's place, not 1's
        decision = adm.open_handshake(conn, f"10.0.1.{conn}", 0.11 * conn - 0.3)
        assert decision.admitted and decision.close == (2 if conn == 4 else conn - 1,)
        assert "sent nothing" in decision.why_close
    adm.first_frame(9)
    # every slot has spoken: the grace rule decides, as before
    assert not adm.open_handshake(10, "10.0.2.1", 0.95).admitted
    late = adm.open_handshake(11, "10.0.2.2", 1.0)
    assert late.admitted and late.close == (1,)


class _Handler:
    async def __call__(self, peer: PeerInfo, msg: Message) -> Message:
        return Pong(0)


@pytest.mark.trio
async def test_mute_connections_displace_each_other_not_a_handshake_in_progress(
        autojump_clock: trio.testing.MockClock) -> None:
    node = Transport(Identity.generate(), "127.0.0.1", 0, max_connections=16)  # 4 handshakes
    slots = node.admission.limits.max_handshakes
    spacing = 1.5 * node.admission.limits.first_frame_grace
    async with trio.open_nursery() as nursery:
        # an honest initiator on a slow link: its first frame is in, the rest to come
        client, server = trio.testing.memory_stream_pair()
        nursery.start_soon(node.serve_stream, server, _Handler(), "192.0.2.10:5000")
        me = Identity.generate()
        hs = Handshake(me, initiator=True, listen_address="127.0.0.1:1")
        ms = MessageStream(client, write_timeout=5.0)
        for out in hs.start():
            await ms.send_payload(out)
        answer = bytes(await ms.receive_payload(5, 5))  # the node has read the first frame
        # then a flood of connections that never send a byte, one per source
        mute = []
        for i in range(3 * slots):  # 1.8 s in all: within the 5 s handshake deadline
            await trio.sleep(spacing)
            flood_client, flood_server = trio.testing.memory_stream_pair()
            mute.append(flood_client)
            nursery.start_soon(node.serve_stream, flood_server, _Handler(), f"198.51.100.{i}:1")
            await trio.testing.wait_all_tasks_blocked()
        assert node.admission.handshakes == slots
        assert node.admission.refused.get("handshake_displaced", 0) == 2 * slots + 1
        # the honest handshake was kept: it finishes and its session serves
        pending = [answer]
        while not hs.done:
            for out in hs.receive(pending.pop() if pending else
                                  bytes(await ms.receive_payload(5, 5))):
                await ms.send_payload(out)
        assert hs.result is not None
        if hs.result.keys is not None:
            ms.start_sealing(hs.result.keys)
        await ms.send(Ping(3))
        assert await ms.receive(5, 5) == Pong(3)
        nursery.cancel_scope.cancel()
