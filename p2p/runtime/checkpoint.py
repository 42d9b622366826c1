"""Node state on disk: atomic file writes and the checkpoint store.

A checkpoint file is a 48-byte header (magic, payload length, SHA-256 of the
payload) followed by the payload: :func:`torch.save` of a dict holding only
tensors and plain values, read back with ``torch.load(..., weights_only=True)``,
which refuses to unpickle anything else. A file whose digest does not match is
refused before it is decoded (:class:`CheckpointCorrupt`).

The store keeps two files, ``checkpoint.pt`` and the one before it,
``checkpoint.prev.pt``: a save verifies the current file, renames it to the
previous name and renames the new one (written and fsync'ed first) into place,
so a crash or a full disk at any point leaves the last good state on disk.
How a node resumes from them, falling back to the older, is
:func:`p2p.runtime.state.resume_from`; see docs/guide/operations.md.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from p2p.files import FileWriteError, describe_os_error, write_private_file
from p2p.runtime.data_dir import CheckpointError, DataDirError, check_data_dir_writable

logger = logging.getLogger(__name__)

__all__ = [
    "CHECKPOINT_FILENAME",
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "PREVIOUS_FILENAME",
    "CheckpointConflict",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointStore",
    "DataDirError",
    "GroupsRecord",
    "NodeState",
    "PeerRecord",
    "PushSumRecord",
    "atomic_write_bytes",
    "check_data_dir_writable",
]

CHECKPOINT_FILENAME = "checkpoint.pt"
#: The checkpoint before the newest (the store keeps two).
PREVIOUS_FILENAME = "checkpoint.prev.pt"
CHECKPOINT_FORMAT = "p2p-gossip-learning/checkpoint"
CHECKPOINT_VERSION = 5
#: Versions this program reads: 1 lacks the push-sum duplicate windows (``seen``),
#: 1 and 2 the automatic groups (read as none: such a node had not grouped).
#: 3 added the groups so that an older program, which would drop them, refuses it;
#: 4 their grouping attempt (a version 3 checkpoint's groups read as attempt 0), so
#: that a program without attempts, which would mix an attempt's records into
#: the first one, refuses it. 5 is the first inside a digest envelope (an older
#: program cannot decode the envelope, so it refuses it); 1-4 have none.
READABLE_VERSIONS = (1, 2, 3, 4, 5)
#: The envelope: magic, payload length (8 bytes, big-endian), SHA-256 of the payload.
MAGIC = b"P2PCKPT\x00"
HEADER_BYTES = len(MAGIC) + 8 + 32
_ZIP_MAGIC = b"PK\x03\x04"  # a bare torch.save file: versions 1-4, no digest


class CheckpointCorrupt(CheckpointError):
    """The file is not what this program wrote: truncated, bytes changed on disk (its
    digest does not match), or values no node could hold. The node falls back to the
    older checkpoint rather than resume it."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EINVAL, message)


class CheckpointConflict(CheckpointError):
    """The checkpoint cannot be resumed with this configuration (another layout or
    data, or an unreadable file); the message says what differs and how to start
    over (``p2p run --fresh``). The node refuses to start rather than overwrite it."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EINVAL, message)


# --------------------------------------------------------------------------- atomic write


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically, with permissions ``mode``
    (:func:`p2p.files.write_private_file`).

    On failure (unwritable directory, full disk, ...) raises
    :class:`CheckpointError` naming ``path`` and the cause; the previous file
    is left untouched and the temporary file is removed.
    """
    try:
        write_private_file(path, data, mode=mode)
    except FileWriteError as exc:
        raise CheckpointError(exc.errno, str(exc)) from exc


# --------------------------------------------------------------------------- state


@dataclass(frozen=True)
class PeerRecord:
    """One peer-sampling descriptor as stored: (node id, address, age, tags)."""

    node_id: bytes
    address: str
    age: int
    tags: tuple[str | bytes, ...] = ()


@dataclass(frozen=True)
class PushSumRecord:
    """Push-sum state of one shared model: weight ``w_m``, values ``z_m`` and
    (optionally) the de-biased estimate the trainer uses, when it differs from
    ``values`` (e.g. during the masked phase)."""

    weight: float
    values: np.ndarray
    estimate: np.ndarray | None = None
    # merged push ids per sender: (sender, highest id, merged bits, replied bits), as
    # gossip.DupWindow.export gives them (empty from a version 1 checkpoint)
    seen: tuple[tuple[bytes, int, int, int], ...] = ()


@dataclass(frozen=True)
class GroupsRecord:
    """Automatic groups a node applied (``clustering.mode = "auto"``): a restart
    declares the same semi-local model again instead of redoing the agreement.

    Saved from the node's own record on: before agreement ``fingerprint`` is
    "" and only ``records`` count. ``groups`` is the agreed grouping (its
    ``fingerprint``); ``group`` this node's (for a late joiner, the group it
    ``joined``); ``model`` the
    semi-local model's name with its ``counts`` and ``depends_on`` (None, (),
    () for a node staying alone); ``records`` the projection records held,
    as (node id, record epoch, float64 little-endian bytes, signature);
    ``attempt`` the grouping attempt they belong to (``clustering.retries``; a
    checkpoint written before attempts existed reads as attempt 0).
    """

    epoch: int
    fingerprint: str
    groups: tuple[tuple[bytes, ...], ...]
    group: tuple[bytes, ...]
    joined: bool
    model: str | None
    counts: tuple[int, ...] = ()
    depends_on: tuple[str, ...] = ()
    records: tuple[tuple[bytes, int, bytes, bytes], ...] = ()
    attempt: int = 0


@dataclass
class NodeState:
    """Everything a node needs to resume where it stopped.

    ``model_state`` is the torch ``state_dict`` of the node's network;
    ``optimizer_state`` an optional optimizer ``state_dict``; ``pushsum`` maps a
    shared model's name to its push-sum record; ``counters`` are plain ints
    (pushes sent, masked pushes done, ...); ``view`` is the peer-sampling view
    and ``model_views`` the per-model views keyed by model name. ``node_id`` (the
    public key) lets a loader refuse a checkpoint written by another identity.
    ``privacy_history`` is the DP accountant's count, ``(noise multiplier, sample
    rate, steps)`` runs (None when the node did not train with DP-SGD): a restart
    resumes it, so the epsilon spent is never reset.
    """

    model_state: dict[str, torch.Tensor]
    pushsum: dict[str, PushSumRecord] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    round: int = 0
    steps: int = 0
    view: list[PeerRecord] = field(default_factory=list)
    model_views: dict[str, list[PeerRecord]] = field(default_factory=dict)
    optimizer_state: dict[str, Any] | None = None
    node_id: bytes | None = None
    saved_at: float | None = None
    trained_with: dict[str, str] | None = None
    loss: float | None = None
    accuracy: float | None = None
    test_loss: float | None = None
    privacy_history: list[tuple[float, float, int]] | None = None
    groups: GroupsRecord | None = None
    sealed: bool = True  # read back from a file with a digest (False: versions 1-4)


def _tag(tag: object) -> str | bytes:
    return tag if isinstance(tag, str | bytes) else str(tag)


def _peers_to_plain(
    peers: list[PeerRecord],
) -> list[tuple[bytes, str, int, tuple[str | bytes, ...]]]:
    return [(bytes(p.node_id), str(p.address), int(p.age), tuple(_tag(t) for t in p.tags))
            for p in peers]


def _state_to_plain(state: NodeState) -> dict[str, Any]:
    return {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "node_id": state.node_id,
        "saved_at": state.saved_at,
        "round": int(state.round),
        "steps": int(state.steps),
        "counters": {str(k): int(v) for k, v in state.counters.items()},
        "model_state": {k: v.detach().cpu() for k, v in state.model_state.items()},
        "optimizer_state": state.optimizer_state,
        "pushsum": {
            name: {"weight": float(rec.weight),
                   # copy: the tensor must not share memory with a live array
                   "values": torch.from_numpy(np.array(rec.values, copy=True)),
                   "estimate": None if rec.estimate is None
                   else torch.from_numpy(np.array(rec.estimate, copy=True)),
                   "seen": [(bytes(sender), int(high), _bits(merged), _bits(replied))
                            for sender, high, merged, replied in rec.seen]}
            for name, rec in state.pushsum.items()
        },
        "view": _peers_to_plain(state.view),
        "model_views": {name: _peers_to_plain(peers) for name, peers in state.model_views.items()},
        "trained_with": None if state.trained_with is None else dict(state.trained_with),
        "progress": {"loss": state.loss, "accuracy": state.accuracy,
                     "test_loss": state.test_loss},
        "privacy_history": None if state.privacy_history is None
        else [(float(s), float(q), int(n)) for s, q, n in state.privacy_history],
        "groups": None if state.groups is None else _groups_to_plain(state.groups),
    }


def _groups_to_plain(g: GroupsRecord) -> dict[str, Any]:
    return {"epoch": int(g.epoch), "fingerprint": str(g.fingerprint),
            "groups": [[bytes(m) for m in group] for group in g.groups],
            "group": [bytes(m) for m in g.group], "joined": bool(g.joined),
            "model": g.model, "counts": [int(c) for c in g.counts],
            "depends_on": [str(d) for d in g.depends_on],
            "records": [(bytes(n), int(e), bytes(v), bytes(sig)) for n, e, v, sig in g.records],
            "attempt": int(g.attempt)}


def _groups_from_plain(raw: object, path: Path) -> GroupsRecord | None:
    """The groups of a version 3 or 4 checkpoint (older ones have none; version 3 has no
    ``attempt``: attempt 0)."""
    if raw is None:
        return None

    def ids(value: object) -> bool:
        return isinstance(value, list | tuple) and all(isinstance(m, bytes) for m in value)

    if not (isinstance(raw, Mapping) and isinstance(raw.get("epoch"), int)
            and isinstance(raw.get("fingerprint"), str)
            and isinstance(raw.get("groups"), list | tuple) and all(ids(g) for g in raw["groups"])
            and ids(raw.get("group")) and isinstance(raw.get("joined"), bool)
            and (raw.get("model") is None or isinstance(raw.get("model"), str))
            and isinstance(raw.get("counts"), list | tuple)
            and all(isinstance(c, int) for c in raw["counts"])
            and isinstance(raw.get("depends_on"), list | tuple)
            and all(isinstance(d, str) for d in raw["depends_on"])
            and isinstance(raw.get("records"), list | tuple)
            and isinstance(raw.get("attempt", 0), int) and raw.get("attempt", 0) >= 0):
        raise _bad(path, "groups are malformed")
    records = []
    for rec in raw["records"]:
        if (not isinstance(rec, list | tuple) or len(rec) != 4 or not isinstance(rec[0], bytes)
                or not isinstance(rec[1], int) or not isinstance(rec[2], bytes)
                or not isinstance(rec[3], bytes)):
            raise _bad(path, "a projection record of the groups is malformed")
        records.append((rec[0], rec[1], rec[2], rec[3]))
    return GroupsRecord(raw["epoch"], raw["fingerprint"],
                        tuple(tuple(g) for g in raw["groups"]), tuple(raw["group"]),
                        raw["joined"], raw["model"], tuple(raw["counts"]),
                        tuple(raw["depends_on"]), tuple(records), int(raw.get("attempt", 0)))


def _bits(value: int) -> bytes:
    """A bit set as little-endian bytes (plain data for the safe loader).

    At least one byte: the safe loader refuses an empty ``bytes`` (pickled as a call)."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "little")


def _seen_from_plain(raw: object, path: Path, name: str
                     ) -> tuple[tuple[bytes, int, int, int], ...]:
    if not isinstance(raw, list | tuple) or not all(
            isinstance(row, tuple | list) and len(row) == 4 and isinstance(row[0], bytes)
            and isinstance(row[1], int) and row[1] >= 0
            and isinstance(row[2], bytes) and isinstance(row[3], bytes) for row in raw):
        raise _bad(path, f"push-sum duplicate window of model {name!r} is malformed")
    return tuple((row[0], row[1], int.from_bytes(row[2], "little"),
                  int.from_bytes(row[3], "little")) for row in raw)


def _bad(path: Path, what: str) -> CheckpointError:
    return CheckpointError(errno.EINVAL, f"checkpoint {path} is invalid: {what}")


def _peers_from_plain(raw: object, path: Path, where: str) -> list[PeerRecord]:
    if not isinstance(raw, list):
        raise _bad(path, f"{where} is not a list")
    peers = []
    for item in raw:
        if (not isinstance(item, tuple | list) or len(item) != 4
                or not isinstance(item[0], bytes) or not isinstance(item[1], str)
                or not isinstance(item[2], int) or not isinstance(item[3], tuple | list)):
            raise _bad(path, f"{where} holds a malformed peer entry")
        peers.append(PeerRecord(item[0], item[1], item[2], tuple(_tag(t) for t in item[3])))
    return peers


def _state_from_plain(raw: object, path: Path) -> NodeState:
    if not isinstance(raw, dict) or raw.get("format") != CHECKPOINT_FORMAT:
        raise _bad(path, "not a checkpoint of this program")
    version = raw.get("version")
    if version not in READABLE_VERSIONS:
        raise _bad(path, f"format version {version!r}, this program reads versions "
                   f"{', '.join(map(str, READABLE_VERSIONS))}")
    model_state = raw.get("model_state")
    if not isinstance(model_state, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in model_state.items()
    ):
        raise _bad(path, "model_state is not a mapping of names to tensors")
    pushsum: dict[str, PushSumRecord] = {}
    raw_pushsum = raw.get("pushsum", {})
    if not isinstance(raw_pushsum, Mapping):
        raise _bad(path, "pushsum is not a mapping")
    for name, rec in raw_pushsum.items():
        if (not isinstance(rec, Mapping) or not isinstance(rec.get("weight"), float)
                or not isinstance(rec.get("values"), torch.Tensor)):
            raise _bad(path, f"push-sum record of model {name!r} is malformed")
        estimate = rec.get("estimate")
        if estimate is not None and not isinstance(estimate, torch.Tensor):
            raise _bad(path, f"push-sum estimate of model {name!r} is not a tensor")
        pushsum[str(name)] = PushSumRecord(
            rec["weight"], rec["values"].numpy().copy(),
            None if estimate is None else estimate.numpy().copy(),
            _seen_from_plain(rec.get("seen", []), path, str(name)),
        )
    counters = raw.get("counters", {})
    if not isinstance(counters, Mapping) or not all(
        isinstance(k, str) and isinstance(v, int) for k, v in counters.items()
    ):
        raise _bad(path, "counters are not a mapping of names to integers")
    rnd, steps = raw.get("round"), raw.get("steps")
    if not isinstance(rnd, int) or not isinstance(steps, int):
        raise _bad(path, "round/steps are not integers")
    raw_views = raw.get("model_views", {})
    if not isinstance(raw_views, Mapping):
        raise _bad(path, "model_views is not a mapping")
    node_id = raw.get("node_id")
    if node_id is not None and not isinstance(node_id, bytes):
        raise _bad(path, "node_id is not bytes")
    optimizer_state = raw.get("optimizer_state")
    if optimizer_state is not None and not isinstance(optimizer_state, dict):
        raise _bad(path, "optimizer_state is not a mapping")
    saved_at = raw.get("saved_at")
    trained_with = raw.get("trained_with")
    if trained_with is not None and not (isinstance(trained_with, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in trained_with.items())):
        raise _bad(path, "trained_with is not a mapping of settings to text")
    progress = raw.get("progress", {})
    if not isinstance(progress, Mapping):
        raise _bad(path, "progress is not a mapping")
    privacy_history = _privacy_history(raw.get("privacy_history"), path)
    return NodeState(
        model_state=dict(model_state),
        pushsum=pushsum,
        counters=dict(counters),
        round=rnd,
        steps=steps,
        view=_peers_from_plain(raw.get("view", []), path, "view"),
        model_views={str(n): _peers_from_plain(v, path, f"model_views[{n!r}]")
                     for n, v in raw_views.items()},
        optimizer_state=optimizer_state,
        node_id=node_id,
        saved_at=float(saved_at) if isinstance(saved_at, int | float) else None,
        trained_with=None if trained_with is None else dict(trained_with),
        loss=_finite(progress.get("loss")),
        accuracy=_finite(progress.get("accuracy")),
        test_loss=_finite(progress.get("test_loss")),
        privacy_history=privacy_history,
        groups=_groups_from_plain(raw.get("groups"), path),
    )


def _privacy_history(raw: object, path: Path) -> list[tuple[float, float, int]] | None:
    """The DP accountant's runs as stored, checked entry by entry."""
    if raw is None:
        return None
    if not isinstance(raw, list | tuple):
        raise _bad(path, "privacy_history is not a list")
    runs = []
    for entry in raw:
        if (not isinstance(entry, list | tuple) or len(entry) != 3
                or not all(isinstance(v, int | float) and not isinstance(v, bool)
                           for v in entry)
                or not isinstance(entry[2], int) or entry[2] < 0
                or not (entry[0] >= 0 and 0 < entry[1] <= 1)):
            raise _bad(path, f"privacy_history holds a malformed run {entry!r}; expected "
                       "(noise multiplier >= 0, sample rate in (0, 1], steps >= 0)")
        runs.append((float(entry[0]), float(entry[1]), int(entry[2])))
    return runs


def _finite(value: object) -> float | None:
    """A float read back from a checkpoint, ``None`` if absent or not a finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def seal(payload: bytes) -> bytes:
    """``payload`` inside the digest envelope (see the module docstring)."""
    return MAGIC + len(payload).to_bytes(8, "big") + hashlib.sha256(payload).digest() + payload


def unseal(data: bytes, path: Path) -> tuple[bytes, bool]:
    """The payload of a checkpoint file's bytes and whether it had a digest (False: a
    bare torch file of versions 1-4). Raises :class:`CheckpointCorrupt` when the
    header, length or digest do not match."""
    if data.startswith(_ZIP_MAGIC):
        return data, False
    if not data.startswith(MAGIC) or len(data) < HEADER_BYTES:
        what = ("empty" if not data else f"only {len(data)} bytes" if MAGIC.startswith(data)
                else "its header is not a checkpoint's (overwritten or zeroed?)")
        raise CheckpointCorrupt(f"checkpoint {path} is corrupt: {what}")
    length = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "big")
    payload = data[HEADER_BYTES:]
    if len(payload) != length:
        raise CheckpointCorrupt(f"checkpoint {path} is corrupt: it holds {len(payload)} bytes "
                                f"of content, its header says {length} (truncated?)")
    if hashlib.sha256(payload).digest() != data[len(MAGIC) + 8:HEADER_BYTES]:
        raise CheckpointCorrupt(f"checkpoint {path} is corrupt: its content does not match "
                                "its SHA-256 digest (bytes changed on disk)")
    return payload, True


class CheckpointStore:
    """Saves and loads the node's :class:`NodeState` in ``data_dir``: the newest in
    ``path``, the one before in ``previous`` (see the module docstring).

    ``save`` is atomic and may be called from a worker thread (it does blocking
    I/O: from trio, use ``trio.to_thread.run_sync(store.save, state)``).
    """

    def __init__(self, data_dir: str | os.PathLike[str],
                 filename: str = CHECKPOINT_FILENAME) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / filename
        self.previous = self.data_dir / PREVIOUS_FILENAME

    def encode(self, state: NodeState) -> bytes:
        """The checkpoint file's bytes for ``state``."""
        buffer = io.BytesIO()
        torch.save(_state_to_plain(state), buffer)
        return seal(buffer.getvalue())

    def save(self, state: NodeState) -> int:
        """Write ``state`` atomically (mode 0600), keeping the checkpoint it replaces as
        ``previous``; returns the file size in bytes.

        Raises :class:`CheckpointError` on failure, leaving the previous
        checkpoints intact.
        """
        data = self.encode(state)
        try:
            write_private_file(self.path, data, mode=0o600, before_replace=self._keep_current)
        except FileWriteError as exc:
            raise CheckpointError(exc.errno, str(exc)) from exc
        logger.debug("checkpoint written: %s (%d bytes, round %d)", self.path, len(data),
                     state.round)
        return len(data)

    def _keep_current(self) -> None:
        """Before a new checkpoint takes the name: the current one becomes ``previous``
        if it is intact; a corrupt one is moved aside, ``previous`` kept."""
        try:
            unseal(self.path.read_bytes(), self.path)
        except FileNotFoundError:
            return
        except CheckpointCorrupt as exc:
            aside = self.corrupt_path(self.path)
            os.rename(self.path, aside)
            logger.warning("%s; moved it to %s and kept %s as the older checkpoint", exc,
                           aside, self.previous.name)
            return
        os.replace(self.path, self.previous)

    def exists(self) -> bool:
        """Whether a checkpoint file (newest or previous) is present."""
        return self.path.is_file() or self.previous.is_file()

    def aside_path(self, now: float | None = None, path: Path | None = None) -> Path:
        """Where :meth:`move_aside` would move ``path`` (default: the newest) now:
        ``checkpoint.<YYYYmmdd-HHMMSS>.old`` next to it (``.1.old``, ... if taken)."""
        path = self.path if path is None else path
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
        return _free(path.with_name(f"{path.stem}.{stamp}"), ".old")

    def corrupt_path(self, path: Path) -> Path:
        """Where a corrupt ``path`` goes: ``<name>.corrupt-<YYYYmmdd-HHMMSS>``."""
        return _free(path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}"),
                     "")

    def move_aside(self) -> Path | None:
        """Rename both checkpoints to :meth:`aside_path` (never delete them); the
        newest's new path (else the previous one's), or ``None`` if there was none.
        Raises :class:`CheckpointError` naming both paths if a rename fails."""
        moved = [self.rename(path, self.aside_path(path=path))
                 for path in (self.previous, self.path) if path.exists()]
        return moved[-1] if moved else None

    def rename(self, path: Path, target: Path) -> Path:
        """Rename ``path`` to ``target``; :class:`CheckpointError` naming both if it fails."""
        try:
            os.rename(path, target)
        except OSError as exc:
            raise CheckpointError(exc.errno, f"cannot move checkpoint {path} to {target}: "
                                  f"{describe_os_error(exc)}") from exc
        return target

    def load(self, *, expected_node_id: bytes | None = None,
             path: Path | None = None) -> NodeState | None:
        """Read the newest checkpoint (or ``path``); ``None`` if there is none.

        Raises :class:`CheckpointCorrupt` if its digest does not match, it cannot
        be decoded (a tampered file: only tensors and plain values are
        accepted) or a bare file claims a version that has a digest;
        :class:`CheckpointError` if the file cannot be read, is not a checkpoint
        of this program, has another format version, or (with
        ``expected_node_id``) belongs to another identity.
        """
        path = self.path if path is None else path
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CheckpointError(exc.errno, f"cannot read checkpoint {path}: "
                                  f"{describe_os_error(exc)}") from exc
        payload, sealed = unseal(data, path)
        try:
            raw = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises many types for bad input
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise CheckpointCorrupt(f"checkpoint {path} is corrupt: cannot decode it "
                                    f"({type(exc).__name__}: {first_line[:200]})") from exc
        if not sealed and isinstance(raw, dict) and raw.get("version") == CHECKPOINT_VERSION:
            raise CheckpointCorrupt(f"checkpoint {path} is corrupt: a version "
                                    f"{CHECKPOINT_VERSION} checkpoint without its digest")
        state = _state_from_plain(raw, path)
        state.sealed = sealed
        if (expected_node_id is not None and state.node_id is not None
                and state.node_id != expected_node_id):
            raise _bad(path, "it was written by another node identity "
                       f"({state.node_id.hex()[:16]}..., this node is "
                       f"{expected_node_id.hex()[:16]}...)")
        return state


def _free(stem: Path, suffix: str) -> Path:
    """``stem + suffix``, or ``stem.1 + suffix``, ... : the first name not taken."""
    candidate, n = stem.with_name(stem.name + suffix), 0
    while candidate.exists():
        n += 1
        candidate = stem.with_name(f"{stem.name}.{n}{suffix}")
    return candidate


def replace_state(state: NodeState, **changes: Any) -> NodeState:
    """A copy of ``state`` with ``changes`` applied (convenience for callers)."""
    return dataclasses.replace(state, **changes)
