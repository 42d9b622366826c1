"""The operator surface: the ``p2p`` command, the admin client and table rendering."""

from p2p.cli.admin_client import AdminClient, AdminClientError, AdminSocketUntrusted
from p2p.cli.main import main

__all__ = ["AdminClient", "AdminClientError", "AdminSocketUntrusted", "main"]
