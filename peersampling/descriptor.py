"""Node descriptors: what one node tells others about a peer.

A descriptor names a node (``node_id``, its Ed25519 public key on a real
network), where to reach it (``address``, ``"host:port"``), how old the
information is (``age``, in shuffle periods since the node itself issued it)
and which partial models it holds (``tags``: 32-byte sha256 fingerprints).

A node may sign its own descriptor (:mod:`peersampling.signed`): ``epoch``
orders the versions it issued (a higher epoch replaces a lower one) and
``signature`` is its Ed25519 signature over every field but ``age``, which
each hop changes. ``alternates`` are further addresses to try, in order, when
``address`` does not answer (a second relay, a LAN address tried last).
Addresses are ``host:port`` or relayed ``<relay>/circuit/<node id hex>``.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.address import HostPort, parse_dial_address
from common.tags import MAX_TAGS as MAX_TAGS  # the bound of the handshake too

from .address import AddressError
from .errors import InvalidDescriptor

#: A descriptor older than this many periods is treated as garbage, not as old.
MAX_AGE = 10_000
#: Fingerprints are sha256 digests.
TAG_LENGTH = 32
#: Node ids are Ed25519 public keys on the wire (32 bytes); simulations may use
#: shorter ones, so any length from 1 to this bound is accepted.
MAX_NODE_ID_LENGTH = 64
#: Epochs are unsigned 64-bit counters (a node may use wall-clock milliseconds).
MAX_EPOCH = 2**64 - 1
#: An Ed25519 signature; an unsigned descriptor has an empty one.
SIGNATURE_LENGTH = 64
#: Further addresses a descriptor may carry besides ``address``.
MAX_ALTERNATES = 4


@dataclass(frozen=True, slots=True)
class Descriptor:
    """What a node knows about one peer (immutable)."""

    node_id: bytes
    address: str  # "host:port"
    age: int = 0
    tags: frozenset[bytes] = frozenset()
    epoch: int = 0  # version number chosen by the node itself (signed)
    signature: bytes = b""  # over (node_id, address, tags, epoch, alternates); b"" = unsigned
    alternates: tuple[str, ...] = ()  # tried in order after ``address`` (signed)


def parse_address(address: object) -> tuple[str, int]:
    """Split ``"host:port"`` (or ``"[v6]:port"``) into its parts (rule: :mod:`.address`);
    for a relayed address, the relay's.

    Raises :class:`InvalidDescriptor` (field ``address``) when malformed.
    """
    try:
        parsed = parse_dial_address(address)
    except AddressError as exc:
        raise InvalidDescriptor("address", str(exc)) from None
    hop = parsed if isinstance(parsed, HostPort) else parsed.relay
    return hop.host, hop.port


# Addresses repeat endlessly in shuffles: remember the valid ones (errors are
# not cached, so a bad address is re-examined and re-reported every time). A
# plain set, emptied when full: a membership test costs a fraction of an
# lru_cache call, which reorders its list on every hit.
_GOOD_ADDRESSES: set[str] = set()
_MAX_GOOD_ADDRESSES = 1 << 16


def _check_address(address: str) -> None:
    """:func:`parse_address` for a str, remembering the valid ones."""
    if address in _GOOD_ADDRESSES:
        return
    parse_address(address)
    if len(_GOOD_ADDRESSES) >= _MAX_GOOD_ADDRESSES:
        _GOOD_ADDRESSES.clear()
    _GOOD_ADDRESSES.add(address)


_SIGNATURE_LENGTHS = (0, SIGNATURE_LENGTH)


def _good_tags(tags: frozenset[object], max_tags: int) -> bool:
    """Whether every tag is a fingerprint and there are not too many."""
    if len(tags) > max_tags:
        return False
    for tag in tags:
        if type(tag) is not bytes or len(tag) != TAG_LENGTH:
            return False
    return True


def validate_descriptor(
    descriptor: object, *, max_age: int = MAX_AGE, max_tags: int = MAX_TAGS
) -> Descriptor:
    """Check every field of ``descriptor`` and return it in canonical form.

    A decoder may hand over ``tags`` as a list/tuple/set; the returned copy
    always has a ``frozenset``. Raises :class:`InvalidDescriptor` naming the
    first bad field.
    """
    # Fast path: a Descriptor with every field of the right type and in range
    # (what every peer sends) passes here; anything else takes the checks
    # below, which name the first bad field.
    if type(descriptor) is Descriptor:
        node_id, age, tags = descriptor.node_id, descriptor.age, descriptor.tags
        epoch, signature = descriptor.epoch, descriptor.signature
        if (
            type(node_id) is bytes and 0 < len(node_id) <= MAX_NODE_ID_LENGTH
            and type(age) is int and 0 <= age <= max_age
            and type(tags) is frozenset and (not tags or _good_tags(tags, max_tags))
            and type(epoch) is int and 0 <= epoch <= MAX_EPOCH
            and type(signature) is bytes and len(signature) in _SIGNATURE_LENGTHS
            and type(descriptor.address) is str
            and descriptor.alternates == ()
        ):
            if descriptor.address not in _GOOD_ADDRESSES:
                _check_address(descriptor.address)
            return descriptor
    if not isinstance(descriptor, Descriptor):
        raise InvalidDescriptor(
            "descriptor", f"expected a Descriptor, got {type(descriptor).__name__}"
        )
    node_id = descriptor.node_id
    if type(node_id) is not bytes:
        raise InvalidDescriptor("node_id", f"expected bytes, got {type(node_id).__name__}")
    if not 1 <= len(node_id) <= MAX_NODE_ID_LENGTH:
        raise InvalidDescriptor(
            "node_id", f"length must be 1-{MAX_NODE_ID_LENGTH} bytes, got {len(node_id)}"
        )
    address = descriptor.address
    if type(address) is not str:
        raise InvalidDescriptor(
            "address", f"expected str 'host:port', got {type(address).__name__}"
        )
    _check_address(address)
    age = descriptor.age
    if type(age) is not int:
        raise InvalidDescriptor("age", f"expected int, got {type(age).__name__}")
    if not 0 <= age <= max_age:
        raise InvalidDescriptor("age", f"must be in 0..{max_age}, got {age}")
    tags = descriptor.tags
    if not isinstance(tags, frozenset | set | list | tuple):
        raise InvalidDescriptor("tags", f"expected a set of bytes, got {type(tags).__name__}")
    if len(tags) > max_tags:
        raise InvalidDescriptor("tags", f"at most {max_tags} tags, got {len(tags)}")
    for tag in tags:
        if type(tag) is not bytes or len(tag) != TAG_LENGTH:
            raise InvalidDescriptor(
                "tags", f"each tag must be {TAG_LENGTH} bytes (sha256), got {tag!r:.80}"
            )
    epoch = descriptor.epoch
    if type(epoch) is not int or not 0 <= epoch <= MAX_EPOCH:
        raise InvalidDescriptor("epoch", f"expected an int in 0..2**64-1, got {epoch!r:.40}")
    signature = descriptor.signature
    if type(signature) is not bytes or len(signature) not in (0, SIGNATURE_LENGTH):
        raise InvalidDescriptor(
            "signature", f"expected b'' or {SIGNATURE_LENGTH} bytes, got {signature!r:.40}"
        )
    alternates = descriptor.alternates
    if not isinstance(alternates, tuple | list) or len(alternates) > MAX_ALTERNATES:
        raise InvalidDescriptor("alternates", f"expected at most {MAX_ALTERNATES} addresses, got "
                                f"{alternates!r:.80}")
    for alternate in alternates:
        if type(alternate) is not str:
            raise InvalidDescriptor("alternates", f"expected str addresses, got {alternate!r:.40}")
        try:
            _check_address(alternate)
        except InvalidDescriptor as exc:
            raise InvalidDescriptor("alternates", exc.problem) from None
    if type(tags) is not frozenset or type(alternates) is not tuple:
        return Descriptor(node_id, descriptor.address, age, frozenset(tags), epoch, signature,
                          tuple(alternates))
    return descriptor


# The slots' own setters: a frozen dataclass's __init__ goes through
# object.__setattr__ by name, several times slower, and views rebuild a
# descriptor (new age) for every entry they hand out.
_new_object = object.__new__
_set_node_id = Descriptor.__dict__["node_id"].__set__
_set_address = Descriptor.__dict__["address"].__set__
_set_age = Descriptor.__dict__["age"].__set__
_set_tags = Descriptor.__dict__["tags"].__set__
_set_epoch = Descriptor.__dict__["epoch"].__set__
_set_signature = Descriptor.__dict__["signature"].__set__
_set_alternates = Descriptor.__dict__["alternates"].__set__


def with_age(descriptor: Descriptor, age: int) -> Descriptor:
    """Return ``descriptor`` with ``age`` replaced (cheaper than dataclasses.replace)."""
    if descriptor.age == age:
        return descriptor
    copy = _new_object(Descriptor)
    _set_node_id(copy, descriptor.node_id)
    _set_address(copy, descriptor.address)
    _set_age(copy, age)
    _set_tags(copy, descriptor.tags)
    _set_epoch(copy, descriptor.epoch)
    _set_signature(copy, descriptor.signature)
    _set_alternates(copy, descriptor.alternates)
    return copy
