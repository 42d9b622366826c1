"""Partial models over any ``nn.Module`` (DESIGN 3.5; docs/guide/own-model.md).

:mod:`.layout` (numpy) decides who owns each tensor and the canonical vectors;
:mod:`.trace` finds a module's unit structure with ``torch.fx``; :mod:`.partial`
moves vectors in and out of the module; :mod:`.build` makes the module from the
user's factory. Only :mod:`.layout` is imported here: the rest needs torch.
"""

from learner.modules.layout import (
    INPUT,
    Inventory,
    ModuleLayout,
    Piece,
    TensorInfo,
    UnitGraph,
    UnitLayer,
)

__all__ = ["INPUT", "Inventory", "ModuleLayout", "Piece", "TensorInfo", "UnitGraph", "UnitLayer"]
