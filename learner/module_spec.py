"""Declarations of partial models over a user's own ``nn.Module`` (no torch here).

A model names what it holds two ways, usable together (DESIGN 3.5):

- ``params``: shell-style globs over the dotted names of parameters and
  floating-point buffers (``"features.*"``; ``*`` crosses dots);
- ``units``: output units (neurons of ``Linear``, channels of ``Conv1d/2d``) found
  by tracing the module: one number for every layer (a fraction in (0, 1) or a
  count; the output layer is then held whole by a model without dependencies
  and not at all by one with), or a table ``layer glob -> fraction or count``.

``buffers``: ``"follow"`` (a buffer such as BatchNorm's running statistics goes
with its module's parameters) or ``"local"`` (this model's buffers are kept
apart). :mod:`learner.modules` resolves the declarations against the module.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from learner.spec import DECLARED_KINDS, LOCAL_MODEL, SpecError, validate_model_name

__all__ = ["BUFFER_RULES", "ModuleModelSpec", "UnitAmount"]

#: What ``buffers`` accepts.
BUFFER_RULES = ("follow", "local")

#: A fraction (float in (0, 1]) or a count (int >= 1) of a layer's output units.
UnitAmount = float | int

_UNITS_FORM = ('a fraction in (0, 1] or a count >= 1 of every layer\'s output units, or a '
               'table of layer globs, e.g. {"features.*" = 0.8, "head" = 1.0}')


def _amount(value: object, what: str, model: str) -> UnitAmount:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(f"{what}: {value!r} is not a number; expected {_UNITS_FORM}",
                        field="units", model=model)
    if isinstance(value, float):
        if not (math.isfinite(value) and 0.0 < value <= 1.0):
            raise SpecError(f"{what}: fraction {value!r} is outside (0, 1]; expected "
                            f"{_UNITS_FORM}", field="units", model=model)
        return value
    if value < 1:
        raise SpecError(f"{what}: count {value} is below 1; expected {_UNITS_FORM}",
                        field="units", model=model)
    return value


@dataclass(frozen=True)
class ModuleModelSpec:
    """A partial model of a module: parameter globs and/or unit amounts, dependencies.

    ``units`` is None (no unit split), one amount, or ``((layer_glob, amount), ...)``.
    """

    name: str
    params: tuple[str, ...] = ()
    units: UnitAmount | tuple[tuple[str, UnitAmount], ...] | None = None
    depends_on: tuple[str, ...] = ()
    kind: str | None = None
    buffers: str = "follow"

    def __post_init__(self) -> None:
        validate_model_name(self.name)
        name = self.name
        what = f"partial model {name!r}"
        if isinstance(self.params, str):
            raise SpecError(f"{what}: params must be a list of globs, not the string "
                            f"{self.params!r}", field="params", model=name)
        params = tuple(self.params)
        for glob in params:
            if not isinstance(glob, str) or not glob.strip():
                raise SpecError(f"{what}: params entry {glob!r} is not a glob such as "
                                '"features.*"', field="params", model=name)
        dupes = sorted({g for g in params if params.count(g) > 1})
        if dupes:
            raise SpecError(f"{what}: params lists {dupes[0]!r} twice", field="params",
                            model=name)
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "units", self._units(what))
        if not params and self.units is None:
            raise SpecError(f"{what}: holds nothing; give params (globs over parameter names) "
                            "and/or units (a share of each layer's output units)",
                            field="params", model=name)
        if isinstance(self.depends_on, str):
            raise SpecError(f"{what}: depends_on must be a list of model names, not the string "
                            f"{self.depends_on!r}", field="depends_on", model=name)
        deps = tuple(self.depends_on)
        for d in deps:
            if not isinstance(d, str) or not d or d == LOCAL_MODEL:
                raise SpecError(f"{what}: dependency {d!r} is not a declared model's name",
                                field="depends_on", model=name)
        if len(set(deps)) != len(deps):
            raise SpecError(f"{what}: a dependency is listed twice", field="depends_on",
                            model=name)
        object.__setattr__(self, "depends_on", deps)
        if self.kind is not None and self.kind not in DECLARED_KINDS:
            raise SpecError(f"{what}: kind {self.kind!r} is unknown; expected one of "
                            f"{', '.join(DECLARED_KINDS)} (or leave it unset)", field="kind",
                            model=name)
        if self.buffers not in BUFFER_RULES:
            raise SpecError(f"{what}: buffers {self.buffers!r} is unknown; expected one of "
                            f"{', '.join(BUFFER_RULES)}", field="buffers", model=name)

    def _units(self, what: str) -> UnitAmount | tuple[tuple[str, UnitAmount], ...] | None:
        units = self.units
        if units is None:
            return None
        if isinstance(units, Mapping):
            units = tuple(units.items())
        if isinstance(units, tuple | list):
            table = []
            for entry in units:
                if (not isinstance(entry, tuple | list) or len(entry) != 2
                        or not isinstance(entry[0], str) or not entry[0].strip()):
                    raise SpecError(f"{what}: units entry {entry!r} is not (layer glob, amount);"
                                    f" expected {_UNITS_FORM}", field="units", model=self.name)
                table.append((entry[0], _amount(entry[1], f"{what}: units[{entry[0]!r}]",
                                                self.name)))
            if not table:
                raise SpecError(f"{what}: units table is empty; expected {_UNITS_FORM}",
                                field="units", model=self.name)
            return tuple(table)
        return _amount(units, f"{what}: units", self.name)

    def describe_units(self) -> str:
        """The units as written: ``0.8``, or ``features.*=0.8, head=1.0``; ``-`` for none."""
        if self.units is None:
            return "-"
        if isinstance(self.units, tuple):
            return ", ".join(f"{glob}={amount:g}" for glob, amount in self.units)
        return f"{self.units:g}"

    def as_json(self) -> dict[str, object]:
        """The declaration as a JSON-able mapping (fingerprints, training records)."""
        units: object = (None if self.units is None else
                         [[g, a] for g, a in self.units] if isinstance(self.units, tuple)
                         else self.units)
        return {"name": self.name, "params": list(self.params), "units": units,
                "depends_on": sorted(self.depends_on), "buffers": self.buffers}

    def __str__(self) -> str:
        held = []
        if self.params:
            held.append("params " + ", ".join(self.params))
        if self.units is not None:
            held.append("units " + self.describe_units())
        deps = f" <- {', '.join(self.depends_on)}" if self.depends_on else ""
        return f"{self.name} ({'; '.join(held)}){deps}"
