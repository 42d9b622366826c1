"""The node runtime: the daemon's nursery, its state, checkpoints and admin server.

Importing this package does not load torch; :mod:`p2p.runtime.node` and
:mod:`p2p.runtime.checkpoint` do, and are imported on first use.
"""

from p2p.runtime.admin_server import (
    AdminError,
    AdminHandler,
    AdminServer,
    admin_socket_path,
    serve_admin,
)
from p2p.runtime.entropy import Entropy
from p2p.runtime.protocol import NODE_MESSAGES, register_node_messages

__all__ = [
    "NODE_MESSAGES", "AdminError", "AdminHandler", "AdminServer", "Entropy", "admin_socket_path",
    "register_node_messages", "serve_admin",
]
