"""The bound on the partial models one node advertises: in its handshake (the wire's
HELLO) as in its peer-sampling descriptors, one number for both."""

__all__ = ["MAX_TAGS"]

#: Upper bound on the number of partial models one node may advertise.
MAX_TAGS = 256
