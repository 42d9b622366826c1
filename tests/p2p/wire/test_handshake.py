"""Identity files and the sans-IO handshake: success and every failure."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import msgpack
import pytest
from lab.attack.relay_attacker import ClaimedIdentity

from p2p.wire import codec
from p2p.wire.handshake import PROTOCOL_KEYED, PROTOCOL_PLAIN, Handshake, HandshakeError
from p2p.wire.identity import IDENTITY_FILE, Identity, IdentityError, verify_signature
from p2p.wire.messages import Error, NoiseHello, NoiseMessage
from p2p.wire.sealing import Opener, Sealer, SealError

SWARM = b"s" * 32
TAG = b"t" * 32


def _pair(
    swarm_i: bytes | None = None,
    swarm_r: bytes | None = None,
    **kwargs: object,
) -> tuple[Handshake, Handshake]:
    a = Handshake(
        Identity.generate(),
        initiator=True,
        listen_address="10.0.0.1:1",
        tags=frozenset({TAG}),
        swarm_key=swarm_i,
        **kwargs,  # type: ignore[arg-type]
    )
    b = Handshake(
        Identity.generate(),
        initiator=False,
        listen_address="10.0.0.2:2",
        swarm_key=swarm_r,
        cipher="aes-gcm",
    )
    return a, b


def _run(a: Handshake, b: Handshake) -> None:
    """Pump payloads between the two sides until neither has anything to send."""
    to_b = a.start()
    to_a = b.start()
    while to_a or to_b:
        next_to_a = [out for p in to_b for out in b.receive(p)]
        next_to_b = [out for p in to_a for out in a.receive(p)]
        to_a, to_b = next_to_a, next_to_b


# --- identity -------------------------------------------------------------------


def test_identity_load_or_create_persists_with_mode_0600(tmp_path: Path) -> None:
    data_dir = tmp_path / "node"
    first = Identity.load_or_create(data_dir)
    path = data_dir / IDENTITY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first.node_id) == 32
    assert Identity.load_or_create(data_dir).node_id == first.node_id
    assert not [p for p in data_dir.iterdir() if p.name != IDENTITY_FILE]  # no temp files left


def test_identity_signature_round_trip() -> None:
    ident = Identity.from_seed(b"\x01" * 32)
    sig = ident.sign(b"data")
    assert verify_signature(ident.node_id, sig, b"data")
    assert not verify_signature(ident.node_id, sig, b"other")
    assert not verify_signature(b"short", sig, b"data")


def test_identity_unwritable_directory_is_a_clear_error(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root can write anywhere")
    locked = tmp_path / "ro"
    locked.mkdir(mode=0o500)
    with pytest.raises(IdentityError, match="must be writable"):
        Identity.load_or_create(locked)


def test_identity_data_dir_that_is_a_file(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(IdentityError, match="cannot create data directory"):
        Identity.load_or_create(not_a_dir)


def test_identity_garbage_key_file(tmp_path: Path) -> None:
    (tmp_path / IDENTITY_FILE).write_bytes(b"not a key")
    (tmp_path / IDENTITY_FILE).chmod(0o600)  # private: only the content is wrong
    with pytest.raises(IdentityError, match="not a PEM-encoded Ed25519"):
        Identity.load_or_create(tmp_path)


# --- handshake success ------------------------------------------------------------


def test_handshake_without_swarm_key() -> None:
    a, b = _pair()
    _run(a, b)
    assert a.done and b.done
    assert a.result is not None and b.result is not None
    assert a.result.peer.node_id == b.identity.node_id
    assert b.result.peer.node_id == a.identity.node_id
    assert b.result.peer.listen_address == "10.0.0.1:1"
    assert b.result.peer.tags == frozenset({TAG})
    assert a.result.keys is None and b.result.keys is None
    assert a.protocol == PROTOCOL_PLAIN


def test_handshake_with_swarm_key_derives_matching_directional_keys() -> None:
    a, b = _pair(SWARM, SWARM)
    _run(a, b)
    assert a.protocol == PROTOCOL_KEYED
    ka, kb = a.result.keys, b.result.keys  # type: ignore[union-attr]
    assert ka is not None and kb is not None
    assert ka.send_key == kb.recv_key and ka.recv_key == kb.send_key
    assert ka.send_key != ka.recv_key
    # each side seals with the cipher it announced
    assert (ka.send_cipher, ka.recv_cipher) == ("chacha20", "aes-gcm")
    assert kb.opener().open(ka.sealer().seal(b"ping")) == b"ping"
    assert ka.opener().open(kb.sealer().seal(b"pong")) == b"pong"


def test_session_keys_are_fresh_per_handshake() -> None:
    # same two nodes twice: ephemeral keys make new session keys (forward secrecy)
    a1, b1 = _pair(SWARM, SWARM)
    _run(a1, b1)
    a2 = Handshake(a1.identity, initiator=True, listen_address="", swarm_key=SWARM)
    b2 = Handshake(b1.identity, initiator=False, listen_address="", swarm_key=SWARM)
    _run(a2, b2)
    assert a1.result.keys.send_key != a2.result.keys.send_key  # type: ignore[union-attr]
    assert a1.result.keys.recv_key != a2.result.keys.recv_key  # type: ignore[union-attr]


def test_expected_identity_accepted() -> None:
    a, b = _pair()
    a.expected_node_id = b.identity.node_id
    _run(a, b)
    assert a.done


@pytest.mark.parametrize("swarm", [None, SWARM])
def test_nothing_about_either_node_crosses_in_clear(swarm: bytes | None) -> None:
    a, b = _pair(swarm, swarm)
    wire = bytearray()
    b.start()
    to_b = a.start()
    wire += b"".join(to_b)
    to_a = [out for p in to_b for out in b.receive(p)]
    wire += b"".join(to_a)
    last = [out for p in to_a for out in a.receive(p)]
    wire += b"".join(last)
    for p in last:
        b.receive(p)
    assert a.done and b.done
    for secret in (a.identity.node_id, b.identity.node_id, TAG, b"10.0.0.1:1", b"10.0.0.2:2"):
        assert secret not in wire


# --- handshake failures -------------------------------------------------------------


def _fails(a: Handshake, b: Handshake, match: str) -> HandshakeError:
    with pytest.raises(HandshakeError, match=match) as info:
        _run(a, b)
    return info.value


def test_version_mismatch() -> None:
    a, b = _pair()
    hello = msgpack.unpackb(a.start()[0], raw=False)
    hello["v"] = 99
    b.start()
    with pytest.raises(HandshakeError, match="protocol version mismatch: peer speaks version 99"):
        b.receive(msgpack.packb(hello, use_bin_type=True))


def test_unsupported_handshake_protocol() -> None:
    a, b = _pair()
    hello = codec.decode(a.start()[0])
    assert isinstance(hello, NoiseHello)
    b.start()
    other = dataclasses.replace(hello, protocol="Noise_IK_25519_AESGCM_SHA256")
    with pytest.raises(HandshakeError, match="unsupported handshake protocol") as info:
        b.receive(codec.encode(other))
    assert info.value.tell_peer and PROTOCOL_PLAIN in info.value.peer_reason


def _claiming(victim: Identity) -> Identity:
    """Claims the victim's id but can only sign with a key of its own."""
    return ClaimedIdentity(Identity.generate().private_key, victim.node_id)


@pytest.mark.parametrize("swarm", [None, SWARM])
def test_claiming_another_nodes_id_fails_on_the_signature(swarm: bytes | None) -> None:
    victim = Identity.generate()
    # as responder: the initiator refuses it before saying who it is
    a = Handshake(Identity.generate(), initiator=True, listen_address="", swarm_key=swarm,
                  expected_node_id=victim.node_id)
    liar = Handshake(_claiming(victim), initiator=False, listen_address="", swarm_key=swarm)
    liar.start()
    reply = liar.receive(a.start()[0])
    with pytest.raises(HandshakeError, match="bad signature: peer .* did not prove"):
        a.receive(reply[0])
    # as initiator: the responder refuses it
    liar_i = Handshake(_claiming(victim), initiator=True, listen_address="", swarm_key=swarm)
    honest = Handshake(Identity.generate(), initiator=False, listen_address="", swarm_key=swarm)
    _fails(liar_i, honest, "bad signature")
    assert not honest.done


def test_reply_from_another_exchange_is_refused() -> None:
    # A reply is bound to this exchange's ephemeral keys: replaying one recorded
    # from an earlier handshake between the same nodes fails to authenticate.
    a, b = _pair(SWARM, SWARM)
    b.start()
    (old_reply,) = b.receive(a.start()[0])
    a2 = Handshake(a.identity, initiator=True, listen_address="", swarm_key=SWARM)
    a2.start()
    with pytest.raises(HandshakeError, match="does not authenticate") as info:
        a2.receive(old_reply)
    assert not info.value.tell_peer


@pytest.mark.parametrize("swarm", [None, SWARM])
def test_replayed_first_message_gets_nothing_usable(swarm: bytes | None) -> None:
    a, b = _pair(swarm, swarm)
    (hello,) = a.start()
    b.start()
    (reply,) = b.receive(hello)  # the honest exchange, recorded by an eavesdropper
    replayed = Handshake(b.identity, initiator=False, listen_address="10.0.0.2:2",
                         tags=frozenset({TAG}), swarm_key=swarm)
    replayed.start()
    (answer,) = replayed.receive(hello)
    assert answer != reply  # a fresh ephemeral key: a new session, not the old one
    for secret in (b.identity.node_id, b"10.0.0.2:2", TAG):
        assert secret not in answer  # the responder's id, address and tags are encrypted
    # without the initiator's ephemeral private key the answer cannot be opened:
    # another initiator (even one with the swarm key) fails on it
    other = Handshake(Identity.generate(), initiator=True, listen_address="", swarm_key=swarm)
    other.start()
    with pytest.raises(HandshakeError, match="does not authenticate"):
        other.receive(answer)
    assert not replayed.done  # and the responder never completes with the replayer


def test_missing_swarm_key_on_joining_node() -> None:
    a, b = _pair(None, SWARM)
    _fails(a, b, "missing swarm key: the peer has no swarm key but this node requires one")


def test_missing_swarm_key_on_responder() -> None:
    a, b = _pair(SWARM, None)
    _fails(a, b, "missing swarm key: the peer uses a swarm key and this node has none")


def test_a_keyed_responder_does_not_tell_a_keyless_peer_why() -> None:
    # nothing revealed before membership is proven (tests/test_attack_wire_preauth_reveal.py)
    a, b = _pair(None, SWARM)
    error = _fails(a, b, "the peer has no swarm key but this node requires one")
    assert error.silent and not error.tell_peer
    assert "no swarm key where one is needed" in a.explain_close("connection closed by peer")


@pytest.mark.parametrize(
    ("keys", "local", "told_to_peer"),
    [
        # a keyless responder (no membership to hide) tells the keyed peer why
        ((SWARM, None), "the peer uses a swarm key and this node has none",
         "the peer has no swarm key and this node uses one"),
    ],
)
def test_swarm_key_refusal_is_worded_for_the_side_that_reads_it(
    keys: tuple[bytes | None, bytes | None], local: str, told_to_peer: str
) -> None:
    a, b = _pair(*keys)
    error = _fails(a, b, local)  # b detects it; a reads error.peer_reason as a refusal
    assert error.tell_peer
    assert told_to_peer in error.peer_reason
    a2, _ = _pair(*keys)
    a2.start()
    with pytest.raises(HandshakeError) as refused:
        a2.receive(codec.encode(Error("handshake", error.peer_reason)))
    assert refused.value.remote
    assert str(refused.value) == f"peer refused the handshake: {error.peer_reason}"


def test_wrong_swarm_key_fails_at_the_first_message_silently() -> None:
    a, b = _pair(b"x" * 32, SWARM)
    b.start()
    with pytest.raises(HandshakeError, match="wrong swarm key: the peer's first handshake "
                                             "message does not authenticate") as info:
        b.receive(a.start()[0])
    assert info.value.silent and not info.value.tell_peer  # the responder just closes
    # the initiator, whose connection is closed, is told what that most likely means
    assert "a different swarm key" in a.explain_close("connection closed by peer")
    assert b.explain_close("x") == "x"


def test_tampered_hello_fails_authentication() -> None:
    a, b = _pair(SWARM, SWARM)
    hello = codec.decode(a.start()[0])
    assert isinstance(hello, NoiseHello)
    b.start()
    noise = bytearray(hello.noise)
    noise[0] ^= 1  # another ephemeral key
    with pytest.raises(HandshakeError, match="wrong swarm key"):
        b.receive(codec.encode(dataclasses.replace(hello, noise=bytes(noise))))


def test_tampered_last_message_fails_authentication() -> None:
    a, b = _pair(SWARM, SWARM)
    b.start()
    (reply,) = b.receive(a.start()[0])
    (last,) = a.receive(reply)
    msg = codec.decode(last)
    assert isinstance(msg, NoiseMessage)
    noise = bytearray(msg.noise)
    noise[-1] ^= 1
    with pytest.raises(HandshakeError, match="last message does not authenticate") as info:
        b.receive(codec.encode(NoiseMessage(bytes(noise))))
    assert info.value.silent


def test_identity_mismatch() -> None:
    a, b = _pair(expected_node_id=Identity.generate().node_id)
    error = _fails(a, b, "identity mismatch: expected node")
    assert b.identity.node_id.hex()[:16] not in error.peer_reason  # sent in clear


def test_self_connection() -> None:
    me = Identity.generate()
    a = Handshake(me, initiator=True, listen_address="", tags=frozenset())
    b = Handshake(me, initiator=False, listen_address="")
    _fails(a, b, "self-connection")


def test_peer_error_is_reported_as_refusal() -> None:
    a, _ = _pair()
    a.start()
    with pytest.raises(HandshakeError, match="peer refused the handshake: go away") as info:
        a.receive(codec.encode(Error("handshake", "go away")))
    assert info.value.remote


def test_unexpected_message_and_garbage() -> None:
    a, b = _pair()
    a.start()
    with pytest.raises(HandshakeError,
                       match="expected NoiseMessage during handshake, got NoiseHello"):
        a.receive(codec.encode(NoiseHello(PROTOCOL_PLAIN, b"x")))
    b.start()
    with pytest.raises(HandshakeError, match="malformed handshake message"):
        b.receive(b"\xc1garbage")
    with pytest.raises(HandshakeError):  # a failed handshake stays failed
        b.receive(b"")


@pytest.mark.parametrize("swarm", [None, SWARM])
def test_invalid_ephemeral_key_is_a_handshake_error(swarm: bytes | None) -> None:
    # the all-zero point has low order: no shared secret; refused, not a crash
    a, b = _pair(swarm, swarm)
    hello = codec.decode(a.start()[0])
    assert isinstance(hello, NoiseHello)
    b.start()
    zero = dataclasses.replace(hello, noise=bytes(32) + hello.noise[32:])
    with pytest.raises(HandshakeError, match="malformed handshake message|wrong swarm key"):
        b.receive(codec.encode(zero))


def test_bad_swarm_key_length() -> None:
    with pytest.raises(ValueError, match="swarm key must be 32 bytes"):
        Handshake(Identity.generate(), initiator=True, listen_address="", swarm_key=b"short")


# --- sealing ------------------------------------------------------------------------------


@pytest.mark.parametrize("cipher", ["chacha20", "aes-gcm"])
def test_sealing_rejects_replay_reorder_and_tamper(cipher: str) -> None:
    key = os.urandom(32)
    sealer, opener = Sealer(key, cipher), Opener(key, cipher)
    f0, f1, f2 = (sealer.seal(bytes([i]) * 5) for i in range(3))
    assert b"\x00" * 5 not in f0  # not readable
    assert opener.open(f0) == b"\x00" * 5
    with pytest.raises(SealError, match="failed authentication"):
        opener.open(f0)  # replay
    with pytest.raises(SealError, match="must be closed"):
        opener.open(f1)  # a failed channel stays failed
    fresh = Opener(key, cipher)
    with pytest.raises(SealError):
        fresh.open(f2)  # reordering: f2 opened first
    fresh = Opener(key, cipher)
    with pytest.raises(SealError):
        fresh.open(f0[:-1] + bytes([f0[-1] ^ 1]))  # tampered tag


def test_sealing_wrong_key_and_unknown_cipher() -> None:
    f = Sealer(b"a" * 32).seal(b"secret")
    with pytest.raises(SealError):
        Opener(b"b" * 32).open(f)
    with pytest.raises(ValueError, match="unknown cipher 'rot13'"):
        Sealer(b"a" * 32, "rot13")


def test_a_man_in_the_middle_cannot_downgrade_two_keyed_nodes_to_plain_xx() -> None:
    # The man in the middle rewrites the keyed hello into a keyless one: the
    # keyed responder refuses that protocol outright...
    a, b = _pair(SWARM, SWARM)
    b.start()
    hello = codec.decode(a.start()[0])
    assert isinstance(hello, NoiseHello) and hello.protocol == PROTOCOL_KEYED
    with pytest.raises(HandshakeError, match="missing swarm key"):
        b.receive(codec.encode(NoiseHello(PROTOCOL_PLAIN, hello.noise)))
    # ...and a keyless responder's reply, relayed to the keyed initiator, fails
    # its authentication (the initiator's state has the swarm key mixed in)
    a, _ = _pair(SWARM, SWARM)
    plain = Handshake(Identity.generate(), initiator=False, listen_address="10.0.0.3:3")
    plain.start()
    keyed_hello = codec.decode(a.start()[0])
    assert isinstance(keyed_hello, NoiseHello)
    reply = plain.receive(codec.encode(NoiseHello(PROTOCOL_PLAIN, keyed_hello.noise[:32])))
    with pytest.raises(HandshakeError, match="does not authenticate") as info:
        a.receive(reply[0])
    assert info.value.silent and a.result is None


def test_a_refusal_in_clear_cannot_forge_log_lines_or_flood_them() -> None:
    # Anyone on the path (or a replayer of a first message) can send an Error in
    # clear during the handshake: its reason ends up in this node's log.
    a, _ = _pair(SWARM, SWARM)
    a.start()
    forged = "go away\nWARNING p2p.runtime.node: pushed 1e9 weight\x1b[2J" + "x" * 100_000
    with pytest.raises(HandshakeError) as info:
        a.receive(codec.encode(Error("handshake", forged)))
    assert info.value.remote
    reason = info.value.reason
    assert reason.startswith("peer refused the handshake: go away")
    assert "\n" not in reason and "\x1b" not in reason and len(reason) < 600
