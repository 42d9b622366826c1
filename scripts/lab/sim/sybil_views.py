"""A simulated Sybil adversary for :class:`~peersampling.Simulator` (:func:`add_sybils`).

One adversary controls ``fakes`` identities (valid keys, live addresses). It
knows every honest address and spends a budget of shuffle requests per period
equal to ``share`` times the honest shuffle traffic (one main-view shuffle per
honest node and period): each request comes from a random fake and offers
``l - 1`` other fakes, all freshly issued (age 0) and signed. Fakes answer
every request, probes and holder lookups included, with their own descriptor
plus ``l - 1`` other fakes, and never pass on an honest descriptor. With
``tags`` the fakes also claim to hold those partial models.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable, Sequence

from peersampling.descriptor import Descriptor
from peersampling.messages import ShuffleReply, ShuffleRequest
from peersampling.signed import Signer, sign_descriptor, simulated_signer
from peersampling.simulator import Simulator


def fake_address(index: int) -> str:
    return f"fake{index}:7400"


def fake_node_id(index: int) -> bytes:
    return hashlib.sha256(b"sim-fake-%d" % index).digest()[:16]


class SybilAttack:
    """The adversary's identities and behaviour (deterministic given ``rng``).

    ``signer(node_id)`` signs the fakes' descriptors (``None``: unsigned, for
    runs where signatures are not checked).
    """

    def __init__(
        self,
        fakes: int,
        share: float,
        *,
        l: int,  # noqa: E741 - the protocol's name
        rng: random.Random,
        signer: Callable[[bytes], Signer] | None = None,
        tags: frozenset[bytes] = frozenset(),
    ) -> None:
        if fakes < 1:
            raise ValueError(f"fakes must be >= 1, got {fakes}")
        if share < 0:
            raise ValueError(f"share must be >= 0, got {share}")
        self.share = share
        self.l = l
        self.rng = rng
        self.descriptors: dict[str, Descriptor] = {}
        for i in range(fakes):
            d = Descriptor(fake_node_id(i), fake_address(i), 0, tags)
            if signer is not None:
                d = sign_descriptor(d, signer(d.node_id))
            self.descriptors[d.address] = d
        self._addresses = list(self.descriptors)
        self.ids = frozenset(d.node_id for d in self.descriptors.values())
        self.requests_sent = 0
        self.requests_answered = 0

    def is_fake(self, address: str) -> bool:
        return address in self.descriptors

    def _others(self, me: str | None, k: int) -> list[Descriptor]:
        picks = self.rng.sample(self._addresses, min(k + 1, len(self._addresses)))
        return [self.descriptors[a] for a in picks if a != me][:k]

    def answer(self, address: str, req: ShuffleRequest) -> ShuffleReply:
        """What the fake at ``address`` answers: itself and other fakes."""
        self.requests_answered += 1
        me = self.descriptors[address]
        return ShuffleReply((me, *self._others(address, self.l - 1)), req.view)

    def injections(self, honest: Sequence[str]) -> list[tuple[str, ShuffleRequest]]:
        """This period's unsolicited requests: ``share * len(honest)`` (rounded at random)."""
        budget = self.share * len(honest)
        count = int(budget) + (self.rng.random() < budget - int(budget))
        out = []
        for _ in range(count):
            sender = self.rng.choice(self._addresses)
            target = honest[self.rng.randrange(len(honest))]
            entries = tuple(self._others(sender, self.l - 1))
            out.append((target, ShuffleRequest(self.descriptors[sender], entries, None)))
        self.requests_sent += count
        return out


def add_sybils(sim: Simulator, fakes: int, share: float, tags: Iterable[bytes] = ()
               ) -> SybilAttack:
    """Give ``sim`` one adversary with ``fakes`` identities injecting at ``share`` of honest traffic.

    With ``tags`` the fakes claim to hold those partial models too.
    """
    attack = SybilAttack(
        fakes, share, l=sim.l, rng=random.Random(sim.rng.getrandbits(64)),
        signer=simulated_signer if sim.signatures else None, tags=frozenset(tags),
    )
    sim.set_adversary(attack)
    return attack
