"""The garbage collector during a large simulation: fewer, cheaper collections.

A simulation of 1,000 nodes holds about half a million tracked objects once
its nodes are built (models, data, views, connections), and CPython's
collector, left at its defaults, walks all of them at every full collection:
measured at 300 nodes (docs/guide/simulation.md, "Cost at scale"), the collector
took about a quarter of the start-up's CPU time, mostly in full collections.
:class:`CollectorTuning` does two things while a simulation runs, and undoes
them after:

- :meth:`~CollectorTuning.freeze`, called once every node is up, moves what
  exists then to the collector's permanent generation (:func:`gc.freeze`): the
  nodes' long-lived state is no longer walked by every full collection. It is
  still freed by reference counting; only reference cycles among those
  objects that become garbage later (a crashed node's, under churn) stay
  until the end of the run.
- the thresholds (``threshold``, default :data:`SIMULATION_GC_THRESHOLD`)
  collect the youngest generation every 10,000 allocations instead of 700, and
  the older ones less often: the same work in fewer, larger passes.

Nothing here changes what the nodes compute; daemons never use it.
"""

from __future__ import annotations

import gc
from types import TracebackType

__all__ = ["SIMULATION_GC_THRESHOLD", "CollectorTuning"]

#: gc thresholds during a simulation (CPython's defaults: 700, 10, 10).
SIMULATION_GC_THRESHOLD = (10_000, 20, 20)


class CollectorTuning:
    """Context manager: the simulation's collector thresholds inside, and :meth:`freeze`.

    On exit the previous thresholds are restored and frozen objects are given
    back to the collector (:func:`gc.unfreeze`). ``frozen`` counts the objects
    :meth:`freeze` moved (0 until it is called).
    """

    def __init__(self, threshold: tuple[int, int, int] = SIMULATION_GC_THRESHOLD) -> None:
        if len(threshold) != 3 or any(t < 1 for t in threshold):
            raise ValueError(f"gc threshold: expected three numbers >= 1, got {threshold!r}")
        self.threshold = threshold
        self.frozen = 0
        self._previous: tuple[int, int, int] | None = None

    def __enter__(self) -> CollectorTuning:
        self._previous = gc.get_threshold()
        gc.set_threshold(*self.threshold)
        return self

    def freeze(self) -> None:
        """Collect once, then move every object left to the permanent generation."""
        gc.collect()
        before = gc.get_freeze_count()
        gc.freeze()
        self.frozen += gc.get_freeze_count() - before

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._previous is not None:
            gc.set_threshold(*self._previous)
            self._previous = None
        gc.unfreeze()

    def as_dict(self) -> dict[str, object]:
        """What the simulation's JSON says about it."""
        return {"threshold": list(self.threshold), "frozen_objects": self.frozen,
                "note": "gc.freeze() once every node is up (their long-lived objects are not "
                        "walked by later full collections) and larger thresholds; nothing the "
                        "nodes compute changes"}
