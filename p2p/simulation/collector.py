"""The garbage collector during a large simulation: fewer, cheaper collections.

A simulation of 1,000 nodes holds about half a million tracked objects, which
CPython's collector at its defaults walks at every full collection.
:class:`CollectorTuning` changes two things while a simulation runs, and undoes
them after: :meth:`~CollectorTuning.freeze` moves what exists once every node
is up to the permanent generation (:func:`gc.freeze`; still freed by reference
counting, only cycles among it wait until the end of the run), and the
thresholds (``threshold``, default :data:`SIMULATION_GC_THRESHOLD`) collect
less often, in larger passes. Nothing the nodes compute changes; daemons never
use it.

See docs/guide/simulation.md.
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
