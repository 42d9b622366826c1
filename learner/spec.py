"""Declarations of networks and partial models in the papers' notation.

A network is written ``64=48=32=10`` (input, hidden..., output layer sizes) and
a partial model ``64-40-24-10`` (how many neurons of each layer it holds).
These are plain, validated value objects; :mod:`learner.layout` turns them into
neuron assignments and parameter ownership.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from learner.errors import FieldError

__all__ = [
    "ACTIVATIONS",
    "DECLARED_KINDS",
    "LOCAL_MODEL",
    "NetworkSpec",
    "PartialModelSpec",
    "SpecError",
    "parse_counts",
    "parse_sizes",
    "validate_model_name",
]

#: Activation functions a network may declare.
ACTIVATIONS: tuple[str, ...] = ("relu", "sigmoid", "tanh")

#: Name of the implicit local model of every node (reserved).
LOCAL_MODEL = "local"

#: Values accepted for an explicit ``kind`` on a declared (shared) model.
DECLARED_KINDS: tuple[str, ...] = ("global", "semi-local")

_NETWORK_FORM = 'layer sizes joined by "=", e.g. "64=48=32=10" (at least 2 layers, each >= 1)'
_COUNTS_FORM = 'neuron counts joined by "-", one per layer, e.g. "64-40-24-10" or "0-8-4-0"'
_NAME_FORM = "a letter or '_' followed by letters, digits, '_', '.' or '-' (at most 64 chars)"
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")


class SpecError(FieldError):
    """A network or partial-model declaration is malformed or inconsistent.

    The message names the offending network/model/key and the expected form.
    ``field`` is the attribute at fault (``"sizes"``, ``"activation"``,
    ``"name"``, ``"counts"``, ``"depends_on"``, ``"kind"``; None when the
    models do not fit together), ``model`` the partial model's name and
    ``index`` its position in the list given to :class:`~learner.model_graph.ModelGraph`
    or :class:`~learner.layout.ModelLayout`, when known.
    """

    def __init__(self, detail: str, *, field: str | None = None, model: str | None = None,
                 index: int | None = None) -> None:
        super().__init__(detail, field=field)
        self.model = model
        self.index = index


def _parse_int_list(text: str, sep: str, *, what: str, form: str, field: str,
                    model: str | None = None) -> tuple[int, ...]:
    if not isinstance(text, str):
        raise SpecError(f"{what}: expected a string of {form}, got {type(text).__name__}",
                        field=field, model=model)
    parts = text.strip().split(sep)
    values: list[int] = []
    for part in parts:
        part = part.strip()
        if not part.isdigit():
            raise SpecError(f"{what}: cannot parse {text!r}: {part!r} is not a whole number; "
                            f"expected {form}", field=field, model=model)
        values.append(int(part))
    return tuple(values)


def _as_int_tuple(values: Iterable[object], *, what: str, form: str, field: str,
                  model: str | None = None) -> tuple[int, ...]:
    out: list[int] = []
    for v in values:
        # bool is an int subclass but never a sensible layer size
        if isinstance(v, bool) or not isinstance(v, int):
            raise SpecError(f"{what}: {v!r} is not an integer; expected {form}", field=field,
                            model=model)
        out.append(int(v))
    return tuple(out)


def parse_sizes(text: str) -> tuple[int, ...]:
    """Read the layer notation ``"64=48=32=10"`` (checked as :class:`NetworkSpec` does)."""
    return NetworkSpec.parse(text).sizes


def parse_counts(text: str, *, model: str | None = None) -> tuple[int, ...]:
    """Read a partial model's neuron counts ``"64-40-24-10"`` (form only; the counts
    are checked by :class:`PartialModelSpec`)."""
    what = "partial model" if model is None else f"partial model {model!r}"
    return _parse_int_list(text, "-", what=what, form=_COUNTS_FORM, field="counts", model=model)


def validate_model_name(name: object, *, what: str = "partial model") -> str:
    """Return ``name`` if it is a valid model name, else raise :class:`SpecError`."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise SpecError(f"{what} name {name!r} is invalid: not a valid model name; expected "
                        f"{_NAME_FORM}", field="name")
    if name == LOCAL_MODEL:
        raise SpecError(f"{what} name {name!r} is reserved for the implicit local model (the "
                        "neurons no declared model covers); choose another name", field="name")
    return name


@dataclass(frozen=True)
class NetworkSpec:
    """A multi-layer perceptron: layer sizes from input to output, and its activation.

    The activation is applied after every hidden layer; the output layer gives
    logits.
    """

    sizes: tuple[int, ...]
    activation: str = "relu"

    def __post_init__(self) -> None:
        sizes = _as_int_tuple(self.sizes, what="network", form=_NETWORK_FORM, field="sizes")
        if len(sizes) < 2:
            raise SpecError(f"network: {len(sizes)} layer(s) given; expected {_NETWORK_FORM}",
                            field="sizes")
        for i, s in enumerate(sizes):
            if s < 1:
                raise SpecError(f"network: layer {i} has size {s}; expected {_NETWORK_FORM}",
                                field="sizes")
        if self.activation not in ACTIVATIONS:
            raise SpecError(f"network activation {self.activation!r} is unknown; expected one "
                            f"of {', '.join(ACTIVATIONS)}", field="activation")
        object.__setattr__(self, "sizes", sizes)

    @classmethod
    def parse(cls, text: str, activation: str = "relu") -> NetworkSpec:
        """Parse ``"64=48=32=10"``."""
        return cls(_parse_int_list(text, "=", what="network", form=_NETWORK_FORM,
                                   field="sizes"), activation)

    @property
    def num_layers(self) -> int:
        """Number of layers including input and output."""
        return len(self.sizes)

    def notation(self) -> str:
        """The papers' notation, e.g. ``64=48=32=10``."""
        return "=".join(str(s) for s in self.sizes)

    def __str__(self) -> str:
        return f"{self.notation()} ({self.activation})"


@dataclass(frozen=True)
class PartialModelSpec:
    """A partial model: its name, its neurons per layer, and the models it depends on.

    ``counts`` are the model's *own* neurons (not those of its dependencies).
    ``kind`` optionally overrides the global/semi-local heuristic of
    :meth:`learner.layout.ModelLayout.model_kind`.
    """

    name: str
    counts: tuple[int, ...]
    depends_on: tuple[str, ...] = ()
    kind: str | None = None

    def __post_init__(self) -> None:
        validate_model_name(self.name)
        name = self.name
        what = f"partial model {name!r}"

        def error(detail: str, field: str) -> SpecError:
            return SpecError(f"{what}: {detail}", field=field, model=name)

        if isinstance(self.counts, str):
            raise error("counts given as a string; use PartialModelSpec.parse or a tuple of "
                        f"integers ({_COUNTS_FORM})", "counts")
        counts = _as_int_tuple(self.counts, what=what, form=_COUNTS_FORM, field="counts",
                               model=name)
        if len(counts) < 2:
            raise error(f"{len(counts)} count(s) given; expected {_COUNTS_FORM}", "counts")
        if any(c < 0 for c in counts):
            raise error(f"negative neuron count in {counts}; expected {_COUNTS_FORM}", "counts")
        if sum(counts) == 0:
            raise error(f"holds no neuron at all; expected {_COUNTS_FORM} with at least one "
                        "non-zero count", "counts")
        if isinstance(self.depends_on, str):
            raise error("depends_on must be a list of model names, not the string "
                        f"{self.depends_on!r}", "depends_on")
        deps = tuple(self.depends_on)
        for d in deps:
            if not isinstance(d, str) or not d:
                raise error(f"dependency {d!r} is not a model name; expected {_NAME_FORM}",
                            "depends_on")
            if d == LOCAL_MODEL:
                raise error(f"cannot depend on the implicit {LOCAL_MODEL!r} model", "depends_on")
        dupes = sorted({d for d in deps if deps.count(d) > 1})
        if dupes:
            raise error(f"dependency listed twice: {', '.join(dupes)}", "depends_on")
        if self.kind is not None and self.kind not in DECLARED_KINDS:
            raise error(f"kind {self.kind!r} is unknown; expected one of "
                        f"{', '.join(DECLARED_KINDS)} (or leave it unset)", "kind")
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "depends_on", deps)

    @classmethod
    def parse(
        cls,
        name: str,
        counts: str,
        depends_on: Sequence[str] = (),
        kind: str | None = None,
    ) -> PartialModelSpec:
        """Parse ``PartialModelSpec.parse("A", "0-8-4-0", depends_on=["G"])``."""
        validate_model_name(name)
        parsed = parse_counts(counts, model=name)
        if isinstance(depends_on, str):
            raise SpecError(f"partial model {name!r}: depends_on must be a list of model names, "
                            f"not the string {depends_on!r}", field="depends_on", model=name)
        return cls(name, parsed, tuple(depends_on), kind)

    def notation(self) -> str:
        """The papers' notation, e.g. ``64-40-24-10``."""
        return "-".join(str(c) for c in self.counts)

    def __str__(self) -> str:
        deps = f" <- {', '.join(self.depends_on)}" if self.depends_on else ""
        return f"{self.name} {self.notation()}{deps}"
