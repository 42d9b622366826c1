"""Churn for simulations: when which node crashes, leaves, joins or restarts.

A churn script is a text file, one event a line, ``#`` starting a comment::

    # seconds  action   node
    5          crash    3        # killed: no final checkpoint
    12         restart  3        # back on its data directory: resumes its checkpoint
    8          leave    5        # stops cleanly (final checkpoint) and stays away
    20         join     7        # node 7 starts only now (it is absent until then)

Times are simulated seconds from the start. :func:`random_churn` draws a
crash and a restart for a fraction of the nodes instead, timed from the moment
training began (every node that is up had finished a round): counted from the start,
its window fell in the swarm's start-up (peer wait, first contacts), before
any node had trained or written a checkpoint.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CHURN_ACTIONS", "ChurnEvent", "load_churn_script", "parse_churn_script", "random_churn"]

CHURN_ACTIONS = ("crash", "leave", "join", "restart")


@dataclass(frozen=True, order=True)
class ChurnEvent:
    """At ``time`` (simulated seconds), ``action`` happens to node ``node``.

    ``time`` counts from the start of the run, or with ``from_training`` from
    the moment training began (every node that is up had finished a round).
    """

    time: float
    node: int
    action: str
    from_training: bool = False

    def __post_init__(self) -> None:
        if self.action not in CHURN_ACTIONS:
            raise ValueError(f"churn action {self.action!r}: expected one of "
                             f"{', '.join(CHURN_ACTIONS)}")
        if not self.time >= 0:
            raise ValueError(f"churn time must be >= 0 seconds, got {self.time!r}")
        if self.node < 0:
            raise ValueError(f"churn node must be >= 0, got {self.node}")


def parse_churn_script(text: str, nodes: int, *, where: str = "churn script") -> list[ChurnEvent]:
    """The events of a script (see the module doc), sorted by time.

    Raises ValueError naming the line when one is not ``TIME ACTION NODE``,
    names a node outside ``0..nodes-1``, or an unknown action.
    """
    events = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) != 3:
            raise ValueError(f"{where}:{number}: expected TIME ACTION NODE, got {raw.strip()!r}")
        try:
            time, node = float(fields[0]), int(fields[2])
        except ValueError:
            raise ValueError(f"{where}:{number}: TIME must be a number and NODE an integer, "
                             f"got {raw.strip()!r}") from None
        if not 0 <= node < nodes:
            raise ValueError(f"{where}:{number}: node {node} is not one of the {nodes} nodes")
        try:
            events.append(ChurnEvent(time, node, fields[1]))
        except ValueError as exc:
            raise ValueError(f"{where}:{number}: {exc}") from None
    return sorted(events)


def load_churn_script(path: Path, nodes: int) -> list[ChurnEvent]:
    """:func:`parse_churn_script` of the file at ``path``."""
    return parse_churn_script(path.read_text(), nodes, where=str(path))


def random_churn(nodes: int, fraction: float, duration: float, *, seed: int,
                 downtime: tuple[float, float] = (0.1, 0.3)) -> list[ChurnEvent]:
    """``fraction`` of the nodes (node 0, the bootstrap, excepted) each crash once at a
    uniform time in the first half of ``duration`` and restart from their checkpoint
    ``downtime`` (a fraction of ``duration``, uniform between the two) later; the
    times count from the moment training began (``from_training``)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"churn fraction must be in [0, 1], got {fraction!r}")
    if not duration > 0:
        raise ValueError(f"churn duration must be > 0 seconds, got {duration!r}")
    rng = random.Random(seed)
    count = round(fraction * (nodes - 1))
    events = []
    for node in sorted(rng.sample(range(1, nodes), count)):
        crash = rng.uniform(0.05, 0.5) * duration
        back = crash + rng.uniform(*downtime) * duration
        events += [ChurnEvent(crash, node, "crash", from_training=True),
                   ChurnEvent(back, node, "restart", from_training=True)]
    return sorted(events)
