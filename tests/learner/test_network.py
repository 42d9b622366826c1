"""PartialMLP: extract/assign, alignment across different networks, initialisation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from learner import ModelLayout, NetworkSpec, PartialMLP, PartialModelSpec, assign, extract
from learner.layout import LOCAL_MODEL

P = PartialModelSpec.parse
CATALOG = [P("G", "8-3-2-3"), P("A", "0-2-1-0", ["G"]), P("B", "0-1-2-0", ["G"])]


def node(sizes: str, implements: list[str], seed: int, act: str = "tanh",
         cross: bool = False) -> PartialMLP:
    layout = ModelLayout(NetworkSpec.parse(sizes, act), CATALOG, implements=implements,
                         cross_models=cross)
    return PartialMLP(layout, seed)


def flat(model: PartialMLP) -> np.ndarray:
    return model.flat_parameters().detach().numpy().copy()


def test_extract_is_float64_copy_and_assign_extract_is_identity() -> None:
    m = node("8=6=5=3", ["G", "A"], seed=1)
    before = flat(m)
    for name in m.layout.shared_models:
        v = m.extract(name)
        assert v.dtype == np.float64 and v.shape == (m.layout.vector_length(name),)
        v[:] = 123.0  # a copy: the network is untouched
        assert np.array_equal(flat(m), before)
        m.assign(name, m.extract(name))
        assert np.array_equal(flat(m), before)


def test_assign_then_extract_round_trips_and_touches_only_the_model() -> None:
    m = node("8=6=5=3", ["G", "A"], seed=1)
    before = flat(m)
    rng = np.random.default_rng(0)
    v = rng.normal(size=m.layout.vector_length("A"))
    assign(m, "A", v)
    assert np.array_equal(extract(m, "A"), v.astype(np.float32).astype(np.float64))
    after = flat(m)
    changed = np.flatnonzero(after != before)
    assert set(changed) <= set(m.layout.owned_indices("A"))
    out = np.empty(m.layout.vector_length("A"))
    assert m.extract("A", out=out) is out and np.array_equal(out, extract(m, "A"))


def g_only(model: PartialMLP) -> PartialMLP:
    """Zero every parameter G does not own: what remains is G's own computation."""
    keep = np.zeros(model.layout.total_parameters, dtype=bool)
    keep[model.layout.owned_indices("G")] = True
    with torch.no_grad():
        model.flat_parameters()[torch.from_numpy(~keep)] = 0.0
    return model


@pytest.mark.parametrize("act", ["tanh", "relu", "sigmoid"])
def test_g_moves_between_networks_with_different_models_and_sizes(act: str) -> None:
    n1 = node("8=6=5=3", ["G", "A"], seed=1, act=act)  # G + A + local
    n2 = node("8=9=4=3", ["B", "G"], seed=2, act=act)  # G + B + local, other sizes
    assert n1.layout.fingerprint("G") == n2.layout.fingerprint("G")
    # perturb G on n1 so the test does not lean on identical initialisation
    v = n1.extract("G") + np.random.default_rng(3).normal(size=n1.layout.vector_length("G"))
    n1.assign("G", v)
    rest_before = flat(n2)[n2.layout.owned_indices(LOCAL_MODEL)]
    n2.assign("G", n1.extract("G"))
    assert np.array_equal(flat(n2)[n2.layout.owned_indices(LOCAL_MODEL)], rest_before)

    x = torch.from_numpy(np.random.default_rng(4).normal(size=(16, 8)).astype(np.float32))
    g1 = [p for p in n1.layout.neurons("G")]
    g2 = [p for p in n2.layout.neurons("G")]
    # layer 1: G's hidden neurons see only G's inputs, so they agree as they are
    h1, h2 = n1.activations(x)[0], n2.activations(x)[0]
    torch.testing.assert_close(h1[:, g1[1]], h2[:, g2[1]])
    # deeper: compare G's own contribution (everything not owned by G zeroed)
    a1, a2 = g_only(n1).activations(x), g_only(n2).activations(x)
    for layer in (1, 2, 3):
        torch.testing.assert_close(a1[layer - 1][:, g1[layer]], a2[layer - 1][:, g2[layer]])
    assert not torch.allclose(a1[-1], torch.zeros_like(a1[-1]))


def test_averaging_vectors_equals_averaging_owned_parameters() -> None:
    nodes = [
        node("8=6=5=3", ["G", "A"], seed=1),
        node("8=7=6=3", ["G", "A", "B"], seed=2),
        node("8=5=6=3", ["A", "G"], seed=3),
    ]
    rng = np.random.default_rng(5)
    for m in nodes:  # make every node's values different
        with torch.no_grad():
            m.flat_parameters().add_(torch.from_numpy(
                rng.normal(size=m.layout.total_parameters).astype(np.float32)))

    def blocks(m: PartialMLP, name: str) -> list[np.ndarray]:
        """The parameters ``name`` owns, addressed by neuron (not by vector position)."""
        g, a = m.layout.neurons("G"), m.layout.neurons("A")
        out = []
        for layer in (1, 2, 3):
            w = m.weight(layer).detach().numpy().astype(np.float64)
            b = m.bias(layer).detach().numpy().astype(np.float64)
            if name == "G":
                out += [w[np.ix_(g[layer], g[layer - 1])], b[g[layer]]]
            else:  # A depends on G: A<-A, A<-G and G<-A weights, A's biases
                both = np.concatenate([g[layer - 1], a[layer - 1]])
                out += [w[np.ix_(a[layer], both)], w[np.ix_(g[layer], a[layer - 1])],
                        b[a[layer]]]
        return out

    for name in ("G", "A"):
        expected = [np.mean(parts, axis=0) for parts in zip(*(blocks(m, name) for m in nodes),
                                                             strict=True)]
        mean = np.mean([m.extract(name) for m in nodes], axis=0)
        for m in nodes:
            m.assign(name, mean)
        for m in nodes:
            for got, want in zip(blocks(m, name), expected, strict=True):
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_shared_models_start_identical_local_parts_from_node_seed() -> None:
    n1 = node("8=6=5=3", ["G", "A"], seed=1, cross=True)
    n2 = node("8=9=7=3", ["G", "A", "B"], seed=2, cross=True)
    n1b = node("8=6=5=3", ["G", "A"], seed=1, cross=True)
    n3 = node("8=6=5=3", ["G", "A"], seed=3, cross=True)
    for name in ("G", "A"):
        np.testing.assert_array_equal(n1.extract(name), n2.extract(name))
    assert not np.array_equal(n1.extract("G"), n1.extract("A")[:8])
    np.testing.assert_array_equal(flat(n1), flat(n1b))
    local = n1.layout.owned_indices(LOCAL_MODEL)
    assert local.size > 0
    assert not np.array_equal(flat(n1)[local], flat(n3)[local])
    np.testing.assert_array_equal(n1.extract("G"), n3.extract("G"))
    # initial values are bounded by 1/sqrt(canonical fan-in), never zero everywhere
    for name in n1.layout.shared_models:
        v = n1.extract(name)
        assert np.all(np.abs(v) <= n1.layout.init_bounds(name) + 1e-7)
        assert np.std(v) > 0


def test_cross_model_vector_moves_between_holders() -> None:
    n1 = node("8=6=5=3", ["G", "A", "B"], seed=1, cross=True)
    n2 = node("8=9=7=3", ["B", "A", "G"], seed=2, cross=True)
    assert "A+B" in n1.layout.shared_models
    assert n1.layout.fingerprint("A+B") == n2.layout.fingerprint("A+B")
    v = np.arange(n1.layout.vector_length("A+B"), dtype=np.float64)
    n1.assign("A+B", v)
    n2.assign("A+B", n1.extract("A+B"))
    # entry 0 is the same weight (between the same A and B neurons) on both
    a1, b1 = n1.layout.neurons("A"), n1.layout.neurons("B")
    a2, b2 = n2.layout.neurons("A"), n2.layout.neurons("B")
    for layer in (1, 2, 3):
        w1, w2 = n1.weight(layer).detach().numpy(), n2.weight(layer).detach().numpy()
        np.testing.assert_array_equal(w1[np.ix_(b1[layer], a1[layer - 1])],
                                      w2[np.ix_(b2[layer], a2[layer - 1])])
        np.testing.assert_array_equal(w1[np.ix_(a1[layer], b1[layer - 1])],
                                      w2[np.ix_(a2[layer], b2[layer - 1])])


def _bad(n: int, kind: str) -> np.ndarray:
    if kind == "short":
        return np.zeros(3)
    if kind == "matrix":
        return np.zeros((2, n))
    if kind == "bool":
        return np.ones(n, dtype=bool)
    v = np.ones(n)
    v[5] = {"nan": np.nan, "inf": -np.inf, "huge": 1e300}[kind]
    return v


@pytest.mark.parametrize(
    ("kind", "fragment"),
    [
        ("short", "vector has shape (3,), expected"),
        ("matrix", "vector has shape (2, "),
        ("nan", "value at index 5 (nan) is not a finite float32"),
        ("inf", "value at index 5 (-inf) is not a finite float32"),
        ("huge", "value at index 5 (1e+300) is not a finite float32"),
        ("bool", "dtype bool is not numeric"),
    ],
)
def test_assign_rejects_bad_vectors_without_change(kind: str, fragment: str) -> None:
    m = node("8=6=5=3", ["G", "A"], seed=1)
    before = flat(m)
    with pytest.raises(ValueError) as err:
        m.assign("G", _bad(m.layout.vector_length("G"), kind))
    assert fragment in str(err.value) and "'G'" in str(err.value)
    assert np.array_equal(flat(m), before)


def test_unknown_model_and_local_are_refused() -> None:
    m = node("8=6=5=3", ["G", "A"], seed=1)
    for call in (lambda: m.extract("B"), lambda: m.assign("B", np.zeros(1)),
                 lambda: m.extract(LOCAL_MODEL)):
        with pytest.raises(KeyError, match="is not a shared model of this network"):
            call()
    with pytest.raises(ValueError, match="out must be float64"):
        m.extract("G", out=np.empty(m.layout.vector_length("G"), dtype=np.float32))


def test_forward_shapes_gradients_and_state_dict() -> None:
    m = node("8=6=5=3", ["G", "A"], seed=1, act="relu")
    x = torch.randn(4, 8)
    logits = m(x)
    assert logits.shape == (4, 3)
    with pytest.raises(ValueError, match="last dimension is 7, expected 8"):
        m(torch.randn(4, 7))
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 0]))
    loss.backward()
    grad = m.flat_parameters().grad
    assert grad is not None and grad.shape == (m.layout.total_parameters,)
    assert torch.count_nonzero(grad) > 0
    # one SGD step twice in a row works (views are taken afresh in every forward)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(m(x), torch.tensor([0, 1, 2, 0])).backward()
        opt.step()
    clone = PartialMLP(m.layout, seed=99)
    clone.load_state_dict(m.state_dict())
    torch.testing.assert_close(clone(x), m(x))
    assert [n for n, _ in m.named_parameters()] == ["flat"]
    idx = m.owned_index_tensor(LOCAL_MODEL)
    assert idx.dtype == torch.int64 and idx.numel() == m.layout.owned_parameter_count("local")
