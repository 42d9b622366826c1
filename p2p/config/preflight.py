"""What ``p2p config`` and ``p2p run`` check before anything is created.

:func:`preflight` runs every check a node would otherwise fail on after it
created its identity key, lock or checkpoint: the network against the task
(:func:`~p2p.config.task_fit.check_task_fit`), the layout of the declared
models, the swarm key file, and the data itself, loaded as the node loads it
(NaN or infinite features, labels out of range, shards too small). Each failure
is one :class:`~p2p.config.errors.ConfigError` naming the key (exit status 2).
Torch is not loaded. A network.factory or data.factory is the user's code: it is
built and checked on a first batch by ``p2p.runtime.assembly.build_learning``.
See docs/guide/operations.md (checking a configuration).
"""

from __future__ import annotations

from learner.data import load_node_data
from learner.data_errors import DataError
from learner.errors import FieldError
from p2p.config.errors import ConfigError
from p2p.config.schema import NodeConfig
from p2p.config.swarm_key import load_swarm_key
from p2p.config.task_fit import check_task_fit

__all__ = ["preflight"]


def preflight(config: NodeConfig) -> None:
    """Raise :class:`ConfigError` (naming the key) if ``config``'s task, models, swarm
    key file or data would stop a node at start-up."""
    source = None if config.source is None else str(config.source)
    check_task_fit(config)
    if config.security.swarm_key_file is not None:
        load_swarm_key(config.security.swarm_key_file)
    if config.network.factory is not None or config.data.factory is not None:
        return  # the user's code: built and run on a first batch by the caller instead
    try:
        config.layout()
    except (FieldError, ValueError) as exc:
        raise ConfigError(f"[[models]]: {exc}", key="models", source=source) from None
    try:
        load_node_data(config.data.spec())
    except DataError as exc:
        key = f"data.{exc.field}" if exc.field else "data.path"
        raise ConfigError(f"{key}: {exc.detail}", key=key, source=source) from None
