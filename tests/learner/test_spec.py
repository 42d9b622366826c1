"""Declarations of networks and partial models: parsing and every error path."""

from __future__ import annotations

import pytest

from learner import NetworkSpec, PartialModelSpec, SpecError


def test_network_parse_papers_notation() -> None:
    net = NetworkSpec.parse("64=48=32=10", activation="tanh")
    assert net.sizes == (64, 48, 32, 10)
    assert net.activation == "tanh"
    assert net.num_layers == 4
    assert net.notation() == "64=48=32=10"
    assert NetworkSpec.parse(" 784 = 300 = 10 ").sizes == (784, 300, 10)
    assert NetworkSpec((4, 3)).activation == "relu"


def test_network_constructor_coerces_list_to_tuple() -> None:
    net = NetworkSpec([4, 3, 2])  # type: ignore[arg-type]
    assert net.sizes == (4, 3, 2)
    assert hash(net) == hash(NetworkSpec((4, 3, 2)))


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("64-48-10", "not a whole number"),
        ("64==10", "'' is not a whole number"),
        ("64=x=10", "'x' is not a whole number"),
        ("64=-3=10", "'-3' is not a whole number"),
        ("64", "1 layer(s) given"),
        ("64=0=10", "layer 1 has size 0"),
        ("", "not a whole number"),
    ],
)
def test_network_parse_errors(text: str, fragment: str) -> None:
    with pytest.raises(SpecError) as err:
        NetworkSpec.parse(text)
    assert fragment in str(err.value)
    assert "network" in str(err.value)
    assert "64=48=32=10" in str(err.value)  # the expected form is shown


def test_network_bad_activation_and_types() -> None:
    with pytest.raises(SpecError, match=r"activation 'softplus' is unknown.*relu, sigmoid, tanh"):
        NetworkSpec.parse("4=2", activation="softplus")
    with pytest.raises(SpecError, match="not an integer"):
        NetworkSpec((4, 2.5))  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="not an integer"):
        NetworkSpec((4, True))  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="expected a string"):
        NetworkSpec.parse(42)  # type: ignore[arg-type]


def test_partial_model_parse() -> None:
    m = PartialModelSpec.parse("A", "0-8-4-0", depends_on=["G"])
    assert m.counts == (0, 8, 4, 0)
    assert m.depends_on == ("G",)
    assert m.kind is None
    assert m.notation() == "0-8-4-0"
    assert str(m) == "A 0-8-4-0 <- G"
    direct = PartialModelSpec("A", [0, 8, 4, 0], ["G"])  # type: ignore[arg-type]
    assert direct == m  # lists are normalised to tuples
    assert PartialModelSpec.parse("G", "4-2-2", kind="global").kind == "global"


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"name": "local", "counts": "1-1"}, "reserved for the implicit local model"),
        ({"name": "", "counts": "1-1"}, "name '' is invalid"),
        ({"name": "a+b", "counts": "1-1"}, "name 'a+b' is invalid"),
        ({"name": "9x", "counts": "1-1"}, "name '9x' is invalid"),
        ({"name": "A", "counts": "1=1"}, "'1=1' is not a whole number"),
        ({"name": "A", "counts": "1-x-2"}, "'x' is not a whole number"),
        ({"name": "A", "counts": "5"}, "1 count(s) given"),
        ({"name": "A", "counts": "0-0-0"}, "holds no neuron"),
        ({"name": "A", "counts": "1-1", "depends_on": "G"}, "not the string 'G'"),
        ({"name": "A", "counts": "1-1", "depends_on": ["G", "G"]}, "dependency listed twice: G"),
        ({"name": "A", "counts": "1-1", "depends_on": ["local"]}, "cannot depend on the implicit"),
        ({"name": "A", "counts": "1-1", "depends_on": [""]}, "dependency '' is not a model name"),
        ({"name": "A", "counts": "1-1", "kind": "local"}, "kind 'local' is unknown"),
    ],
)
def test_partial_model_errors(kwargs: dict, fragment: str) -> None:
    name = kwargs.pop("name")
    counts = kwargs.pop("counts")
    with pytest.raises(SpecError) as err:
        PartialModelSpec.parse(name, counts, **kwargs)
    assert fragment in str(err.value)


def test_partial_model_constructor_errors_name_the_model() -> None:
    with pytest.raises(SpecError, match=r"partial model 'B'.*negative neuron count"):
        PartialModelSpec("B", (1, -1))
    with pytest.raises(SpecError, match=r"partial model 'B'.*counts given as a string"):
        PartialModelSpec("B", "1-1")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"partial model 'B'.*not an integer"):
        PartialModelSpec("B", (1, "2"))  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"partial model 'B'.*not the string"):
        PartialModelSpec("B", (1, 1), "G")  # type: ignore[arg-type]


def test_spec_error_is_a_value_error() -> None:
    assert issubclass(SpecError, ValueError)
