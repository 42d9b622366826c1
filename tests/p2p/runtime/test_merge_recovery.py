"""A node's roll-back of a round's merges judged on its held-out loss
(p2p.runtime.merge_recovery over gossip.recovery): the glue between the trainer's
sync, the probe evaluations, the roll-back and the strikes."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import numpy as np

from gossip import GuardSettings, ModelSync, PartnerChoice, Push, PushSum, encode
from learner.trainer import Evaluation
from p2p.runtime.merge_recovery import NodeRecovery
from p2p.runtime.train_runner import InlineRunner

FP = bytes(range(32))
GOOD = np.full(40, 1.0)  # where the loss is lowest


class _Net:
    def __init__(self, values: np.ndarray) -> None:
        self.v = values.copy()

    def extract(self, name: str) -> np.ndarray:
        return self.v.copy()

    def assign(self, name: str, vector: np.ndarray) -> None:
        self.v = np.asarray(vector, dtype=np.float64).copy()


def _node() -> tuple[Any, _Net, PushSum, list[bytes]]:
    net = _Net(GOOD)
    core = PushSum(FP, GOOD, guard=GuardSettings())
    struck: list[bytes] = []
    partners = PartnerChoice(random.Random(0), on_strike=lambda peer, pause: struck.append(peer))

    def evaluate(x: np.ndarray, y: np.ndarray) -> Evaluation:
        # the loss grows with the distance from GOOD: a stand-in for a network's
        return Evaluation(accuracy=0.0, loss=0.1 + float(np.linalg.norm(net.v - GOOD)),
                          samples=len(y))

    node = SimpleNamespace(
        learning=SimpleNamespace(data=SimpleNamespace(test_x=np.zeros((8, 2)),
                                                      test_y=np.zeros(8, dtype=np.int64)),
                                 trainer=SimpleNamespace(evaluate=evaluate)),
        cores={"m": core}, runner=InlineRunner(), gossip=SimpleNamespace(partners=partners),
        peers=SimpleNamespace(distrust=lambda peer, seconds: struck.append(peer)),
        sync=ModelSync(net, {"m": core}))
    return node, net, core, struck


def _merge(core: PushSum, sender: bytes, values: np.ndarray, push_id: int) -> None:
    core.on_push(sender, Push(FP, push_id, encode(values, "f64"), 0.5), 0.0)


async def test_merges_that_make_the_held_out_loss_jump_are_rolled_back() -> None:
    node, net, core, struck = _node()
    recovery = NodeRecovery(node)
    net.v = GOOD + 0.01  # the round's training
    _merge(core, b"honest", GOOD + 0.02, 1)
    await recovery.sync()  # a small honest merge: kept
    assert recovery.rollbacks == 0 and not struck
    kept = net.v.copy()
    net.v = kept + 0.01  # the next round's training ...
    _merge(core, b"liar", GOOD + 0.4, 2)  # ... and a merge far off
    _merge(core, b"honest", kept, 3)
    await recovery.sync()
    assert recovery.rollbacks == 1
    np.testing.assert_allclose(net.v, kept + 0.01)  # own training kept, merges dropped
    np.testing.assert_allclose(core.values, kept + 0.01)
    assert not struck  # blamed once: honest merges make a jump now and then
    net.v = net.v + 0.01
    _merge(core, b"liar", GOOD + 0.4, 4)  # the same liar, the next round
    await recovery.sync()
    assert recovery.rollbacks == 2 and struck == [b"liar"]  # the largest mover only


async def test_without_held_out_data_the_merges_are_synced_unjudged() -> None:
    node, net, core, struck = _node()
    node.learning.data = SimpleNamespace(test_x=np.zeros((0, 2)),
                                         test_y=np.zeros(0, dtype=np.int64))
    recovery = NodeRecovery(node)
    _merge(core, b"liar", GOOD + 0.4, 1)
    await recovery.sync()
    assert recovery.rollbacks == 0 and not struck
    assert not np.allclose(net.v, GOOD)


def test_the_probe_reads_a_users_datasets_or_says_in_one_line_why_not(
        caplog: Any) -> None:
    import torch
    from torch.utils.data import TensorDataset

    from learner.data_factory import DatasetData
    from p2p.runtime.merge_recovery import PROBE_SAMPLES, _probe

    x, y = torch.arange(600.0).reshape(300, 2), torch.arange(300) % 3

    def data(test: Any, tensors: Any = None) -> DatasetData:
        return DatasetData(train=test, test=test, public=None, sample_shape=(2,),
                           num_classes=3, test_tensors=tensors)

    px, py = _probe(data(TensorDataset(x, y), (x, y)))
    assert len(py) == PROBE_SAMPLES and torch.equal(px, x[:PROBE_SAMPLES])
    px, py = _probe(data(TensorDataset(x, y)))  # items read one by one
    assert torch.equal(px, x[:PROBE_SAMPLES]) and torch.equal(py, y[:PROBE_SAMPLES])

    class Broken(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 10

        def __getitem__(self, i: int) -> Any:
            raise OSError("disk gone")

    assert _probe(data(Broken())) == (None, None)
    lines = [r.getMessage() for r in caplog.records if "gossip.recovery" in r.getMessage()]
    assert len(lines) == 1 and "disk gone" in lines[0]
