"""Run a node from Python: the config built in code, your model and data as objects.

::

    config = p2p.node_config(network={"factory": build}, models=[{"name": "global",
                             "params": ["features.*"]}], data={"factory": load}, ...)
    node = p2p.build_node(config)          # checks everything; creates nothing on failure
    trio.run(node.run)                     # or: await node.run() in your trio program
    p2p.run_node(config)                   # or blocking, as `p2p run` does

:func:`node_config` takes the sections of a TOML file as keyword arguments (the
same schema and the same one-line errors); a factory or hook key also takes a
Python callable. :func:`build_node` adds what a file cannot hold: a module
object, datasets, hook objects. The node has its admin socket, checkpoints
and status as under ``p2p run`` (docs/guide/api.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from p2p.config import ConfigError, NodeConfig, check_task_fit, config_from_dict
from p2p.runtime.assembly import Overrides, build_learning
from p2p.runtime.datadir_lock import DataDirLock
from p2p.runtime.node import Node

__all__ = ["build_node", "node_config", "run_node"]


def node_config(*, base_dir: str | Path | None = None,
                **sections: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> NodeConfig:
    """A validated :class:`~p2p.config.NodeConfig` from section tables, as a TOML file
    gives them (``network={...}``, ``models=[{...}, ...]``, ``training={...}``, ...).

    Relative paths (and ``"file.py:function"`` references) resolve against
    ``base_dir`` (default: the working directory). Raises ConfigError naming the key.
    """
    return config_from_dict(dict(sections), base_dir=Path(base_dir or Path.cwd()).absolute())


def build_node(config: NodeConfig, *, model: object | None = None, data: object | None = None,
               loss: Callable[..., Any] | None = None, metrics: object | None = None,
               optimizer: Callable[..., Any] | None = None,
               schedule: Callable[..., Any] | None = None, fresh: bool = False,
               lock: bool = True) -> Node:
    """A node ready to ``await node.run()``, with everything checked first.

    ``model``: a factory (as ``network.factory``) or an ``nn.Module`` (copied; the
    shared parts are re-initialised identically on every node from their
    fingerprints); ``data``: a factory (as ``data.factory``) or ``(train, test[,
    public])`` datasets; ``loss``/``metrics``/``optimizer``/``schedule``: as the
    ``training`` keys. The model, data and hooks are built and run on a first
    batch before anything is written: a ConfigError then leaves no identity,
    lock or checkpoint. ``lock``: take the data directory's lock as ``p2p run``
    does (released when the node's ``run`` returns, or when the process ends).
    """
    check_task_fit(config)
    if config.node.data_dir is None:
        raise ConfigError("node.data_dir: required; give node_config(node={\"data_dir\": ...})",
                          key="node.data_dir")
    overrides = Overrides(model=model, data=data, loss=loss, metrics=metrics,
                          optimizer=optimizer, schedule=schedule)
    learning = build_learning(config, overrides)
    held = None
    if lock:
        data_dir = Path(config.node.data_dir).expanduser().absolute()
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        held = DataDirLock(data_dir)
        held.acquire()
    try:
        node = Node(config, fresh=fresh, learning=learning)
    except BaseException:
        if held is not None:
            held.release()
        raise
    node.lock = held
    return node


def run_node(config: NodeConfig, **given: Any) -> int:
    """Build the node as :func:`build_node` does and run it until stopped (``p2p stop``,
    SIGINT/SIGTERM); returns 0 as ``p2p run`` exits."""
    node = build_node(config, **given)
    trio.run(node.run)
    return 0
