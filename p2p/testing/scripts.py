"""Load a file of ``scripts/`` as a module (the scripts are not a package).

The module is registered in ``sys.modules`` under its own name before it runs,
as an import would do (dataclasses look their module up while the file
loads), through the caller's ``monkeypatch`` so that a test leaves
``sys.modules`` as it found it. No ``sys.path`` edit.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

__all__ = ["SCRIPTS_DIR", "load_script"]

SCRIPTS_DIR = Path(__file__).resolve().parents[2] / "scripts"


class ItemSetter(Protocol):
    """What :func:`load_script` needs of pytest's ``monkeypatch``."""

    def setitem(self, dic: Any, name: Any, value: Any) -> None: ...


def load_script(name: str, monkeypatch: ItemSetter, *, module_name: str | None = None
                ) -> ModuleType:
    """``scripts/<name>.py`` run as module ``module_name`` (default ``name``)."""
    path = SCRIPTS_DIR / f"{name}.py"
    spec = importlib.util.spec_from_file_location(module_name or name, path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"no script {path}")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module
