"""Checks across keys for configs that name the user's code (``network.factory``,
``data.factory``), made without importing it.

What needs the code itself (importing it, the module's parameter names, the
datasets' first batch, the device) is checked when the node is built
(:func:`p2p.runtime.assembly.build_learning`), which ``p2p config`` and
``p2p run`` both call before anything is created. Which strategies run with
the user's code each strategy's plug-in says (``with_user_code``;
docs/guide/own-model.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from learner.model_graph import ModelGraph
from learner.module_spec import ModuleModelSpec
from learner.spec import PartialModelSpec, SpecError
from p2p.config.errors import ConfigError
from p2p.config.plugins import strategy_plugins

__all__ = ["check_factory_config", "user_code_strategies", "uses_user_code"]


def user_code_strategies() -> tuple[str, ...]:
    """The strategies that run on the user's module or datasets (today "partial": fedcurv
    reads a notation network's flat parameters and the shard's arrays, fedlinked and
    graph a notation network and the task's public split)."""
    return tuple(name for name, plugin in strategy_plugins().items() if plugin.with_user_code)


def uses_user_code(config: Any) -> bool:
    """Whether the node runs code of the user's (a factory or a hook) or asks for a device
    other than the CPU: building it then imports that code or torch before it starts."""
    t = config.training
    return (config.network.factory is not None or config.data.factory is not None
            or any(v is not None for v in (t.optimizer_factory, t.schedule, t.loss, t.metrics))
            or t.device != "cpu" or t.precision != "fp32")


def _what(config: Any) -> str:
    return "network.factory" if config.network.factory is not None else "data.factory"


def check_factory_config(config: Any, model_error: Any) -> None:
    """Refuse, in one line naming the key, what a config with the user's code cannot run.

    ``model_error(SpecError, models) -> ConfigError`` maps a declaration error onto
    its ``models[i].key``.
    """
    if config.network.factory is not None:
        models: Sequence[object] = config.models
        for i, spec in enumerate(models):
            if isinstance(spec, PartialModelSpec):
                raise ConfigError(f"models[{i}].neurons: neuron counts split a notation "
                                  "network; with network.factory give params (globs over "
                                  "parameter names) and/or units", key=f"models[{i}].neurons")
        try:
            ModelGraph([m for m in models if isinstance(m, ModuleModelSpec)])
        except SpecError as exc:
            raise model_error(exc, models) from None
    if config.network.factory is None and config.data.factory is None:
        return
    what = _what(config)
    name = config.strategy.name
    plugin = strategy_plugins().get(name)
    if plugin is not None and not plugin.with_user_code:
        able = " or ".join(repr(s) for s in user_code_strategies()) or "none"
        raise ConfigError(f"strategy.name: {name!r} does not run with {what} (it needs a "
                          f"notation network and the task's arrays); use {able}",
                          key="strategy.name")
    if config.clustering.auto:
        raise ConfigError(f'clustering.mode: "auto" does not run with {what} (it projects a '
                          "notation network on the task's public split); declare the groups' "
                          "models in [[models]]", key="clustering.mode")
