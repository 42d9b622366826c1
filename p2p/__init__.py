"""The gossip learning daemon: wire, node runtime and operator surface.

Subpackages: :mod:`p2p.wire` (framing, codec, handshake, sealing, transport),
:mod:`p2p.runtime` (the node, its state, checkpoints, the admin server),
:mod:`p2p.cli` (the ``p2p`` command, admin client, rendering), :mod:`p2p.config`
(the configuration schema) and :mod:`p2p.swarm` (the local swarm launcher).
"""

# --- the plug-in families, injected into the config before anything reads one ---
import p2p.plugins  # noqa: F401

# --- wire protocol and transport ----------------------------------------------
from p2p.runtime.protocol import register_node_messages
from p2p.wire import (
    CIPHERS,
    DecodeError,
    EncodeError,
    Error,
    FrameDecoder,
    FrameTooLarge,
    Handshake,
    HandshakeError,
    HandshakePayload,
    Identity,
    IdentityError,
    NoiseHello,
    NoiseMessage,
    PeerInfo,
    PeerUnreachable,
    Ping,
    Pong,
    RegistrationError,
    Rejected,
    RemoteError,
    SealError,
    Transport,
    TransportError,
    decode,
    encode,
    encode_frame,
    register,
    register_messages,
)

__all__ = [
    "CIPHERS",
    "DecodeError",
    "EncodeError",
    "Error",
    "FrameDecoder",
    "FrameTooLarge",
    "Handshake",
    "HandshakeError",
    "HandshakePayload",
    "NoiseHello",
    "NoiseMessage",
    "Identity",
    "IdentityError",
    "PeerInfo",
    "PeerUnreachable",
    "Ping",
    "Pong",
    "RegistrationError",
    "Rejected",
    "RemoteError",
    "SealError",
    "Transport",
    "TransportError",
    "decode",
    "encode",
    "encode_frame",
    "register",
    "register_messages",
    "register_node_messages",
]
# --- end wire protocol and transport --------------------------------------------

# --- operator-facing API: config, admin socket, checkpoints -------------------
from typing import TYPE_CHECKING

from p2p.cli.admin_client import AdminClient, AdminClientError, AdminSocketUntrusted
from p2p.config import (
    ConfigError,
    HostPort,
    NodeConfig,
    SwarmKeyError,
    load_config,
    load_swarm_key,
    render_config_toml,
)
from p2p.file_safety import UnsafeFileError
from p2p.runtime import AdminError, AdminHandler, AdminServer, admin_socket_path, serve_admin

# p2p.runtime.checkpoint imports torch: loaded on first use so `p2p status` starts fast.
_LAZY_CHECKPOINT = ("CheckpointCorrupt", "CheckpointError", "CheckpointStore", "DataDirError", "NodeState",
                    "PeerRecord", "PushSumRecord", "atomic_write_bytes",
                    "check_data_dir_writable")
# the Python API (docs/guide/api.md) imports the node, so torch: loaded on first use too
_LAZY_API = ("Node", "build_node", "node_config", "run_node")

if TYPE_CHECKING:
    from p2p.api import build_node, node_config, run_node
    from p2p.runtime.node import Node


def __getattr__(name: str) -> object:
    if name in _LAZY_CHECKPOINT:
        from p2p.runtime import checkpoint

        return getattr(checkpoint, name)
    if name in _LAZY_API:
        from p2p import api
        from p2p.runtime import node

        return getattr(api, name) if hasattr(api, name) else getattr(node, name)
    raise AttributeError(f"module 'p2p' has no attribute {name!r}")


# Extends (not replaces) any __all__ defined above by the wire/transport modules.
__all__ = [
    *globals().get("__all__", []),
    "AdminClient", "AdminClientError", "AdminError", "AdminHandler", "AdminServer",
    "AdminSocketUntrusted", "UnsafeFileError",
    "ConfigError", "HostPort", "NodeConfig", "SwarmKeyError",
    "admin_socket_path", "load_config", "load_swarm_key", "render_config_toml",
    "serve_admin", *_LAZY_CHECKPOINT, "Node", "build_node", "node_config", "run_node",
]
# --- end operator-facing API --------------------------------------------------
