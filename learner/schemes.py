"""Builders for the papers' averaging schemes (which partial models each node declares).

- `averaging_level(network, level)`: one global model holding `level` % of every
  hidden layer, plus the whole input and output layers (level 0: nothing is
  shared, every node learns alone; level 100: one global model, as in
  federated averaging).
- `semi_local_scheme(network, scheme, group)`: the schemes of the semi-local
  experiment, for a node of permutation group `group`.
"""

from __future__ import annotations

from learner.spec import NetworkSpec, PartialModelSpec, SpecError

__all__ = [
    "GLOBAL_MODEL",
    "SEMI_LOCAL_SCHEMES",
    "averaging_level",
    "hidden_share",
    "semi_local_scheme",
]

#: Name of the global model built by the scheme builders.
GLOBAL_MODEL = "global"

#: Schemes of the semi-local experiment:
#: none: local learning only; full: one global model; group: one full model per
#: permutation group; global80: 80 % global (rest local); global80+semi20: 80 %
#: global plus the remaining 20 % of hidden neurons as a semi-local model per group,
#: depending on the global model; global80+semi20-nodep: the same without the
#: dependency (weights between the two models stay local).
SEMI_LOCAL_SCHEMES: tuple[str, ...] = (
    "none",
    "full",
    "group",
    "global80",
    "global80+semi20",
    "global80+semi20-nodep",
)


def hidden_share(size: int, level_percent: float) -> int:
    """Neurons of a hidden layer of `size` neurons that `level_percent` % of it makes."""
    return max(0, min(size, int(round(size * level_percent / 100.0))))


def _check_level(level_percent: float, what: str) -> None:
    if not 0.0 <= level_percent <= 100.0:
        raise SpecError(f"{what}: expected a percentage in [0, 100], got {level_percent}")


def averaging_level(
    network: NetworkSpec, level_percent: float, *, name: str = GLOBAL_MODEL
) -> list[PartialModelSpec]:
    """The papers' "averaging level": a global model with `level_percent` % of each hidden
    layer and the whole input and output layers; no model at all for level 0."""
    _check_level(level_percent, "averaging level")
    if level_percent == 0:
        return []
    sizes = network.sizes
    counts = (sizes[0], *(hidden_share(s, level_percent) for s in sizes[1:-1]), sizes[-1])
    return [PartialModelSpec(name, counts, kind="global")]


def semi_local_scheme(
    network: NetworkSpec,
    scheme: str,
    group: int,
    *,
    global_level: float = 80.0,
) -> list[PartialModelSpec]:
    """Partial models of a node in permutation group `group` under one of `SEMI_LOCAL_SCHEMES`.

    The percentages in the scheme names are the defaults; `global_level` changes
    the global share (the semi-local model then takes the remaining hidden neurons).
    """
    if scheme not in SEMI_LOCAL_SCHEMES:
        raise SpecError(f"scheme {scheme!r} is unknown; expected one of {', '.join(SEMI_LOCAL_SCHEMES)}")
    if group < 0:
        raise SpecError(f"scheme {scheme!r}: group must be >= 0, got {group}")
    _check_level(global_level, "global level")
    sizes = network.sizes
    if scheme == "none":
        return []
    if scheme == "full":
        return averaging_level(network, 100)
    if scheme == "group":
        return [PartialModelSpec(f"group{group}", sizes, kind="semi-local")]
    models = averaging_level(network, global_level)
    if scheme == "global80":
        return models
    global_counts = models[0].counts if models else (0,) * len(sizes)
    semi_counts = (0, *(s - g for s, g in zip(sizes[1:-1], global_counts[1:-1], strict=True)), 0)
    if sum(semi_counts) == 0:
        raise SpecError(f"scheme {scheme!r}: global level {global_level} leaves no hidden neuron "
                        "for the semi-local model")
    if not models:  # global level 0: the semi-local model owns everything
        semi_counts = sizes
    depends = (GLOBAL_MODEL,) if scheme == "global80+semi20" and models else ()
    models.append(PartialModelSpec(f"semi{group}", semi_counts, depends, kind="semi-local"))
    return models
