"""Identity files and the sans-IO handshake: success and every failure."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import msgpack
import pytest

from p2p.wire import codec
from p2p.wire.handshake import Handshake, HandshakeError
from p2p.wire.identity import IDENTITY_FILE, Identity, IdentityError, verify_signature
from p2p.wire.messages import Error, Hello, HelloAuth
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


def test_handshake_with_swarm_key_derives_matching_directional_keys() -> None:
    a, b = _pair(SWARM, SWARM)
    _run(a, b)
    ka, kb = a.result.keys, b.result.keys  # type: ignore[union-attr]
    assert ka is not None and kb is not None
    assert ka.send_key == kb.recv_key and ka.recv_key == kb.send_key
    assert ka.send_key != ka.recv_key
    # each side seals with the cipher it announced
    assert (ka.send_cipher, ka.recv_cipher) == ("chacha20", "aes-gcm")
    assert kb.opener().open(ka.sealer().seal(b"ping")) == b"ping"
    assert ka.opener().open(kb.sealer().seal(b"pong")) == b"pong"


def test_session_keys_are_fresh_per_handshake() -> None:
    a1, b1 = _pair(SWARM, SWARM)
    a2, b2 = _pair(SWARM, SWARM)
    _run(a1, b1)
    _run(a2, b2)
    assert a1.result.keys.send_key != a2.result.keys.send_key  # type: ignore[union-attr]


def test_expected_identity_accepted() -> None:
    a, b = _pair()
    a.expected_node_id = b.identity.node_id
    _run(a, b)
    assert a.done


# --- handshake failures -------------------------------------------------------------


def _fails(a: Handshake, b: Handshake, match: str) -> HandshakeError:
    with pytest.raises(HandshakeError, match=match) as info:
        _run(a, b)
    return info.value


def test_version_mismatch() -> None:
    a, b = _pair()
    hello = msgpack.unpackb(a.start()[0], raw=False)
    hello["v"] = 99
    hello["version"] = 99
    b.start()
    with pytest.raises(HandshakeError, match="protocol version mismatch: peer speaks version 99"):
        b.receive(msgpack.packb(hello, use_bin_type=True))


def test_version_field_mismatch_inside_current_codec() -> None:
    a, b = _pair()
    hello = codec.decode(a.start()[0])
    b.start()
    other = codec.PROTOCOL_VERSION + 1
    with pytest.raises(HandshakeError, match=f"version mismatch: peer speaks version {other}"):
        b.receive(codec.encode(dataclasses.replace(hello, version=other)))


def test_bad_signature() -> None:
    a, b = _pair()
    b.start()
    hello_r, auth_r = b.receive(a.start()[0])
    assert a.receive(hello_r) == []
    forged = HelloAuth(bytes(64))
    with pytest.raises(HandshakeError, match="bad signature"):
        a.receive(codec.encode(forged))


def test_signature_from_another_exchange_is_rejected() -> None:
    # A signature is bound to this transcript: replaying one from an earlier
    # handshake between the same nodes fails.
    a, b = _pair()
    b.start()
    _, old_auth = b.receive(a.start()[0])
    a2 = Handshake(a.identity, initiator=True, listen_address="", tags=frozenset())
    b2 = Handshake(b.identity, initiator=False, listen_address="")
    b2.start()
    hello_r2, _ = b2.receive(a2.start()[0])
    a2.receive(hello_r2)
    with pytest.raises(HandshakeError, match="bad signature"):
        a2.receive(old_auth)


def test_missing_swarm_key_on_joining_node() -> None:
    a, b = _pair(None, SWARM)
    _fails(a, b, "missing swarm key: the peer has no swarm key but this node requires one")


def test_missing_swarm_key_on_responder() -> None:
    a, b = _pair(SWARM, None)
    _fails(a, b, "missing swarm key: the peer uses a swarm key and this node has none")


@pytest.mark.parametrize(
    ("keys", "local", "told_to_peer"),
    [
        # the keyless side is told that IT lacks the key, whichever side it is
        ((None, SWARM), "the peer has no swarm key but this node requires one",
         "the peer requires a swarm key and this node has none (pass --swarm-key-file"),
        ((SWARM, None), "the peer uses a swarm key and this node has none",
         "the peer has no swarm key and this node uses one"),
        ((b"x" * 32, SWARM), "wrong swarm key", "the peer's swarm key differs from this node's"),
    ],
)
def test_swarm_key_refusal_is_worded_for_the_side_that_reads_it(
    keys: tuple[bytes | None, bytes | None], local: str, told_to_peer: str
) -> None:
    a, b = _pair(*keys)
    error = _fails(a, b, local)  # b detects it; a reads error.peer_reason as a refusal
    assert told_to_peer in error.peer_reason
    a2, _ = _pair(*keys)
    a2.start()
    with pytest.raises(HandshakeError) as refused:
        a2.receive(codec.encode(Error("handshake", error.peer_reason)))
    assert refused.value.remote
    assert str(refused.value) == f"peer refused the handshake: {error.peer_reason}"


def test_wrong_swarm_key() -> None:
    a, b = _pair(b"x" * 32, SWARM)
    _fails(a, b, "wrong swarm key")


def test_tampered_hello_fails_swarm_proof() -> None:
    a, b = _pair(SWARM, SWARM)
    hello = codec.decode(a.start()[0])
    assert isinstance(hello, Hello)
    b.start()
    evil = dataclasses.replace(hello, listen_address="6.6.6.6:1")
    with pytest.raises(HandshakeError, match="wrong swarm key"):
        b.receive(codec.encode(evil))


def test_identity_mismatch() -> None:
    a, b = _pair(expected_node_id=Identity.generate().node_id)
    _fails(a, b, "identity mismatch: expected node")


def test_self_connection() -> None:
    me = Identity.generate()
    a = Handshake(me, initiator=True, listen_address="", tags=frozenset())
    b = Handshake(me, initiator=False, listen_address="")
    _fails(a, b, "self-connection")


def test_peer_error_is_reported_as_refusal() -> None:
    from p2p.wire.messages import Error

    a, _ = _pair()
    a.start()
    with pytest.raises(HandshakeError, match="peer refused the handshake: go away") as info:
        a.receive(codec.encode(Error("handshake", "go away")))
    assert info.value.remote


def test_unexpected_message_and_garbage() -> None:
    a, b = _pair()
    a.start()
    with pytest.raises(HandshakeError, match="expected Hello during handshake, got HelloAuth"):
        a.receive(codec.encode(HelloAuth(b"x")))
    b.start()
    with pytest.raises(HandshakeError, match="malformed handshake message"):
        b.receive(b"\xc1garbage")
    with pytest.raises(HandshakeError):  # a failed handshake stays failed
        b.receive(b"")


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
