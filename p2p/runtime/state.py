"""Convert between a running node and its checkpoint (:class:`NodeState`).

Both directions work on :class:`StatefulNode`, the narrow view of what a
checkpoint holds (network and optimizer, push-sum cores, counters, progress,
the sampler's view, the node id), not on the whole node. :func:`resume_from`
reads both checkpoints of the store, refuses what no node could hold (a bad
digest, non-finite values, values beyond the merge bounds) and falls back to
the older one; docs/guide/operations.md says what the operator sees.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from gossip import PushSum, PushSumSnapshot
from gossip.validation import MAX_ABS_VALUE
from p2p.runtime.checkpoint import (
    CheckpointConflict,
    CheckpointCorrupt,
    CheckpointError,
    CheckpointStore,
    GroupsRecord,
    NodeState,
    PeerRecord,
    PushSumRecord,
)
from p2p.runtime.finite_guard import tensors_in
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


class Resumed:
    """What :func:`resume_from` did, for the log and ``p2p status``: the state
    resumed (None: none on disk), the file it came from, and a one-line note
    when it was not the newest checkpoint or a file was moved aside."""

    def __init__(self, state: NodeState | None, path: Path | None = None,
                 note: str | None = None) -> None:
        self.state, self.path, self.note = state, path, note



def _record(d: Descriptor) -> PeerRecord:
    return PeerRecord(d.node_id, d.address, d.age, tuple(sorted(d.tags)))


def snapshot_state(node: StatefulNode) -> NodeState:
    """Everything needed to resume ``node``: network, push-sum state, counters, view."""
    pushsum = {}
    for name, core in node.cores.items():
        snap = core.snapshot()
        # the estimate only while noise is held apart: a restore reads "noisy" from it
        pushsum[name] = PushSumRecord(snap.weight, snap.values,
                                      snap.estimate if snap.noisy else None, snap.seen)
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


def resume_from(node: StatefulNode, store: CheckpointStore) -> Resumed:
    """Load the newest good checkpoint of ``store`` into ``node`` if it was trained with
    the same layout and data as ``node.trained_with``.

    Both files are checked (digest, structure, :func:`check_values`); a corrupt
    one is moved aside (``<name>.corrupt-<time>``) with one line, and the older
    is resumed when the newer is corrupt. Raises :class:`CheckpointCorrupt`
    (after moving them aside) when both are, and :class:`CheckpointConflict`
    (one line: what differs, and that ``--fresh`` moves the old checkpoint aside)
    rather than let a changed configuration overwrite a trained model. A
    checkpoint written before the record existed is loaded if its tensors fit,
    and said so.
    """
    aside = store.path.with_name(f"{store.path.stem}.<date-time>.old")
    hint = f"pass --fresh to start over (the old checkpoint is moved to {aside})"
    found: list[tuple[Path, NodeState]] = []
    corrupt: list[tuple[Path, CheckpointCorrupt]] = []
    for path, outcome in _read_both(node, store):
        if isinstance(outcome, NodeState):
            found.append((path, outcome))
        elif isinstance(outcome, CheckpointCorrupt):
            corrupt.append((path, outcome))
        elif not found:  # unreadable, another identity or version: the operator decides
            raise CheckpointConflict(f"{outcome}; {hint}") from outcome
        else:
            logger.warning("%s; it is replaced at the next checkpoint", outcome)
    if not found:
        if corrupt:
            raise CheckpointCorrupt(_all_corrupt(store, _set_aside(store, corrupt)))
        return Resumed(None)
    path, state = found[0]
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
            f"checkpoint {path} does not fit this configuration's network ({first[:200]}); "
            f"restore the settings it was trained with, or {hint}") from exc
    if state.trained_with is None:
        logger.info("checkpoint %s does not record the settings it was trained with (an older "
                    "version wrote it); resumed it because its network fits this configuration. "
                    "The next checkpoint records them", path)
    if not state.sealed:
        logger.warning("checkpoint %s carries no digest (an older version wrote it): resumed "
                       "after checking its values; the next checkpoint carries one", path)
    # set aside once the good one is resumed: a conflict above leaves every file as it is
    note = _resume_note(node, store, path, state, _set_aside(store, corrupt))
    if note is not None:
        logger.warning("%s", note)
    return Resumed(state, path, note)


def _read_both(node: StatefulNode, store: CheckpointStore
               ) -> Iterator[tuple[Path, NodeState | CheckpointError]]:
    """Each checkpoint file present, newest first, with its state (checked by
    :func:`check_values`) or why it was refused."""
    for path in (store.path, store.previous):
        try:
            state = store.load(expected_node_id=node.identity.node_id, path=path)
            if state is None:
                continue
            check_values(node, state, path)
        except CheckpointError as exc:
            yield path, exc
            continue
        yield path, state


def _set_aside(store: CheckpointStore, corrupt: list[tuple[Path, CheckpointCorrupt]]
               ) -> list[tuple[Path, CheckpointCorrupt, Path]]:
    """Move each corrupt file to ``<name>.corrupt-<time>``; (file, why, where it went)."""
    return [(path, exc, store.rename(path, store.corrupt_path(path))) for path, exc in corrupt]


def _all_corrupt(store: CheckpointStore,
                 moved: list[tuple[Path, CheckpointCorrupt, Path]]) -> str:
    """The one line of a node that found no good checkpoint."""
    what = "; ".join(str(exc) for _, exc, _ in moved)
    where = ", ".join(f"{path.name} to {target}" for path, _, target in moved)
    return (f"no good checkpoint in {store.data_dir}: {what}. Moved {where}; the node "
            "refuses to start rather than train from round 0 unannounced: run it again "
            "to start over with the same identity, or restore a backup of the checkpoint")


def _resume_note(node: StatefulNode, store: CheckpointStore, path: Path, state: NodeState,
                 moved: list[tuple[Path, CheckpointCorrupt, Path]]) -> str | None:
    """One line when the node did not resume the newest checkpoint, or set a file aside."""
    parts = [f"{exc}; moved it to {target}" for _, exc, target in moved]
    if path == store.previous:
        when = ("" if state.saved_at is None else
                ", saved " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(state.saved_at)))
        weights = ", ".join(f"{name} {core.weight:.4g}" for name, core in node.cores.items())
        why = "" if moved and moved[0][0] == store.path else f"{store.path.name} is missing; "
        parts.append(
            f"{why}resumed the older checkpoint {path.name} (round {state.round}{when}). The "
            "rounds since are trained again; its push-sum state is the older one (weights: "
            f"{weights or 'no shared model'}), so the mass it exchanged since then is lost or "
            "counted twice in the swarm's sums, as after a crash: the averages stay averages "
            "of the models, shifted by at most this node's share")
    elif moved:
        parts.append("the next checkpoint writes a new older one")
    return "; ".join(parts) if parts else None


def check_values(node: StatefulNode, state: NodeState, path: Path) -> None:
    """Raise :class:`CheckpointCorrupt` if the checkpoint at ``path`` holds values
    ``node`` could not hold (:func:`state_problem`)."""
    problem = state_problem(node, state)
    if problem is not None:
        raise CheckpointCorrupt(f"checkpoint {path} is corrupt: {problem}")


def state_problem(node: StatefulNode, state: NodeState) -> str | None:
    """Why ``state`` holds values ``node`` could not hold, or None: non-finite numbers
    anywhere, parameters or push-sum values beyond the bounds a merge applies, a
    push-sum weight outside ``(0, max_weight]``, or (in a file with a digest) a
    held-apart estimate in a node that runs no masking."""
    for key, tensor in state.model_state.items():
        reason = _out_of_bounds(tensor.detach().numpy(), MAX_ABS_VALUE)
        if reason is not None:
            return f"model_state[{key!r}] {reason}"
    for key, tensor in tensors_in(state.optimizer_state, "optimizer_state"):
        reason = _out_of_bounds(tensor.detach().numpy(), float("inf"))
        if reason is not None:
            return f"{key} {reason}"
    masked = any(core.privacy == "masked" for core in node.cores.values())
    for name, rec in state.pushsum.items():
        core = node.cores.get(name)
        bound = MAX_ABS_VALUE if core is None else core.max_abs_value
        max_weight = 1e6 if core is None else core.max_weight
        if not (np.isfinite(rec.weight) and 0.0 < rec.weight <= max_weight):
            return (f"push-sum weight of model {name!r} is {rec.weight!r}, expected a number "
                    f"in (0, {max_weight:g}]")
        for what, values in (("values", rec.values), ("estimate", rec.estimate)):
            reason = None if values is None else _out_of_bounds(values, bound)
            if reason is not None:
                return f"push-sum {what} of model {name!r} {reason}"
        if state.sealed and rec.estimate is not None and not masked:
            return (f"push-sum estimate of model {name!r} holds mask noise apart, but this "
                    "node runs no masking")
    return None


def _out_of_bounds(values: np.ndarray, bound: float) -> str | None:
    """Why ``values`` are not finite floats within ``bound`` in magnitude (None if they are)."""
    if not np.issubdtype(values.dtype, np.floating) or not values.size:
        return None
    finite = np.isfinite(values)
    if not finite.all():
        return f"holds {int(values.size - np.count_nonzero(finite))} non-finite value(s)"
    largest = float(np.abs(values).max())
    if largest > bound:
        return f"holds a value of magnitude {largest:.3g}, beyond the bound {bound:g}"
    return None


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
        # with a digest the estimate is stored only while noise is held apart; older
        # files always store it, and noise shows as a difference
        noisy = (rec.estimate is not None if state.sealed
                 else bool((estimate != rec.values).any()))
        core.restore(PushSumSnapshot(
            fingerprint=core.fingerprint, values=rec.values, estimate=estimate,
            weight=rec.weight, noisy=noisy, noise_age=0, seen=rec.seen,
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
