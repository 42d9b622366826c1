"""The wire: framing, the message codec, the handshake, sealing and the TCP transport.

Nothing here knows about models or training; the node runtime composes the
messages and handlers of each subsystem on top of this layer.
"""

from p2p.wire.admission import (
    Admission,
    AdmissionLimits,
    FrameBudget,
    frame_allowance,
    frame_pace_allowance,
)
from p2p.wire.codec import (
    DecodeError,
    EncodeError,
    RegistrationError,
    WireMessage,
    decode,
    encode,
    register,
    register_messages,
)
from p2p.wire.dispatch import RequestDispatcher
from p2p.wire.framing import FrameDecoder, FrameTooLarge, encode_frame
from p2p.wire.handshake import Handshake, HandshakeError, PeerInfo
from p2p.wire.identity import Identity, IdentityError
from p2p.wire.messages import (
    MESSAGES,
    Error,
    HandshakePayload,
    NoiseHello,
    NoiseMessage,
    Ping,
    Pong,
)
from p2p.wire.sealing import CIPHERS, SealError
from p2p.wire.transport import PeerUnreachable, Rejected, RemoteError, Transport, TransportError

__all__ = [
    "Admission", "AdmissionLimits", "FrameBudget", "frame_allowance", "frame_pace_allowance",
    "CIPHERS", "MESSAGES", "DecodeError", "EncodeError", "Error", "FrameDecoder",
    "FrameTooLarge", "Handshake", "HandshakeError", "HandshakePayload", "Identity",
    "IdentityError", "NoiseHello", "NoiseMessage", "PeerInfo", "PeerUnreachable", "Ping",
    "Pong", "RegistrationError",
    "Rejected", "RemoteError", "RequestDispatcher", "SealError", "Transport",
    "TransportError", "WireMessage", "decode", "encode", "encode_frame", "register",
    "register_messages",
]
