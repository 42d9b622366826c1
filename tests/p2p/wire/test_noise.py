"""The sans-IO Noise handshake against the published test vectors, and its refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from p2p.wire.noise import CipherState, HandshakeState, NoiseError, ProtocolName

VECTORS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "data" / "noise_vectors.json").read_text())["vectors"]


def _key(vector: dict[str, Any], field: str) -> X25519PrivateKey | None:
    value = vector.get(field)
    return None if value is None else X25519PrivateKey.from_private_bytes(bytes.fromhex(value))


def _side(vector: dict[str, Any], role: str) -> HandshakeState:
    return HandshakeState(
        vector["protocol_name"], initiator=role == "init",
        prologue=bytes.fromhex(vector[f"{role}_prologue"]),
        static=_key(vector, f"{role}_static"),
        ephemeral=_key(vector, f"{role}_ephemeral"),
        psks=[bytes.fromhex(p) for p in vector.get(f"{role}_psks", [])],
    )


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: f"{v['protocol_name']}-{v['source'][19:40]}")
def test_published_vector(vector: dict[str, Any]) -> None:
    init, resp = _side(vector, "init"), _side(vector, "resp")
    sending = None
    for i, message in enumerate(vector["messages"]):
        payload = bytes.fromhex(message["payload"])
        expected = bytes.fromhex(message["ciphertext"])
        writer, reader = (init, resp) if i % 2 == 0 else (resp, init)
        if not init.finished:
            assert writer.write_message(payload) == expected, f"message {i}"
            assert reader.read_message(expected) == payload, f"message {i}"
            continue
        if sending is None:  # transport messages alternate too
            assert resp.finished
            if "handshake_hash" in vector:
                assert init.handshake_hash.hex() == vector["handshake_hash"]
                assert resp.handshake_hash.hex() == vector["handshake_hash"]
            sending = {id(init): init.split(), id(resp): resp.split()}
        assert sending[id(writer)][0].encrypt_with_ad(b"", payload) == expected, f"message {i}"
        assert sending[id(reader)][1].decrypt_with_ad(b"", expected) == payload, f"message {i}"
    assert sending is not None  # the vectors exercise the split keys


def test_vectors_cover_xx_and_psk0() -> None:
    names = {v["protocol_name"] for v in VECTORS}
    assert "Noise_XX_25519_ChaChaPoly_SHA256" in names
    assert any(0 in ProtocolName.parse(n).psk_positions for n in names)


def _xxpsk0(initiator: bool, psk: bytes) -> HandshakeState:
    return HandshakeState("Noise_XXpsk0_25519_ChaChaPoly_SHA256", initiator=initiator,
                          static=X25519PrivateKey.generate(), psks=[psk])


def test_xxpsk0_round_trip_and_wrong_psk_fails_at_the_first_message() -> None:
    a, b = _xxpsk0(True, b"k" * 32), _xxpsk0(False, b"k" * 32)
    m1 = a.write_message()
    assert len(m1) == 32 + 16  # e, then the empty payload's tag (keyed by the psk)
    b.read_message(m1)
    a.read_message(b.write_message(b"hi"))
    b.read_message(a.write_message(b"there"))
    assert a.finished and b.finished and a.handshake_hash == b.handshake_hash
    (a_send, a_recv), (b_send, b_recv) = a.split(), b.split()
    assert a_send.key == b_recv.key and a_recv.key == b_send.key and a_send.key != a_recv.key
    stranger = _xxpsk0(False, b"x" * 32)
    with pytest.raises(NoiseError, match="failed authentication"):
        stranger.read_message(_xxpsk0(True, b"k" * 32).write_message())
    with pytest.raises(NoiseError, match="already failed"):
        stranger.read_message(m1)


def test_refusals() -> None:
    for bad in ("Noise_IK_25519_ChaChaPoly_SHA256", "Noise_XX_448_ChaChaPoly_SHA256",
                "Noise_XXpsk_25519_ChaChaPoly_SHA256", "Noise_XXpsk9_25519_AESGCM_SHA256",
                "Noise_XX_25519_ChaChaPoly_BLAKE2s", "junk"):
        with pytest.raises(ValueError, match="unsupported|past the last"):
            ProtocolName.parse(bad)
    with pytest.raises(ValueError, match="needs 1 pre-shared keys"):
        HandshakeState("Noise_XXpsk0_25519_ChaChaPoly_SHA256", initiator=True,
                       static=X25519PrivateKey.generate())
    a = _xxpsk0(True, b"k" * 32)
    with pytest.raises(NoiseError, match="other side's turn"):
        a.read_message(b"x" * 48)
    b = _xxpsk0(False, b"k" * 32)
    with pytest.raises(NoiseError, match="too short"):
        b.read_message(b"x" * 10)
    c = _xxpsk0(False, b"k" * 32)
    with pytest.raises(NoiseError, match="invalid X25519|failed authentication"):
        c.read_message(bytes(32) + bytes(16))  # the all-zero (low-order) point


def test_nonce_2_64_minus_1_is_reserved_and_never_used() -> None:
    # specification 5.1: n = 2^64-1 is reserved; the last usable nonce is 2^64-2
    sender = CipherState("ChaChaPoly", b"k" * 32)
    receiver = CipherState("ChaChaPoly", b"k" * 32)
    sender.nonce = receiver.nonce = 2**64 - 2
    assert receiver.decrypt_with_ad(b"ad", sender.encrypt_with_ad(b"ad", b"last")) == b"last"
    with pytest.raises(NoiseError, match="nonce exhausted"):
        sender.encrypt_with_ad(b"ad", b"one more")
    with pytest.raises(NoiseError, match="nonce exhausted"):
        receiver.decrypt_with_ad(b"ad", b"x" * 32)
    assert sender.nonce == receiver.nonce == 2**64 - 1  # a refused call does not advance


def test_without_a_key_encrypt_and_decrypt_pass_data_through_unchanged() -> None:
    cs = CipherState("ChaChaPoly")
    assert not cs.has_key
    assert cs.encrypt_with_ad(b"ad", b"clear") == b"clear"
    assert cs.decrypt_with_ad(b"ad", b"clear") == b"clear" and cs.nonce == 0
