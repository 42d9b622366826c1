"""What a checkpoint was trained with, and whether a configuration may resume it.

A checkpoint's parameters only mean something for the network layout and the
data they were trained on. :func:`training_record` lists, as ``key -> text``,
every setting that decides them: the ``[network]`` keys, each declared model's
neurons and fingerprint, every ``[data]`` key (``data.path`` resolved), and the
data file's content digest (``data.content``, computed by the caller). The
record is saved in the checkpoint; :func:`record_changes` compares it with the
configuration of a restart (the same content under another path is the same
data), and :func:`conflict_message` says in one line what changed and how to
start over. Sans-IO: no torch, no files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from learner.data_factory import node_path
from learner.spec import PartialModelSpec
from p2p.config import DataConfig, NetworkConfig, NodeConfig
from p2p.config.kinds import Setting, settings_of

__all__ = [
    "CONTENT_KEY",
    "MODEL_PREFIX",
    "RecordChange",
    "TrainingRecord",
    "conflict_message",
    "node_data_path",
    "record_changes",
    "training_record",
]

#: ``key -> value as text`` (``"data.task" -> "digits"``).
TrainingRecord = dict[str, str]

MODEL_PREFIX = "models."
#: The data file's (or IDX directory's) content digest, ``sha256:<hex>``.
CONTENT_KEY = "data.content"
_PATH_KEY = "data.path"
_ABSENT = "(none)"


def _text(setting: Setting, value: object) -> str:
    if value is None:
        return _ABSENT
    dumped = setting.kind.dump(value)
    if isinstance(dumped, list):
        return ", ".join(str(v) for v in dumped) or "[]"
    if isinstance(dumped, bool):
        return "true" if dumped else "false"
    return str(dumped)


#: Keys of the recorded sections that change how data is read, not what it is.
NOT_RECORDED = frozenset({"data.num_workers", "data.worker_start"})


def _section(name: str, cls: type, obj: object) -> TrainingRecord:
    return {f"{name}.{key}": _text(s, getattr(obj, s.attr))
            for key, s in settings_of(cls).items() if f"{name}.{key}" not in NOT_RECORDED}


def training_record(config: NodeConfig, content: str | None = None,
                    fingerprints: Mapping[str, bytes] | None = None) -> TrainingRecord:
    """The settings that decide a checkpoint's layout and data, as text.

    ``content``: the data file's digest (None: a built-in task, nothing to digest);
    ``fingerprints``: the shared models' (a network.factory module's are known once
    it is built; a notation network's are computed from the config when not given).
    """
    record = _section("network", NetworkConfig, config.network)
    if fingerprints is None:
        layout = config.layout()
        fingerprints = {name: layout.fingerprint(name) for name in layout.shared_models}
    for spec in config.models:
        held = (spec.notation() if isinstance(spec, PartialModelSpec)
                else str(spec).partition(" ")[2])
        text = f"{held} (fingerprint {fingerprints[spec.name].hex()[:8]})"
        if spec.depends_on:
            text += f", depends on {', '.join(spec.depends_on)}"
        record[f"{MODEL_PREFIX}{spec.name}"] = text
    record.update(_section("data", DataConfig, config.data))
    path = node_data_path(config)
    if path is not None:
        record[_PATH_KEY] = str(Path(path).expanduser().resolve())
    record[CONTENT_KEY] = content or _ABSENT
    return record


@dataclass(frozen=True)
class RecordChange:
    """One setting whose value differs between a checkpoint and a configuration."""

    key: str
    trained: str  # the checkpoint's value (``(none)`` for a model it did not have)
    configured: str  # this configuration's value


def record_changes(trained: Mapping[str, str], configured: Mapping[str, str]) -> list[RecordChange]:
    """Settings whose value differs, in the configuration's key order.

    A key the checkpoint does not record is ignored (a newer program added it),
    except a model: a model added or removed changes the layout. Paths are
    compared resolved, and a data file with the same content digest under
    another path is the same data.
    """
    changes = [RecordChange(key, trained[key], value) for key, value in configured.items()
               if key in trained and not _same(key, trained[key], value)]
    content = trained.get(CONTENT_KEY)
    if content is not None and content != _ABSENT and content == configured.get(CONTENT_KEY):
        changes = [c for c in changes if c.key != _PATH_KEY]  # moved, not changed
    changes += [RecordChange(key, _ABSENT, value) for key, value in configured.items()
                if key not in trained and key.startswith(MODEL_PREFIX)]
    changes += [RecordChange(key, value, _ABSENT) for key, value in trained.items()
                if key not in configured and key.startswith(MODEL_PREFIX)]
    return changes


def node_data_path(config: NodeConfig) -> str | None:
    """This node's own data file: ``data.path`` with ``{node_index}`` replaced."""
    path = config.data.path
    return node_path(None if path is None else str(path), config.data.node_index)


def _same(key: str, trained: str, configured: str) -> bool:
    if trained == configured:
        return True
    if key != _PATH_KEY or _ABSENT in (trained, configured):
        return False
    return Path(trained).expanduser().resolve() == Path(configured).expanduser().resolve()


def conflict_message(data_dir: Path, changes: list[RecordChange], aside: str) -> str:
    """One line: what the checkpoint in ``data_dir`` was trained with, what the
    configuration says, and how to start over (``aside``: where ``--fresh``
    moves the old checkpoint)."""
    trained = ", ".join(f"{c.key} = {c.trained}" for c in changes)
    configured = ", ".join(f"{c.key} = {c.configured}" for c in changes)
    return (f"the checkpoint in {data_dir} was trained with {trained}; this config says "
            f"{configured}. Restore the old settings to resume it, or pass --fresh to start "
            f"over (the old checkpoint is moved to {aside})")
