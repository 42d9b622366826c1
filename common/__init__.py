"""Small generic pieces every layer may use: network addresses, rate-limited log lines.

It imports nothing of the project, so the wire (:mod:`p2p.wire`) and the sans-IO
packages (:mod:`gossip`, :mod:`peersampling`) share it without depending on each
other (the layering rule, tests/test_layering.py).
"""

from common.address import MAX_HOST_LENGTH, AddressError, HostPort, parse_host_port
from common.log_limit import DEFAULT_LOG_INTERVAL, OTHERS, LogLimiter
from common.tags import MAX_TAGS

__all__ = [
    "DEFAULT_LOG_INTERVAL",
    "MAX_HOST_LENGTH",
    "MAX_TAGS",
    "OTHERS",
    "AddressError",
    "HostPort",
    "LogLimiter",
    "parse_host_port",
]
