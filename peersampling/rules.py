"""The knobs of Sybil-resistant peer sampling (:class:`SybilRules`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SybilRules:
    """Turns on the Sybil-resistant rules of :class:`~peersampling.PeerSampler`.

    With rules, every view (main and per model) is a :class:`RankedView` of
    seeded min-wise samplers; a new entry is used only after its address
    answered a probe with that id; unsolicited descriptors (those arriving in
    other nodes' requests) are capped per source and per period.

    - ``unsolicited_per_source``: descriptors taken from one sender's requests
      per view and period (default ``l``, one request's worth);
    - ``unsolicited_per_period``: descriptors taken from all requests per view
      and period (default ``4 * l``); the rest are dropped and counted;
    - ``probes_per_period``: probes sent per period (all views together);
    - ``pushed_probes_per_period``: of those, how many may go to candidates
      learnt only from unsolicited requests (the rest go to what this node
      pulled: replies to its own requests);
    - ``reset_every``: every so many periods one slot of each view gets a new
      seed (Basalt's reset; default ``4 * c``, 0 = never);
    - ``max_candidates``: candidates waiting for a probe per view (default ``2 * c``).
    """

    unsolicited_per_source: int | None = None
    unsolicited_per_period: int | None = None
    probes_per_period: int = 2
    pushed_probes_per_period: int = 1
    reset_every: int | None = None
    max_candidates: int | None = None

    def __post_init__(self) -> None:
        for name in ("unsolicited_per_source", "unsolicited_per_period", "reset_every",
                     "max_candidates"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 0):
                raise ValueError(f"SybilRules.{name} must be None or an int >= 0, got {value!r}")
        if type(self.probes_per_period) is not int or self.probes_per_period < 1:
            raise ValueError(
                f"SybilRules.probes_per_period must be an int >= 1, got {self.probes_per_period!r}"
            )
        if (type(self.pushed_probes_per_period) is not int
                or not 0 <= self.pushed_probes_per_period <= self.probes_per_period):
            raise ValueError(
                "SybilRules.pushed_probes_per_period must be an int in 0..probes_per_period, "
                f"got {self.pushed_probes_per_period!r}"
            )
