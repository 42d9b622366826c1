"""trio's scheduler made to repeat itself, for a simulation that must.

trio runs the tasks that became runnable together in an order of its own: a
batch reversed at random (its module-level ``random.Random``), tasks woken by
deadlines of one instant in the order of their cancel scopes' memory
addresses. Under a virtual clock many tasks wake at one instant, so two runs of
one seed interleave them differently. :func:`seeded_scheduler` turns on what
trio does under Hypothesis (each batch sorted by task creation, then shuffled by
that generator) and seeds the generator; both are private attributes of trio,
checked here: without them a warning says that runs may differ. See
docs/guide/simulation.md ("Reproducible runs").
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Iterator

__all__ = ["seeded_scheduler"]

logger = logging.getLogger(__name__)

_FLAG = "_ALLOW_DETERMINISTIC_SCHEDULING"


@contextlib.contextmanager
def seeded_scheduler(seed: int) -> Iterator[bool]:
    """Within the block, trio schedules a batch of runnable tasks in an order drawn from
    ``seed`` (restored after); yields False, having logged why, if this trio has no such
    hook."""
    try:
        from trio._core import _run
    except ImportError:  # pragma: no cover - a trio without the module
        _run = None  # type: ignore[assignment]
    rng = getattr(_run, "_r", None)
    if _run is None or not isinstance(rng, random.Random) or not hasattr(_run, _FLAG):
        logger.warning("this trio has no seedable scheduler (trio._core._run._r and %s): "
                       "runs of one seed may interleave their tasks differently", _FLAG)
        yield False
        return
    was, state = getattr(_run, _FLAG), rng.getstate()
    setattr(_run, _FLAG, True)
    rng.seed(seed)
    try:
        yield True
    finally:
        setattr(_run, _FLAG, was)
        rng.setstate(state)
