"""ModelLayout: neuron assignment, the ownership rule, canonical order, fingerprints."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from learner import ModelLayout, NetworkSpec, PartialModelSpec, SpecError
from learner.layout import LOCAL_MODEL

P = PartialModelSpec.parse


def owners(layout: ModelLayout) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per layer (weight owner names (out, in), bias owner names)."""
    owner, names = layout.owner_of_parameters()
    names_arr = np.array(names)
    out = []
    for s in layout.layers:
        w = names_arr[owner[s.weight_offset:s.bias_offset]].reshape(s.out_features, s.in_features)
        b = names_arr[owner[s.bias_offset:s.bias_offset + s.out_features]]
        out.append((w, b))
    return out


# ------------------------------------------------------------ worked example
def test_worked_example_with_dependency() -> None:
    layout = ModelLayout(NetworkSpec.parse("4=3=2"), [P("G", "4-2-2"), P("A", "0-1-0", ["G"])])
    (w1, b1), (w2, b2) = owners(layout)
    assert layout.shared_models == ("G", "A")
    # hidden biases 0,1 and input->hidden0/1 are G's; hidden 2 is A's
    assert list(b1) == ["G", "G", "A"]
    assert (w1[:2] == "G").all() and (w1[2] == "A").all()
    # hidden0/1 -> output are G's; hidden2 -> output are A's; output biases G's
    assert (w2[:, :2] == "G").all() and (w2[:, 2] == "A").all()
    assert list(b2) == ["G", "G"]
    assert layout.vector_length("G") == 8 + 2 + 4 + 2
    assert layout.vector_length("A") == 4 + 1 + 2
    assert layout.owned_parameter_count(LOCAL_MODEL) == 0
    assert layout.model_kind("G") == "global"
    assert layout.model_kind("A") == "semi-local"


def test_worked_example_without_dependency_stays_local() -> None:
    layout = ModelLayout(NetworkSpec.parse("4=3=2"), [P("G", "4-2-2"), P("A", "0-1-0")])
    (w1, b1), (w2, b2) = owners(layout)
    assert list(b1) == ["G", "G", "A"]
    assert (w1[:2] == "G").all()
    assert (w1[2] == LOCAL_MODEL).all()  # input (G) -> hidden2 (A): incomparable
    assert (w2[:, 2] == LOCAL_MODEL).all()  # hidden2 (A) -> output (G)
    assert (w2[:, :2] == "G").all() and list(b2) == ["G", "G"]
    assert layout.vector_length("A") == 1  # only its bias
    assert layout.owned_parameter_count(LOCAL_MODEL) == 4 + 2
    assert layout.cross_models == ()


def test_worked_example_cross_model_extension() -> None:
    layout = ModelLayout(
        NetworkSpec.parse("4=3=2"), [P("G", "4-2-2"), P("A", "0-1-0")], cross_models=True
    )
    (w1, _), (w2, _) = owners(layout)
    assert layout.shared_models == ("G", "A", "A+G")
    assert (w1[2] == "A+G").all() and (w2[:, 2] == "A+G").all()
    assert layout.vector_length("A+G") == 6
    assert layout.owned_parameter_count(LOCAL_MODEL) == 0
    assert layout.model_kind("A+G") == "semi-local"
    assert layout.involved_models("A+G") == ("A", "G")
    assert "cross model" in layout.describe("A+G")
    # neurons of a cross model: those of both its models, canonical order (A, then G)
    assert [list(n) for n in layout.neurons("A+G")] == [[0, 1, 2, 3], [2, 0, 1], [0, 1]]


def test_cross_model_skipped_when_models_never_touch() -> None:
    # A and B sit in the same single hidden layer: no weight joins them
    layout = ModelLayout(
        NetworkSpec.parse("4=6=2"),
        [P("G", "4-2-2"), P("A", "0-1-0", ["G"]), P("B", "0-1-0", ["G"])],
        cross_models=True,
    )
    assert layout.cross_models == ()


# ------------------------------------------------------------ oracle
def oracle_owner(a: str, b: str, closure: dict[str, set[str]], cross: bool) -> str:
    """The rule of DESIGN 3.3 written out directly (local depends on everything)."""
    if a == b:
        return a
    if a == LOCAL_MODEL or b == LOCAL_MODEL:
        return LOCAL_MODEL
    if b in closure[a]:
        return a
    if a in closure[b]:
        return b
    return "+".join(sorted((a, b))) if cross else LOCAL_MODEL


def model_of_positions(layout: ModelLayout) -> list[list[str]]:
    names = (*layout.declared_models, LOCAL_MODEL)
    per_layer: list[list[str]] = [[""] * s for s in layout.network.sizes]
    for n in names:
        for layer, pos in enumerate(layout.neurons(n)):
            for p in pos:
                assert per_layer[layer][p] == "", "neurons overlap"
                per_layer[layer][p] = n
    assert all(all(per_layer[layer]) for layer in range(len(per_layer))), "neuron left out"
    return per_layer


def semantic_keys(layout: ModelLayout) -> list[tuple]:
    """For every flat index: a node-independent name of the parameter."""
    models = model_of_positions(layout)
    first: dict[tuple[str, int], int] = {}
    for layer, row in enumerate(models):
        for p, n in enumerate(row):
            first.setdefault((n, layer), p)

    def neuron(layer: int, p: int) -> tuple[str, int]:
        n = models[layer][p]
        return n, p - first[(n, layer)]

    keys: list[tuple] = []
    for s in layout.layers:
        for j in range(s.out_features):
            for i in range(s.in_features):
                keys.append(("w", s.index, neuron(s.index, j), neuron(s.index - 1, i)))
        for j in range(s.out_features):
            keys.append(("b", s.index, neuron(s.index, j)))
    return keys


CATALOG = [
    P("G", "6-3-3-3"),
    P("A", "0-2-1-0", ["G"]),
    P("B", "0-1-2-0", ["G"]),
    P("C", "0-1-1-0", ["A"]),
    P("D", "0-0-1-0"),
]


@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize(
    ("sizes", "implements"),
    [
        ("6=8=9=3", ["G", "A", "B", "C", "D"]),
        ("6=9=7=3", ["D", "B", "G"]),
        ("6=6=5=3", ["C", "A", "G"]),
    ],
)
def test_ownership_matches_rule_written_out(sizes: str, implements: list[str], cross: bool) -> None:
    layout = ModelLayout(NetworkSpec.parse(sizes), CATALOG, implements=implements,
                         cross_models=cross)
    closure = {n: set(layout.dependencies(n)) for n in layout.declared_models}
    models = model_of_positions(layout)
    for (w, b), s in zip(owners(layout), layout.layers, strict=True):
        for j in range(s.out_features):
            assert b[j] == models[s.index][j]
            for i in range(s.in_features):
                expect = oracle_owner(models[s.index - 1][i], models[s.index][j], closure, cross)
                if expect not in layout.shared_models:
                    expect = LOCAL_MODEL if expect not in layout.declared_models else expect
                assert w[j, i] == expect, (s.index, j, i)


def test_neurons_taken_in_dependency_order_from_layer_start() -> None:
    # declared C before its dependency A: A still comes first
    layout = ModelLayout(NetworkSpec.parse("6=8=9=3"), CATALOG, implements=["C", "A", "G"])
    assert layout.declared_models == ("G", "A", "C")
    assert [list(p) for p in layout.neurons("G")] == [[0, 1, 2, 3, 4, 5], [0, 1, 2],
                                                       [0, 1, 2], [0, 1, 2]]
    assert [list(p) for p in layout.neurons("A")] == [[], [3, 4], [3], []]
    assert [list(p) for p in layout.neurons("C")] == [[], [5], [4], []]
    assert [list(p) for p in layout.neurons(LOCAL_MODEL)] == [[], [6, 7], [5, 6, 7, 8], []]


@pytest.mark.parametrize("cross", [False, True])
def test_models_partition_all_parameters(cross: bool) -> None:
    layout = ModelLayout(NetworkSpec.parse("6=8=9=3"), CATALOG, cross_models=cross)
    every = np.concatenate(
        [layout.owned_indices(n) for n in (*layout.shared_models, LOCAL_MODEL)]
    )
    assert every.size == layout.total_parameters == 6 * 8 + 8 + 8 * 9 + 9 + 9 * 3 + 3
    assert np.array_equal(np.sort(every), np.arange(layout.total_parameters))
    for n in layout.shared_models:
        assert layout.owned_parameter_count(n) == layout.vector_length(n)
    if cross:
        # every incomparable pair that some weight joins (C -> A -> G, B -> G, D alone)
        assert layout.cross_models == ("A+B", "A+D", "B+C", "B+D", "C+D", "D+G")
    else:
        assert layout.cross_models == ()


# ------------------------------------------------------------ canonical order
def canonical_keys(layout: ModelLayout, name: str) -> list[tuple]:
    keys = semantic_keys(layout)
    return [keys[i] for i in layout.owned_indices(name)]


@pytest.mark.parametrize("cross", [False, True])
def test_canonical_vectors_align_across_different_nodes(cross: bool) -> None:
    node1 = ModelLayout(NetworkSpec.parse("6=8=9=3"), CATALOG, implements=["G", "A", "C", "D"],
                        cross_models=cross)
    node2 = ModelLayout(NetworkSpec.parse("6=11=8=3"), CATALOG, implements=["D", "B", "A", "G"],
                        cross_models=cross)
    common = set(node1.shared_models) & set(node2.shared_models)
    assert {"G", "A", "D"} <= common
    for name in common:
        assert node1.fingerprint(name) == node2.fingerprint(name), name
        k1, k2 = canonical_keys(node1, name), canonical_keys(node2, name)
        assert len(k1) == node1.vector_length(name) > 0
        assert k1 == k2, name  # entry i means the same parameter on both nodes
        assert len(set(k1)) == len(k1)
        for key in k1:  # the vector only touches the model and its dependencies
            touched = {key[2][0]} if key[0] == "b" else {key[2][0], key[3][0]}
            assert touched <= set(node1.involved_models(name))


# ------------------------------------------------------------ fingerprints
def fp(sizes: str, models: Sequence[PartialModelSpec], name: str = "G", act: str = "relu",
       **kw: object) -> bytes:
    return ModelLayout(NetworkSpec.parse(sizes, act), models, **kw).fingerprint(name)


def test_fingerprint_is_32_bytes_and_stable() -> None:
    f = fp("6=8=3", [P("G", "6-4-3")])
    assert isinstance(f, bytes) and len(f) == 32
    assert f == fp("6=8=3", [P("G", "6-4-3")])


def test_fingerprint_ignores_node_specific_facts() -> None:
    base_g = fp("6=8=9=3", [P("G", "6-3-3-3"), P("A", "0-2-1-0", ["G"])])
    base_a = fp("6=8=9=3", [P("G", "6-3-3-3"), P("A", "0-2-1-0", ["G"])], "A")
    # a different local layer size
    assert fp("6=20=9=3", [P("G", "6-3-3-3"), P("A", "0-2-1-0", ["G"])]) == base_g
    assert fp("6=20=4=3", [P("G", "6-3-3-3"), P("A", "0-2-1-0", ["G"])], "A") == base_a
    # an unrelated extra model on the node (even placed before A's neurons)
    more = [P("G", "6-3-3-3"), P("Z", "0-3-3-0", ["G"]), P("A", "0-2-1-0", ["G"])]
    assert fp("6=8=9=3", more) == base_g
    assert fp("6=8=9=3", more, "A") == base_a
    # another node declares A with no extra models, or declares models in another order
    assert fp("6=8=9=3", [P("A", "0-2-1-0", ["G"]), P("G", "6-3-3-3")], "A") == base_a
    # the cross-model flag does not change declared models' vectors here
    assert fp("6=8=9=3", [P("G", "6-3-3-3"), P("A", "0-2-1-0", ["G"])], "A",
              cross_models=True) == base_a
    # an explicit kind is cosmetic
    assert fp("6=8=9=3", [P("G", "6-3-3-3", kind="global"), P("A", "0-2-1-0", ["G"])]) == base_g


def test_fingerprint_changes_with_every_relevant_definition() -> None:
    g, a = P("G", "6-3-3-3"), P("A", "0-2-1-0", ["G"])
    base_g = fp("6=8=9=3", [g, a])
    base_a = fp("6=8=9=3", [g, a], "A")
    changed = {
        "own counts": fp("6=8=9=3", [P("G", "6-4-3-3"), a]),
        "activation": fp("6=8=9=3", [g, a], act="tanh"),
        "name": fp("6=8=9=3", [P("H", "6-3-3-3"), P("A", "0-2-1-0", ["H"])], "H"),
        "depth": fp("6=8=9=9=3", [P("G", "6-3-3-3-3")]),
    }
    for what, value in changed.items():
        assert value != base_g, what
    changed_a = {
        "own counts": fp("6=8=9=3", [g, P("A", "0-1-1-0", ["G"])], "A"),
        "dependency counts": fp("6=8=9=3", [P("G", "6-3-2-3"), a], "A"),
        "dependency dropped": fp("6=8=9=3", [g, P("A", "0-2-1-0")], "A"),
        "dependency added": fp("6=8=9=3", [g, P("B", "0-1-1-0", ["G"]),
                                           P("A", "0-2-1-0", ["G", "B"])], "A"),
        "activation": fp("6=8=9=3", [g, a], "A", act="sigmoid"),
    }
    for what, value in changed_a.items():
        assert value != base_a, what
    assert len(set(changed_a.values())) == len(changed_a)


def test_canonical_description_contents() -> None:
    layout = ModelLayout(NetworkSpec.parse("6=8=9=3", "tanh"),
                         [P("G", "6-3-3-3"), P("A", "0-2-1-0", ["G"])])
    text = layout.canonical_description("A").decode()
    for fragment in ('"activation":"tanh"', '"count":4', '"name":"G"', '"counts":[0,2,1,0]',
                     '"depends_on":["G"]', '"dtype":"float64"',
                     f'"vector_length":{layout.vector_length("A")}'):
        assert fragment in text
    assert "8" not in text.replace('"counts"', "")  # the node's layer size 8 is absent


# ------------------------------------------------------------ kinds, describe, access
def test_model_kinds() -> None:
    layout = ModelLayout(NetworkSpec.parse("6=8=3"), [
        P("G", "6-2-3"), P("A", "0-2-0", ["G"]), P("H", "0-2-0", kind="global"),
    ])
    assert layout.model_kind("G") == "global"  # whole input and output, no dependency
    assert layout.model_kind("A") == "semi-local"  # depends on G
    assert layout.model_kind("H") == "global"  # explicit override
    assert layout.model_kind(LOCAL_MODEL) == "local"
    other = ModelLayout(NetworkSpec.parse("6=8=3"), [
        P("G", "6-2-3", kind="semi-local"), P("E", "0-3-0"),
    ])
    assert other.model_kind("G") == "semi-local"  # explicit override
    assert other.model_kind("E") == "semi-local"  # hidden neurons only
    partial = ModelLayout(NetworkSpec.parse("6=8=3"), [P("G", "5-2-3")])
    assert partial.model_kind("G") == "semi-local"  # misses an input neuron


def test_describe_and_unknown_names() -> None:
    layout = ModelLayout(NetworkSpec.parse("4=3=2"), [P("G", "4-2-2")])
    text = layout.describe("G")
    assert text.startswith("G (global): neurons 4-2-2") and "16 parameters" in text
    assert layout.describe(LOCAL_MODEL).startswith("local (local): neurons 0-1-0")
    for call in (layout.fingerprint, layout.vector_length, layout.describe,
                 layout.owned_indices, layout.neurons, layout.model_kind):
        with pytest.raises(KeyError, match="'Q' is not a shared model"):
            call("Q")
    with pytest.raises(KeyError, match="not a shared model"):
        layout.fingerprint(LOCAL_MODEL)
    assert layout.owned_parameter_count(LOCAL_MODEL) == 4 + 1 + 2
    with pytest.raises(ValueError):
        layout.owned_indices("G")[0] = 5  # read-only


# ------------------------------------------------------------ validation errors
NET = NetworkSpec.parse("4=3=2")


@pytest.mark.parametrize(
    ("models", "kwargs", "fragments"),
    [
        ([P("G", "4-2-2"), P("A", "0-1-0", ["X"])], {},
         ["'A' depends on unknown model 'X'", "declared models: A, G"]),
        ([P("A", "0-1-0", ["B"]), P("B", "0-1-0", ["A"])], {},
         ["dependency cycle: A -> B -> A"]),
        ([P("A", "0-1-0", ["A"])], {}, ["dependency cycle: A -> A"]),
        ([P("A", "1-1-0", ["C"]), P("B", "1-0-0", ["A"]), P("C", "1-0-0", ["B"])], {},
         ["dependency cycle: A -> C -> B -> A"]),
        ([P("G", "4-4-2")], {}, ["'G' wants 4 neurons in layer 1", "has only 3"]),
        ([P("G", "4-2-2"), P("A", "0-2-0", ["G"])], {},
         ["layer 1", "want 4 neurons (G=2, A=2)", "has only 3"]),
        ([P("G", "4-2")], {}, ["'G' has 2 counts (4-2)", "has 3 layers"]),
        ([P("G", "4-2-2"), P("G", "4-1-2")], {}, ["'G' is declared twice"]),
        ([P("G", "4-2-2"), P("A", "0-1-0", ["G"])], {"implements": ["A"]},
         ["implements partial model 'A' but not its dependency 'G'"]),
        ([P("G", "4-1-2"), P("B", "0-1-0", ["G"]), P("A", "0-1-0", ["B"])],
         {"implements": ["A"]}, ["not its dependencies 'B', 'G'"]),
        ([P("G", "4-2-2")], {"implements": ["H"]}, ["implements: unknown partial model 'H'"]),
        ([P("G", "4-2-2")], {"implements": ["G", "G"]}, ["'G' listed twice"]),
        ([P("G", "4-2-2")], {"implements": ["local"]}, ["'local' is implicit"]),
        ([P("G", "4-2-2")], {"implements": "G"}, ["not the string 'G'"]),
        (["G"], {}, ["expected PartialModelSpec, got str"]),
    ],
)
def test_layout_errors(models: list, kwargs: dict, fragments: list[str]) -> None:
    with pytest.raises(SpecError) as err:
        ModelLayout(NET, models, **kwargs)
    for fragment in fragments:
        assert fragment in str(err.value)


def test_layout_rejects_non_network() -> None:
    with pytest.raises(SpecError, match="expected a NetworkSpec"):
        ModelLayout("4=3=2", [])  # type: ignore[arg-type]


def test_catalogue_models_not_implemented_need_not_fit() -> None:
    big = P("Huge", "0-99-0")
    layout = ModelLayout(NET, [P("G", "4-2-2"), big], implements=["G"])
    assert layout.shared_models == ("G",)
