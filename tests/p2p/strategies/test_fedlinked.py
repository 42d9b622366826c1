"""FedLinked's maths, its wire messages, data.classes and its config rules (no node)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from learner.data import DataSpec, load_node_data
from learner.data_errors import DataError
from learner.schemes import averaging_level
from p2p.config import ConfigError, NodeConfig, StrategyConfig, load_config
from p2p.runtime.protocol import register_node_messages
from p2p.strategies.fedlinked.maths import (
    RepresentationError,
    align,
    alignment,
    check_representation,
    distillation_loss,
    distillation_target,
    utilities,
)
from p2p.strategies.fedlinked.messages import (
    MAX_VALUES,
    FedLinkedMessageError,
    FedLinkedPull,
    FedLinkedReply,
    public_digest,
    representation_of,
)
from p2p.wire import codec


def _orthogonal(n: int, rng: np.random.Generator) -> np.ndarray:
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return q


def _task_representation(labels: np.ndarray, centres: np.ndarray, rng: np.random.Generator,
                         noise: float = 0.3) -> np.ndarray:
    """Features that separate the public samples by the classes a task cares about."""
    return centres[labels] + noise * rng.standard_normal((labels.size, centres.shape[1]))


# ------------------------------------------------------------------ alignment


def test_alignment_recovers_a_known_rotation() -> None:
    rng = np.random.default_rng(1)
    own = rng.standard_normal((200, 8))
    own -= own.mean(axis=0)
    q = _orthogonal(8, rng)
    peer = own @ q.T  # the peer holds the same features, rotated
    b = alignment(peer, own)
    np.testing.assert_allclose(b, q.T, atol=1e-8)  # B undoes the rotation
    np.testing.assert_allclose(peer @ b.T, own, atol=1e-8)
    found = align(3.0 * peer + 5.0, own + 1.0)  # scale and offset do not matter
    assert found.similarity == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(found.aligned, own + 1.0, atol=1e-8)


def test_alignment_maps_between_widths() -> None:
    rng = np.random.default_rng(2)
    own = rng.standard_normal((100, 6))
    peer = np.hstack([own @ _orthogonal(6, rng), np.zeros((100, 4))])  # 10 features
    found = align(peer, own)
    assert found.aligned.shape == own.shape
    assert found.similarity == pytest.approx(1.0, abs=1e-9)


def test_a_constant_representation_has_utility_zero() -> None:
    rng = np.random.default_rng(3)
    own = rng.standard_normal((50, 4))
    assert align(np.ones((50, 4)), own).similarity == 0.0


def test_bad_representations_are_refused_with_the_reason() -> None:
    with pytest.raises(RepresentationError, match="peer representation: contains NaN"):
        align(np.full((5, 3), np.nan), np.ones((5, 3)))
    with pytest.raises(RepresentationError, match="has 4 rows, expected 5"):
        align(np.ones((4, 3)), np.ones((5, 3)))
    with pytest.raises(RepresentationError, match="2-D"):
        check_representation(np.ones(5), "x")


# ------------------------------------------------------------------ utilities


def test_utilities_favour_a_same_task_peer() -> None:
    rng = np.random.default_rng(4)
    digits = rng.integers(0, 10, size=300)  # the public split's true classes
    mine = np.array([0, 5, 6, 9])
    theirs = np.array([1, 2, 4, 7])

    def task_labels(classes: np.ndarray) -> np.ndarray:
        # a task tells its own classes apart and lumps the others together
        return np.where(np.isin(digits, classes), digits, 10)

    centres = rng.standard_normal((11, 16)) * 2.0
    own = _task_representation(task_labels(mine), centres, rng)
    same = _task_representation(task_labels(mine), centres, rng) @ _orthogonal(16, rng)
    other = _task_representation(task_labels(theirs), centres, rng) @ _orthogonal(16, rng)
    result = distillation_target(own, {"same": same, "other": other}, eta=2.0)
    assert result.utilities["same"] > result.utilities["other"]
    assert result.similarities["same"] > 0.8
    assert sum(u * u for u in result.utilities.values()) == pytest.approx(2.0)


def test_utilities_follow_the_reports_normalisation() -> None:
    found = utilities({"a": 3.0, "b": 4.0}, eta=1.0)
    assert found == pytest.approx({"a": 0.6, "b": 0.8})
    assert utilities({"a": 0.0}, eta=1.0) == {"a": 0.0}
    with pytest.raises(ValueError, match="eta"):
        utilities({"a": 1.0}, eta=0.0)


def test_the_target_weighs_peers_by_utility_and_sharpness() -> None:
    rng = np.random.default_rng(5)
    own = rng.standard_normal((80, 5))
    twin = own @ _orthogonal(5, rng)  # similarity 1
    noise = rng.standard_normal((80, 5))  # similarity well below 1
    mild = distillation_target(own, {"twin": twin, "noise": noise})
    sharp = distillation_target(own, {"twin": twin, "noise": noise}, sharpness=64.0)
    error_mild = np.linalg.norm(mild.target - own)
    error_sharp = np.linalg.norm(sharp.target - own)
    assert error_sharp < 0.01 * np.linalg.norm(own) < error_mild
    with pytest.raises(ValueError, match="no peer"):
        distillation_target(own, {})


# ------------------------------------------------------------------ loss


def test_distillation_loss_gradient_matches_its_formula() -> None:
    torch.manual_seed(0)
    rep = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    target = torch.randn(6, 4, dtype=torch.float64)
    loss = distillation_loss(rep, target)
    loss.backward()
    assert rep.grad is not None
    expected = 2.0 * (rep.detach() - target) / rep.shape[0]
    torch.testing.assert_close(rep.grad, expected)
    assert float(distillation_loss(target, target)) == 0.0
    # a small step against the gradient lowers the loss
    stepped = rep.detach() - 0.1 * rep.grad
    assert float(distillation_loss(stepped, target)) < float(loss.detach())
    with pytest.raises(ValueError, match="shape"):
        distillation_loss(rep, target[:3])


# ------------------------------------------------------------------ messages


def _reply(values: np.ndarray, *, digest: bytes = b"d" * 16, rows: int = 3,
           features: int = 2) -> FedLinkedReply:
    return FedLinkedReply(digest, rows, features, 7, values.astype(np.float32))


def test_messages_round_trip() -> None:
    register_node_messages()
    pull = FedLinkedPull(public_digest(np.ones((3, 2))))
    assert codec.decode(codec.encode(pull)) == pull
    rep = np.arange(6, dtype=np.float32).reshape(3, 2)
    reply = codec.decode(codec.encode(_reply(rep.ravel())))
    assert isinstance(reply, FedLinkedReply) and reply.round == 7
    np.testing.assert_array_equal(representation_of(reply, b"d" * 16, 3), rep)


def test_bad_replies_are_refused_naming_the_field() -> None:
    good = np.zeros(6)
    with pytest.raises(FedLinkedMessageError, match="digest differs"):
        representation_of(_reply(good, digest=b"e" * 16), b"d" * 16, 3)
    with pytest.raises(FedLinkedMessageError, match="rows is 3, expected 4"):
        representation_of(_reply(good), b"d" * 16, 4)
    with pytest.raises(FedLinkedMessageError, match="values holds 5 numbers"):
        representation_of(_reply(np.zeros(5)), b"d" * 16, 3)
    with pytest.raises(FedLinkedMessageError, match="NaN"):
        representation_of(_reply(np.array([0, 1, np.nan, 0, 0, 0])), b"d" * 16, 3)
    rows = MAX_VALUES // 4 + 1
    with pytest.raises(FedLinkedMessageError, match="exceed the limit"):
        representation_of(_reply(np.zeros(4), rows=rows, features=4), b"d" * 16, rows)
    with pytest.raises(codec.EncodeError, match="float32"):  # the codec refuses other dtypes
        codec.encode(FedLinkedReply(b"d", 1, 1, 0, np.zeros(1, np.float64)))


def test_public_digest_tells_public_splits_apart() -> None:
    x = np.zeros((4, 3), np.float32)
    assert public_digest(x) == public_digest(x.copy())
    assert public_digest(x) != public_digest(x[:3])
    assert public_digest(x) != public_digest(x + 1)


# ------------------------------------------------------------------ data.classes


def test_data_classes_keep_a_nodes_classes_only() -> None:
    spec = DataSpec(task="digits", num_nodes=4, node_index=1, public_size=100,
                    classes=(0, 5, 6, 9))
    data = load_node_data(spec)
    everything = load_node_data(dataclasses.replace(spec, classes=None))
    assert set(np.unique(data.train_y)) == {0, 5, 6, 9}
    assert set(np.unique(data.test_y)) == {0, 5, 6, 9}
    assert data.train_y.size == int(np.isin(everything.train_y, [0, 5, 6, 9]).sum())
    assert data.public_y.size == 100 and len(np.unique(data.public_y)) == 10  # all kept
    with pytest.raises(DataError, match="classes.*distinct"):
        DataSpec(classes=(1, 1))
    with pytest.raises(DataError, match="12 is not a class"):
        load_node_data(dataclasses.replace(spec, classes=(0, 12)))


def test_data_classes_config_key(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "node.toml"
    path.write_text("[data]\nclasses = [1, 2, 4, 7]\npublic_size = 50\n")
    assert load_config(path).data.classes == (1, 2, 4, 7)
    path.write_text('[data]\nclasses = "0,3"\n')
    assert load_config(path).data.classes == (0, 3)
    path.write_text("[data]\nclasses = [1, -2]\n")
    with pytest.raises(ConfigError, match=r"data\.classes: expected distinct integers >= 0"):
        load_config(path)


def test_fedlinked_refuses_shared_models() -> None:
    base = NodeConfig()
    config = dataclasses.replace(base, models=tuple(averaging_level(base.network.spec, 50.0)))
    with pytest.raises(ConfigError, match="sends no parameters") as err:
        dataclasses.replace(config, strategy=StrategyConfig(name="fedlinked"))
    assert err.value.key == "strategy.name"
    local = dataclasses.replace(config, models=(), strategy=StrategyConfig(name="fedlinked"))
    assert local.strategy.fedlinked_weight > 0


def test_the_experiment_counts_same_set_rankings() -> None:
    from lab.paper import fedlinked as module

    assert [module.task_set(i, 12) for i in range(12)] == [0] * 4 + [1] * 4 + [2] * 4
    # node 0 (set 0) ranks same-set peer 1 above other-set 4 but below other-set 8
    utilities = [{1: 0.5, 4: 0.4, 8: 0.6}] + [{} for _ in range(11)]
    assert module.same_task_first(utilities, 12) == 0.5
    assert module.same_task_first([{} for _ in range(12)], 12) is None
