"""Network addresses ``host:port`` (:mod:`common.address`), under peersampling's name."""

from common.address import MAX_HOST_LENGTH, AddressError, HostPort, parse_host_port

__all__ = ["MAX_HOST_LENGTH", "AddressError", "HostPort", "parse_host_port"]
