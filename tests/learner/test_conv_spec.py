"""Convolutional networks in the papers' notation: parsing, geometry, every error path."""

from __future__ import annotations

import pytest

from learner import NetworkSpec, SpecError
from learner.spec import ConvSpec, parse_sizes

DEFAULT_CNN = "1x28x28=c16k5=pool2=c32k5=pool2=100=10"


def test_parse_default_cnn() -> None:
    net = NetworkSpec.parse(DEFAULT_CNN)
    assert net.sizes == (1, 16, 32, 100, 10)  # channels play the role of neurons
    assert net.image_size == (28, 28)
    assert net.convs == (ConvSpec(5, 0, 1, 2), ConvSpec(5, 0, 1, 2))
    assert net.is_convolutional and net.num_layers == 5
    assert net.input_features == 784
    # 28 -conv5-> 24 -pool2-> 12 -conv5-> 8 -pool2-> 4
    assert net.feature_maps() == ((28, 28), (12, 12), (4, 4))
    assert [net.weights_per_pair(layer) for layer in (1, 2, 3, 4)] == [25, 25, 16, 1]
    assert net.conv(1) == ConvSpec(5, pool=2) and net.conv(3) is None
    assert net.notation() == DEFAULT_CNN
    assert str(net) == f"{DEFAULT_CNN} (relu)"


@pytest.mark.parametrize(
    ("text", "maps"),
    [
        ("1x28x28=c16k5p2=pool2=c32k5p2=pool2=100=10", ((28, 28), (14, 14), (7, 7))),
        ("3x32x32=c8k3s2=c4k3=10", ((32, 32), (15, 15), (13, 13))),
        ("1x8x8=c8k3=pool3=10", ((8, 8), (2, 2))),  # 6x6 pooled by 3
        ("1x9x9=c4k2=pool2=10", ((9, 9), (4, 4))),  # 8x8 -> 4x4
        ("1x7x7=c4k2=pool2=10", ((7, 7), (3, 3))),  # 6x6 -> 3x3; leftovers dropped
        ("2x5x6=12=10", ((5, 6),)),  # an image input without convolutions
        ("1x4x4=c4k5p1=10", ((4, 4), (2, 2))),  # padded to 6x6, the 5x5 kernel fits
    ],
)
def test_geometry_and_round_trip(text: str, maps: tuple) -> None:
    net = NetworkSpec.parse(text, activation="tanh")
    assert net.feature_maps() == maps
    assert net.notation() == text
    assert NetworkSpec.parse(net.notation(), "tanh") == net
    first_dense = len(net.convs) + 1
    assert net.weights_per_pair(first_dense) == maps[-1][0] * maps[-1][1]


def test_constructor_equals_parse_and_mlp_is_unchanged() -> None:
    built = NetworkSpec((1, 16, 32, 100, 10), "relu", (28, 28),
                        (ConvSpec(5, pool=2), ConvSpec(5, pool=2)))
    assert built == NetworkSpec.parse(DEFAULT_CNN)
    mlp = NetworkSpec.parse("784=300=100=10")
    assert mlp.image_size is None and mlp.convs == () and not mlp.is_convolutional
    assert mlp.input_features == 784 and mlp.feature_maps() == ()
    assert [mlp.weights_per_pair(layer) for layer in (1, 2, 3)] == [1, 1, 1]
    assert mlp.structure() is None


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("1x28x28=c16k5=bn=100=10", ["part 2 'bn'", "batch normalization", "refuse"]),
        ("1x28x28=c16k5=BatchNorm2d=10", ["batch normalization"]),
        ("784=c16k5=10", ["'c16k5' needs an image input", "CxHxW"]),
        ("784=pool2=10", ["'pool2' needs an image input"]),
        ("1x28x28=pool2=c16k5=10", ["part 1 'pool2'", "must directly follow a convolution"]),
        ("1x28x28=c4k3=pool2=pool2=10", ["part 3 'pool2'", "follows 'pool2'"]),
        ("1x28x28=c4k3=pool1=10", ["pooling window 1 does nothing"]),
        ("1x28x28=100=c4k3=10", ["part 2 'c4k3'", "cannot follow a dense layer"]),
        ("1x28x28=c16k5", ["last part must be a dense output layer"]),
        ("1x28x28=c16k=10", ["part 1 'c16k' is not a layer", "c16k5p2"]),
        ("1x28x28=conv16=10", ["'conv16' is not a layer"]),
        ("1x28x28=c16k5p=10", ["'c16k5p' is not a layer"]),
        ("1x28x28=c16k0=10", ["part 1 'c16k0'", "kernel 0"]),
        ("1x28x28=c16k3s0=10", ["stride 0"]),
        ("1x28x28=c0k3=10", ["layer 1 has size 0", "CxHxW"]),
        ("0x28x28=c4k3=10", ["layer 0 has size 0"]),
        ("1x0x28=c4k3=10", ["empty side"]),
        ("1x4x4=c4k5=10", ["layer 1 (c4k5)", "4x4 feature map", "5x5"]),
        ("1x28x28=c16k5=pool2=c32k5=pool2=c64k5=10", ["layer 3 (c64k5)", "4x4", "5x5"]),
        ("1x5x5=c4k3=pool4=10", ["pool4 after layer 1 (c4k3)", "3x3"]),
        ("1x28x28=c4k3=c4k3=c4k3", ["last part must be a dense"]),
    ],
)
def test_parse_errors_name_the_part(text: str, fragments: list[str]) -> None:
    with pytest.raises(SpecError) as err:
        NetworkSpec.parse(text)
    for fragment in fragments:
        assert fragment in str(err.value), (fragment, str(err.value))
    assert err.value.field == "sizes"


def test_constructor_errors() -> None:
    with pytest.raises(SpecError, match="convolutions need an image input"):
        NetworkSpec((1, 4, 10), convs=(ConvSpec(3),))
    with pytest.raises(SpecError, match="at most 1 fit"):
        NetworkSpec((1, 4, 10), image_size=(8, 8), convs=(ConvSpec(3), ConvSpec(3)))
    with pytest.raises(SpecError, match="not a ConvSpec"):
        NetworkSpec((1, 4, 10), image_size=(8, 8), convs=((3, 0),))  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="image size"):
        NetworkSpec((1, 4, 10), image_size=(8,))  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="convolution padding -1"):
        ConvSpec(3, padding=-1)


def test_parse_sizes_refuses_a_cnn() -> None:
    assert parse_sizes("64=48=10") == (64, 48, 10)
    with pytest.raises(SpecError, match="is convolutional.*NetworkSpec.parse"):
        parse_sizes(DEFAULT_CNN)


def test_structure_names_every_convolution_but_no_channel_count() -> None:
    a = NetworkSpec.parse("1x28x28=c16k5=pool2=c32k5p2=100=10").structure()
    b = NetworkSpec.parse("1x28x28=c20k5=pool2=c8k5p2=300=10").structure()
    assert a == b == {
        "image": [28, 28],
        "convolutions": [{"kernel": 5, "padding": 0, "stride": 1, "max_pool": 2},
                         {"kernel": 5, "padding": 2, "stride": 1, "max_pool": 1}],
    }
