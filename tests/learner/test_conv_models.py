"""Partial models of convolutional networks: channels are neurons.

Mirrors the dense tests: ownership of kernel blocks and of the block that
flattens channels into a dense layer, written-out rule against the layout,
canonical vectors that line up across nodes with different channel counts,
extract from one node and assign into another, and forward passes equal to
torch's own modules.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from learner import ModelLayout, NetworkSpec, PartialModelSpec, PartialNetwork, SpecError
from learner.layout import LOCAL_MODEL

P = PartialModelSpec.parse

# maps 10x10 -conv3-> 8x8 -pool2-> 4x4 -conv2-> 3x3: the dense layer sees 9 values per channel
CATALOG = [
    P("G", "2-3-3-4-4"),
    P("A", "0-2-1-2-0", ["G"]),
    P("B", "0-1-2-1-0", ["G"]),
    P("D", "0-0-1-1-0"),
]


def layout_of(text: str, implements: list[str], cross: bool = False,
              act: str = "relu") -> ModelLayout:
    return ModelLayout(NetworkSpec.parse(text, act), CATALOG, implements=implements,
                       cross_models=cross)


def model_of_positions(layout: ModelLayout) -> list[list[str]]:
    """Per part, the model of every neuron (channel)."""
    per_part: list[list[str]] = [[""] * s for s in layout.network.sizes]
    for name in (*layout.declared_models, LOCAL_MODEL):
        for part, positions in enumerate(layout.neurons(name)):
            for p in positions:
                assert per_part[part][p] == "", "neurons overlap"
                per_part[part][p] = name
    assert all(all(row) for row in per_part), "neuron left out"
    return per_part


def rule(a: str, b: str, closure: dict[str, set[str]], cross: bool) -> str:
    """DESIGN 3.3 written out: the lower of two comparable models, else local (or A+B)."""
    if a == b:
        return a
    if LOCAL_MODEL in (a, b):
        return LOCAL_MODEL
    if b in closure[a]:
        return a
    if a in closure[b]:
        return b
    return "+".join(sorted((a, b))) if cross else LOCAL_MODEL


def weight_owners(layout: ModelLayout, part: int) -> np.ndarray:
    """Owner names of part ``part``'s weights, shape (out, in, unit)."""
    owner, names = layout.owner_of_parameters()
    s = layout.layers[part - 1]
    return np.array(names)[owner[s.weight_offset:s.bias_offset]].reshape(
        s.out_features, s.in_features, s.unit)


# ------------------------------------------------------------ ownership
def test_kernel_and_flatten_blocks_worked_example() -> None:
    text = "1x6x6=c3k3=pool2=2=2"  # 6x6 -> 4x4 -> 2x2: 4 values per channel when flattened
    with_dep = ModelLayout(NetworkSpec.parse(text), [P("G", "1-2-2-2"), P("A", "0-1-0-0", ["G"])])
    conv, dense = weight_owners(with_dep, 1), weight_owners(with_dep, 2)
    assert conv.shape == (3, 1, 9) and dense.shape == (2, 3, 4)
    # channels 0, 1 are G's: their whole 3x3 kernels; channel 2 is A's
    assert (conv[:2] == "G").all() and (conv[2] == "A").all()
    # flatten -> dense: each channel's 4 features follow that channel's model
    assert (dense[:, :2] == "G").all() and (dense[:, 2] == "A").all()
    assert with_dep.vector_length("A") == 9 + 1 + 2 * 4
    # kernels and biases of 2 channels, 2 dense neurons x 2 channels x 4 values + biases,
    # output 2 x 2 + biases
    assert with_dep.vector_length("G") == 2 * 9 + 2 + 2 * 2 * 4 + 2 + 2 * 2 + 2

    no_dep = ModelLayout(NetworkSpec.parse(text), [P("G", "1-2-2-2"), P("A", "0-1-0-0")])
    conv, dense = weight_owners(no_dep, 1), weight_owners(no_dep, 2)
    assert (conv[2] == LOCAL_MODEL).all() and (dense[:, 2] == LOCAL_MODEL).all()
    assert no_dep.vector_length("A") == 1  # only its channel's bias

    crossed = ModelLayout(NetworkSpec.parse(text), [P("G", "1-2-2-2"), P("A", "0-1-0-0")],
                          cross_models=True)
    assert (weight_owners(crossed, 1)[2] == "A+G").all()
    assert (weight_owners(crossed, 2)[:, 2] == "A+G").all()
    assert crossed.vector_length("A+G") == 9 + 2 * 4


@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize(
    ("text", "implements"),
    [
        ("2x10x10=c8k3=pool2=c7k2=9=4", ["G", "A", "B", "D"]),
        ("2x10x10=c5k3=pool2=c9k2=6=4", ["D", "B", "G"]),
        ("2x10x10=c6k3p1=c6k3s2=pool2=7=4", ["A", "G"]),
    ],
)
def test_ownership_matches_rule_written_out(text: str, implements: list[str],
                                            cross: bool) -> None:
    layout = layout_of(text, implements, cross)
    closure = {n: set(layout.dependencies(n)) for n in layout.declared_models}
    models = model_of_positions(layout)
    owner, names = layout.owner_of_parameters()
    for s in layout.layers:
        w = weight_owners(layout, s.index)
        assert s.unit == layout.network.weights_per_pair(s.index)
        for j in range(s.out_features):
            for i in range(s.in_features):
                expect = rule(models[s.index - 1][i], models[s.index][j], closure, cross)
                if expect not in layout.shared_models:
                    expect = LOCAL_MODEL if expect not in layout.declared_models else expect
                assert (w[j, i] == expect).all(), (s.index, j, i)
        bias = np.array(names)[owner[s.bias_offset:s.bias_offset + s.out_features]]
        assert list(bias) == models[s.index]
    every = np.concatenate([layout.owned_indices(n)
                            for n in (*layout.shared_models, LOCAL_MODEL)])
    assert np.array_equal(np.sort(every), np.arange(layout.total_parameters))


# ------------------------------------------------------------ canonical order
def semantic_keys(layout: ModelLayout) -> list[tuple]:
    """For every flat index a node-independent name: (kind, part, target, source, unit)."""
    models = model_of_positions(layout)
    first: dict[tuple[str, int], int] = {}
    for part, row in enumerate(models):
        for p, n in enumerate(row):
            first.setdefault((n, part), p)

    def neuron(part: int, p: int) -> tuple[str, int]:
        return models[part][p], p - first[(models[part][p], part)]

    keys: list[tuple] = []
    for s in layout.layers:
        for j in range(s.out_features):
            for i in range(s.in_features):
                for u in range(s.unit):
                    keys.append(("w", s.index, neuron(s.index, j), neuron(s.index - 1, i), u))
        keys += [("b", s.index, neuron(s.index, j)) for j in range(s.out_features)]
    return keys


@pytest.mark.parametrize("cross", [False, True])
def test_canonical_vectors_align_across_different_channel_counts(cross: bool) -> None:
    node1 = layout_of("2x10x10=c8k3=pool2=c7k2=9=4", ["G", "A", "D"], cross)
    node2 = layout_of("2x10x10=c11k3=pool2=c9k2=14=4", ["D", "B", "A", "G"], cross)
    common = set(node1.shared_models) & set(node2.shared_models)
    assert {"G", "A", "D"} <= common
    keys1, keys2 = semantic_keys(node1), semantic_keys(node2)
    for name in common:
        assert node1.fingerprint(name) == node2.fingerprint(name), name
        k1 = [keys1[i] for i in node1.owned_indices(name)]
        k2 = [keys2[i] for i in node2.owned_indices(name)]
        assert len(k1) == node1.vector_length(name) > 0
        assert k1 == k2, name
        assert len(set(k1)) == len(k1)


def test_fingerprint_follows_the_convolutions_not_the_channel_counts() -> None:
    def fp(text: str, models: list[PartialModelSpec] | None = None) -> bytes:
        return ModelLayout(NetworkSpec.parse(text), models or [P("G", "1-4-4-8-10")]
                           ).fingerprint("G")

    base = fp("1x28x28=c16k5=pool2=c32k5=pool2=100=10")
    assert fp("1x28x28=c6k5=pool2=c40k5=pool2=20=10") == base  # other local channels
    changed = {
        "kernel": fp("1x28x28=c16k3=pool2=c32k5=pool2=100=10"),
        "padding": fp("1x28x28=c16k5p2=pool2=c32k5=pool2=100=10"),
        "stride": fp("1x28x28=c16k5s2=c32k5=pool2=100=10"),
        "pooling": fp("1x28x28=c16k5=pool2=c32k5=100=10"),
        "image": fp("1x32x32=c16k5=pool2=c32k5=pool2=100=10"),
        "counts": fp("1x28x28=c16k5=pool2=c32k5=pool2=100=10", [P("G", "1-5-4-8-10")]),
        "dense instead": ModelLayout(NetworkSpec.parse("1=16=32=100=10"),
                                     [P("G", "1-4-4-8-10")]).fingerprint("G"),
    }
    for what, value in changed.items():
        assert value != base, what
    assert len(set(changed.values())) == len(changed)
    text = ModelLayout(NetworkSpec.parse("1x28x28=c16k5p2=pool2=c32k5=pool2=100=10"),
                       [P("G", "1-4-4-8-10")]).canonical_description("G").decode()
    for fragment in ('"type":"convolutional"', '"image":[28,28]', '"kernel":5', '"padding":2',
                     '"max_pool":2'):
        assert fragment in text


# ------------------------------------------------------------ the network
def torch_twin(model: PartialNetwork) -> nn.Sequential:
    """The same network from torch's own modules, holding copies of the parameters."""
    net = model.layout.network
    act = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[net.activation]
    assert net.image_size is not None
    layers: list[nn.Module] = [nn.Unflatten(1, (net.sizes[0], *net.image_size))]
    for part in range(1, net.num_layers):
        conv = net.conv(part)
        if conv is not None:
            module: nn.Module = nn.Conv2d(net.sizes[part - 1], net.sizes[part], conv.kernel,
                                          stride=conv.stride, padding=conv.padding)
        else:
            if part == len(net.convs) + 1:
                layers.append(nn.Flatten())
            module = nn.Linear(model.weight(part).shape[1], net.sizes[part])
        with torch.no_grad():
            module.weight.copy_(model.weight(part))
            module.bias.copy_(model.bias(part))
        layers.append(module)
        if part < net.num_layers - 1:
            layers.append(act())
        if conv is not None and conv.pool > 1:
            layers.append(nn.MaxPool2d(conv.pool))
    return nn.Sequential(*layers)


@pytest.mark.parametrize("text", ["2x10x10=c8k3=pool2=c7k2=9=4",
                                  "2x10x10=c6k3p1=c6k3s2=pool2=7=4",
                                  "2x6x5=7=6=7=4"])
@pytest.mark.parametrize("act", ["relu", "tanh"])
def test_forward_equals_torch_modules(text: str, act: str) -> None:
    model = PartialNetwork(layout_of(text, ["G", "A"], act=act), seed=3)
    x = torch.from_numpy(np.random.default_rng(0).normal(
        size=(5, model.layout.network.input_features)).astype(np.float32))
    torch.testing.assert_close(model(x), torch_twin(model)(x))
    # the views share the flat tensor: a gradient reaches every part
    model(x).square().sum().backward()
    grad = model.flat_parameters().grad
    assert grad is not None
    for s in model.layout.layers:
        assert grad[s.weight_offset:s.bias_offset].abs().sum() > 0


def g_only(model: PartialNetwork) -> PartialNetwork:
    """Zero every parameter G does not own: what remains is G's own computation."""
    keep = np.zeros(model.layout.total_parameters, dtype=bool)
    keep[model.layout.owned_indices("G")] = True
    with torch.no_grad():
        model.flat_parameters()[torch.from_numpy(~keep)] = 0.0
    return model


@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_g_moves_between_networks_with_different_channel_counts(act: str) -> None:
    n1 = PartialNetwork(layout_of("2x10x10=c8k3=pool2=c7k2=9=4", ["G", "A"], act=act), seed=1)
    n2 = PartialNetwork(layout_of("2x10x10=c11k3=pool2=c9k2=14=4", ["B", "G", "D"], act=act),
                        seed=2)
    assert n1.layout.fingerprint("G") == n2.layout.fingerprint("G")
    v = n1.extract("G") + np.random.default_rng(3).normal(size=n1.layout.vector_length("G"))
    n1.assign("G", v)
    rest = n2.layout.owned_indices(LOCAL_MODEL)
    before = n2.flat_parameters().detach().numpy()[rest].copy()
    n2.assign("G", n1.extract("G"))
    assert np.array_equal(n2.flat_parameters().detach().numpy()[rest], before)
    np.testing.assert_array_equal(n2.extract("G"), n1.extract("G"))

    x = torch.from_numpy(np.random.default_rng(4).normal(size=(6, 200)).astype(np.float32))
    g1, g2 = n1.layout.neurons("G"), n2.layout.neurons("G")
    # part 1: G's channels see only G's input channels, so their feature maps agree as they are
    torch.testing.assert_close(n1.activations(x)[0][:, g1[1]], n2.activations(x)[0][:, g2[1]])
    a1, a2 = g_only(n1).activations(x), g_only(n2).activations(x)
    for part in (1, 2, 3, 4):
        torch.testing.assert_close(a1[part - 1][:, g1[part]], a2[part - 1][:, g2[part]])
    assert not torch.allclose(a1[-1], torch.zeros_like(a1[-1]))


def test_shared_models_start_identical_across_channel_layouts() -> None:
    n1 = PartialNetwork(layout_of("2x10x10=c8k3=pool2=c7k2=9=4", ["G", "A"]), seed=1)
    n2 = PartialNetwork(layout_of("2x10x10=c11k3=pool2=c9k2=14=4", ["G", "A", "B"]), seed=2)
    for name in ("G", "A"):
        np.testing.assert_array_equal(n1.extract(name), n2.extract(name))
    # initial bounds follow torch's fan-in (input channels x kernel area) within the model
    bounds = n1.layout.init_bounds("G")
    first = n1.layout.blocks("G")[0]
    assert first.unit == 9 and bounds[0] == pytest.approx(1 / np.sqrt(2 * 9))
    assert np.abs(n1.extract("G")).max() <= bounds.max()


def test_mlp_descriptions_and_fingerprints_are_unchanged() -> None:
    # pinned from the code before convolutions existed: checkpoints and peers rely on them
    layout = ModelLayout(NetworkSpec.parse("4=3=2"), [P("G", "4-2-2"), P("A", "0-1-0", ["G"])])
    assert layout.canonical_description("A") == (
        b'{"cross_model":false,"dtype":"float64","format":"p2p-gossip-learning/partial-model/v1",'
        b'"involved":[{"counts":[4,2,2],"depends_on":[],"name":"G"},{"counts":[0,1,0],'
        b'"depends_on":["G"],"name":"A"}],"layers":{"activation":"relu","bias":true,"count":3,'
        b'"type":"dense"},"model":"A","vector_length":7}')
    assert layout.fingerprint("A").hex() == (
        "eabe69a5d8425861f84b33ce24fd9b1ef3537753e6984092075f5c5a57817f07")
    assert layout.fingerprint("G").hex() == (
        "f30026798fa50808c0f7432c238d8f46a9df9ec55441bb233dd978803d8625a1")
    assert all(block.unit == 1 for block in layout.blocks("G"))


@pytest.mark.parametrize(
    ("models", "fragments"),
    [
        ([P("G", "1-20-24-80-10")], ["wants 20 channels in layer 1", "only 16"]),
        ([P("G", "1-12-80-10")], ["4 counts", "input channels, each convolution's channels"]),
        ([P("G", "1-12-24-80-10"), P("A", "0-8-0-0-0")],
         ["layer 1", "want 20 channels (G=12, A=8)"]),
        ([P("G", "1-12-24-120-10")], ["wants 120 neurons in layer 3"]),
    ],
)
def test_declarations_that_do_not_fit_a_cnn_name_channels(models: list[PartialModelSpec],
                                                           fragments: list[str]) -> None:
    with pytest.raises(SpecError) as err:
        ModelLayout(NetworkSpec.parse("1x28x28=c16k5=pool2=c32k5=pool2=100=10"), models)
    for fragment in fragments:
        assert fragment in str(err.value), (fragment, str(err.value))
