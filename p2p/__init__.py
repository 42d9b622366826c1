"""p2p package."""

# --- wire protocol and transport ----------------------------------------------
from p2p.codec import (
    DecodeError,
    EncodeError,
    RegistrationError,
    decode,
    encode,
    register,
    register_core_messages,
)
from p2p.framing import FrameDecoder, FrameTooLarge, encode_frame
from p2p.handshake import Handshake, HandshakeError, PeerInfo
from p2p.identity import Identity, IdentityError
from p2p.messages import Error, Hello, HelloAuth, Ping, Pong
from p2p.secure import CIPHERS, SealError
from p2p.transport import (
    PeerUnreachable,
    Rejected,
    RemoteError,
    Transport,
    TransportError,
)

__all__ = [
    "CIPHERS", "DecodeError", "EncodeError", "Error", "FrameDecoder", "FrameTooLarge",
    "Handshake", "HandshakeError", "Hello", "HelloAuth", "Identity", "IdentityError",
    "PeerInfo", "PeerUnreachable", "Ping", "Pong", "RegistrationError", "Rejected",
    "RemoteError", "SealError", "Transport", "TransportError", "decode", "encode",
    "encode_frame", "register", "register_core_messages",
]
# --- end wire protocol and transport --------------------------------------------

# --- operator-facing API: config, admin socket, checkpoints -------------------
from p2p.admin import AdminError, AdminHandler, AdminServer, admin_socket_path, serve_admin
from p2p.admin_client import AdminClient, AdminClientError
from p2p.config import (
    ConfigError,
    HostPort,
    ModelSpec,
    NodeConfig,
    SwarmKeyError,
    load_config,
    load_swarm_key,
    render_config_toml,
)

# p2p.checkpoint imports torch: loaded on first use so `p2p status` starts fast.
_LAZY_CHECKPOINT = ("CheckpointError", "CheckpointStore", "DataDirError", "NodeState",
                    "PeerRecord", "PushSumRecord", "atomic_write_bytes",
                    "check_data_dir_writable")


def __getattr__(name: str) -> object:
    if name in _LAZY_CHECKPOINT:
        from p2p import checkpoint

        return getattr(checkpoint, name)
    raise AttributeError(f"module 'p2p' has no attribute {name!r}")


# Extends (not replaces) any __all__ defined above by the wire/transport modules.
__all__ = [
    *globals().get("__all__", []),
    "AdminClient", "AdminClientError", "AdminError", "AdminHandler", "AdminServer",
    "ConfigError", "HostPort", "ModelSpec", "NodeConfig", "SwarmKeyError",
    "admin_socket_path", "load_config", "load_swarm_key", "render_config_toml",
    "serve_admin", *_LAZY_CHECKPOINT,
]
# --- end operator-facing API --------------------------------------------------
