"""Convert between a running node and its checkpoint (:class:`NodeState`).

Both directions work on :class:`StatefulNode`, the narrow view of what a
checkpoint holds (network and optimizer, push-sum cores, counters, progress,
the sampler's view, the node id), not on the whole node.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from gossip import PushSum, PushSumSnapshot
from p2p.runtime.checkpoint import (
    CheckpointConflict,
    CheckpointError,
    CheckpointStore,
    GroupsRecord,
    NodeState,
    PeerRecord,
    PushSumRecord,
)
from p2p.runtime.training_record import TrainingRecord, conflict_message, record_changes
from peersampling import Descriptor, PeerSampler

if TYPE_CHECKING:
    from p2p.runtime.assembly import LearningSetup
    from p2p.wire.identity import Identity

COUNTER_SEP = "."  # push-sum counters are kept per model under "<model>.<counter>"

logger = logging.getLogger(__name__)


class RoundProgress(Protocol):
    """The trainer's progress a checkpoint keeps."""

    round: int
    steps: int
    loss: float | None
    accuracy: float | None
    test_loss: float | None


class StatefulNode(Protocol):
    """What :func:`snapshot_state` reads and :func:`restore_state` writes.

    ``counters`` and ``counter_base`` are updated in place on restore;
    ``restored_view`` is replaced (the sampler does not exist yet then).
    """

    restored_view: list[Descriptor]

    @property
    def identity(self) -> Identity: ...
    @property
    def learning(self) -> LearningSetup: ...
    @property
    def cores(self) -> Mapping[str, PushSum]: ...
    @property
    def counters(self) -> dict[str, int]: ...
    @property
    def counter_base(self) -> dict[str, dict[str, int]]: ...
    @property
    def progress(self) -> RoundProgress: ...
    @property
    def started_sampler(self) -> PeerSampler | None: ...
    @property
    def trained_with(self) -> TrainingRecord: ...

    def flat_model_counters(self) -> dict[str, int]: ...
    def groups_record(self) -> GroupsRecord | None: ...
    def restore_groups(self, groups: GroupsRecord) -> None: ...



def _record(d: Descriptor) -> PeerRecord:
    return PeerRecord(d.node_id, d.address, d.age, tuple(sorted(d.tags)))


def snapshot_state(node: StatefulNode) -> NodeState:
    """Everything needed to resume ``node``: network, push-sum state, counters, view."""
    pushsum = {}
    for name, core in node.cores.items():
        snap = core.snapshot()
        pushsum[name] = PushSumRecord(snap.weight, snap.values, snap.estimate, snap.seen)
    counters = {**node.counters, **node.flat_model_counters()}
    return NodeState(
        model_state={k: v.detach().clone() for k, v in node.learning.network.state_dict().items()},
        pushsum=pushsum,
        counters=counters,
        round=node.progress.round,
        steps=node.progress.steps,
        view=[_record(d) for d in
              (node.started_sampler.snapshot() if node.started_sampler is not None
               else node.restored_view)],
        # a deep copy: the worker thread may step the optimizer while this is saved
        optimizer_state=copy.deepcopy(node.learning.trainer.optimizer_state()),
        node_id=node.identity.node_id,
        saved_at=time.time(),
        trained_with=dict(node.trained_with),
        loss=node.progress.loss,
        accuracy=node.progress.accuracy,
        test_loss=node.progress.test_loss,
        privacy_history=_privacy_history(node),
        groups=node.groups_record(),
    )


def _privacy_history(node: StatefulNode) -> list[tuple[float, float, int]] | None:
    """The DP accountant's count (None when the node does not train with DP-SGD)."""
    privacy = node.learning.trainer.privacy
    if privacy is not None:
        return list(privacy.history)
    return None


def resume_from(node: StatefulNode, store: CheckpointStore) -> NodeState | None:
    """Load the checkpoint of ``store`` into ``node`` if it was trained with the
    same layout and data as ``node.trained_with``; ``None`` if there is none.

    Raises :class:`CheckpointConflict` (one line: what differs, and that
    ``--fresh`` moves the old checkpoint aside) rather than let a changed
    configuration overwrite a trained model. A checkpoint written before the
    record existed is loaded if its tensors fit, and said so.
    """
    aside = store.path.with_name(f"{store.path.stem}.<date-time>.old")
    hint = f"pass --fresh to start over (the old checkpoint is moved to {aside})"
    try:
        state = store.load(expected_node_id=node.identity.node_id)
    except CheckpointError as exc:
        raise CheckpointConflict(f"{exc}; {hint}") from exc
    if state is None:
        return None
    if state.trained_with is not None:
        changes = record_changes(state.trained_with, node.trained_with)
        if changes:
            raise CheckpointConflict(conflict_message(store.data_dir, changes, str(aside)))
    try:
        restore_state(node, state)
    except (RuntimeError, ValueError, KeyError) as exc:
        # torch's size-mismatch text is a multi-line essay: keep its first line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointConflict(
            f"checkpoint {store.path} does not fit this configuration's network ({first[:200]}); "
            f"restore the settings it was trained with, or {hint}") from exc
    if state.trained_with is None:
        logger.info("checkpoint %s does not record the settings it was trained with (an older "
                    "version wrote it); resumed it because its network fits this configuration. "
                    "The next checkpoint records them", store.path)
    return state


def _restore_privacy(node: StatefulNode, state: NodeState) -> None:
    """Resume the DP accountant's count, so that a restart never resets the epsilon spent."""
    privacy = node.learning.trainer.privacy
    history = state.privacy_history or []
    if privacy is not None:
        privacy.accountant.resume(history)
        if history:
            logger.info("privacy: resumed the count of %d DP-SGD steps (epsilon %.4g at delta %g)",
                        privacy.accountant.steps, privacy.epsilon(), privacy.config.delta)
    elif any(steps for _, _, steps in history):
        logger.warning("the checkpoint was trained with DP-SGD (%d steps) but gossip.privacy "
                       "no longer asks for it: the rounds trained from now on have no "
                       "differential-privacy guarantee", sum(n for _, _, n in history))


def restore_state(node: StatefulNode, state: NodeState) -> None:
    """Load ``state`` into a freshly built ``node`` (before it starts running)."""
    if state.groups is not None:
        # the automatic semi-local model first: its push-sum state is restored below
        node.restore_groups(state.groups)
    node.learning.network.load_state_dict(state.model_state)
    if state.optimizer_state is not None:
        try:
            node.learning.trainer.load_optimizer_state(state.optimizer_state)
        except (ValueError, KeyError) as exc:
            logger.warning("optimizer state not restored (%s); starting it fresh", exc)
    for name, rec in state.pushsum.items():
        core = node.cores.get(name)
        if core is None:
            logger.warning("checkpoint holds model %r, which this configuration does not", name)
            continue
        estimate = rec.values if rec.estimate is None else rec.estimate
        core.restore(PushSumSnapshot(
            fingerprint=core.fingerprint, values=rec.values, estimate=estimate,
            weight=rec.weight, noisy=bool((estimate != rec.values).any()), noise_age=0,
            seen=rec.seen,
        ))
    for key, value in state.counters.items():
        name, sep, counter = key.rpartition(COUNTER_SEP)
        if sep and name in node.cores:
            node.counter_base.setdefault(name, {})[counter] = value
        elif key in node.counters:
            node.counters[key] = value
    _restore_privacy(node, state)
    node.progress.round = state.round
    node.progress.steps = state.steps
    node.progress.loss = state.loss
    node.progress.accuracy = state.accuracy
    node.progress.test_loss = state.test_loss
    node.restored_view = [
        Descriptor(p.node_id, p.address, p.age, frozenset(t for t in p.tags if isinstance(t, bytes)))
        for p in state.view
    ]
