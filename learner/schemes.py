"""Builders for the papers' averaging schemes (which partial models each node declares).

- `averaging_level(network, level)`: one global model holding `level` % of every
  hidden layer, plus the whole input and output layers (level 0: nothing is
  shared, every node learns alone; level 100: one global model, as in
  federated averaging).
- `semi_local_scheme(network, scheme, group)`: the schemes of the semi-local
  experiment, for a node of permutation group `group`.
- `semi_local_local_scheme(network, scheme, node)`: the schemes of the 4-node
  experiment (semi-local models plus local models), for node 0..3.

Hidden layers are convolution channels as well as dense neurons: the same
builders serve convolutional networks.
"""

from __future__ import annotations

from learner.spec import NetworkSpec, PartialModelSpec, SpecError

__all__ = [
    "FOUR_NODE_GROUPS",
    "GLOBAL_MODEL",
    "SEMI_LOCAL_LOCAL_SCHEMES",
    "SEMI_LOCAL_SCHEMES",
    "averaging_level",
    "hidden_share",
    "semi_local_local_scheme",
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


#: Schemes of the 4-node experiment (thesis ch. 3 V.3.e; nodes 0 and 1 learn the
#: plain task, node 2 has 8 and 9 swapped, node 3 also 6 and 7): none; full;
#: group: one full model per pair of closer nodes (0, 1) and (2, 3); global80;
#: global70+semi: 70 % global, then per pair a semi-local model depending on the
#: global one, 30 % of each hidden layer for the pair with identical tasks (nothing
#: left local) and 15 % for the pair that differs (the last 15 % stay local);
#: global70+semi-nodep: the same without the dependency.
SEMI_LOCAL_LOCAL_SCHEMES: tuple[str, ...] = (
    "none",
    "full",
    "group",
    "global80",
    "global70+semi",
    "global70+semi-nodep",
)

#: Pair (group) of each of the 4 nodes, and the semi-local share of each pair.
FOUR_NODE_GROUPS: tuple[int, ...] = (0, 0, 1, 1)
_PAIR_SEMI_LEVEL = (30.0, 15.0)


def semi_local_local_scheme(network: NetworkSpec, scheme: str, node: int) -> list[PartialModelSpec]:
    """Partial models of node `node` (0..3) of the 4-node experiment under one of
    `SEMI_LOCAL_LOCAL_SCHEMES`.

    The thesis uses 784-220-70-10 global, 0-80-30-0 and 0-40-15-0 semi-local on
    784=300=100=10; here the shares are 70, 30 and 15 % of every hidden layer,
    so any network (and a CNN's channels) gets the same split (210-70, 90-30,
    45-15 on 784=300=100=10).
    """
    if scheme not in SEMI_LOCAL_LOCAL_SCHEMES:
        raise SpecError(f"scheme {scheme!r} is unknown; expected one of "
                        f"{', '.join(SEMI_LOCAL_LOCAL_SCHEMES)}")
    if not 0 <= node < len(FOUR_NODE_GROUPS):
        raise SpecError(f"scheme {scheme!r}: node must be 0..{len(FOUR_NODE_GROUPS) - 1}, "
                        f"got {node}")
    group = FOUR_NODE_GROUPS[node]
    if scheme in ("none", "full", "group", "global80"):
        return semi_local_scheme(network, scheme, group)
    models = averaging_level(network, 70.0)
    sizes = network.sizes
    global_counts = models[0].counts
    semi = (0, *(min(s - g, hidden_share(s, _PAIR_SEMI_LEVEL[group]))
                 for s, g in zip(sizes[1:-1], global_counts[1:-1], strict=True)), 0)
    if sum(semi) == 0:
        raise SpecError(f"scheme {scheme!r}: network {network.notation()} is too small to give "
                        f"pair {group} a semi-local share of {_PAIR_SEMI_LEVEL[group]} %")
    depends = (GLOBAL_MODEL,) if scheme == "global70+semi" else ()
    models.append(PartialModelSpec(f"semi{group}", semi, depends, kind="semi-local"))
    return models
