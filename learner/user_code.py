"""The user's own code named in a config: ``"package.module:function"`` or ``"path/file.py:function"``.

A :class:`FactoryRef` is read without importing anything (``p2p config`` checks
its form first); :meth:`FactoryRef.resolve` imports the module and returns the
callable, and :func:`call_with` passes it only the keyword arguments its
signature takes. A file is imported on its own (its siblings are not on the
path: a package of files is named ``"package.module:function"``) under a name
derived from its path; :class:`Portable` carries what such a file defines into
DataLoader workers started by spawn or forkserver. Every failure is one
:class:`FactoryError` line naming the key, the reference and what to fix
(docs/guide/own-model.md).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import keyword
import os
import pickle
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from learner.errors import FieldError

__all__ = ["FactoryError", "FactoryRef", "Portable", "call_with", "describe_type",
           "file_modules"]

_FORM = ('"package.module:function" (importable from the working directory or PYTHONPATH) '
         'or "path/to/file.py:function"')


class FactoryError(FieldError):
    """The user's code named by a config key could not be used; ``field`` is the key
    (``network.factory``), ``detail`` says what was wrong and how to fix it."""


def _identifiers(text: str) -> bool:
    return bool(text) and all(p.isidentifier() and not keyword.iskeyword(p)
                              for p in text.split("."))


def describe_type(value: object) -> str:
    """``a list``, ``an int``, ``None``: how an error names what came back."""
    if value is None:
        return "None"
    dtype = getattr(value, "dtype", None)
    shape = getattr(value, "shape", None)
    if dtype is not None and shape is not None:  # a tensor or an array: say what it holds
        kind = type(value).__name__
        return f"a {kind} of {str(dtype).removeprefix('torch.')} and shape {tuple(shape)}"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


@dataclass(frozen=True)
class FactoryRef:
    """A reference to a callable of the user's code.

    ``text`` as written; ``path`` the resolved file for the path form (None for
    a module path or a Python object); ``target`` the object itself when the
    config was built in Python with the callable (or module) instead of text.
    Two references are equal when they name the same thing (``canonical``).
    """

    text: str = field(compare=False)
    path: Path | None = None
    target: object | None = field(default=None, compare=False, repr=False)
    canonical: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if not self.canonical:
            name = self.text if self.path is None else f"{self.path}:{self.attribute}"
            object.__setattr__(self, "canonical", name)

    @classmethod
    def parse(cls, value: object, key: str, base_dir: Path | None = None) -> FactoryRef:
        """Check the form of ``value`` (text, or a Python callable); nothing is imported."""
        if isinstance(value, FactoryRef):
            return value
        if not isinstance(value, str):
            if callable(value) or _is_module(value):
                return cls(_python_name(value), None, value)
            raise FactoryError(f"expected {_FORM}, got {describe_type(value)}", field=key)
        text = value.strip()
        where, colon, attr = text.rpartition(":")
        if not colon or not where or not _identifiers(attr):
            raise FactoryError(f"{value!r} is not a factory reference; expected {_FORM}",
                               field=key)
        if where.endswith(".py"):
            path = Path(where).expanduser()
            if not path.is_absolute() and base_dir is not None:
                path = base_dir / path
            return cls(text, path)
        if not _identifiers(where):
            raise FactoryError(f"{value!r}: {where!r} is neither a module path nor a .py file; "
                               f"expected {_FORM}", field=key)
        return cls(text)

    @property
    def attribute(self) -> str:
        return self.text.rpartition(":")[2]

    def resolve(self, key: str) -> Callable[..., Any]:
        """Import the module and return the named callable (FactoryError if it cannot)."""
        if self.target is not None:
            if not callable(self.target):
                raise FactoryError(f"{self.text} is {describe_type(self.target)}, not callable",
                                   field=key)
            return self.target
        module = self._module(key)
        value: object = module
        for part in self.attribute.split("."):
            if not hasattr(value, part):
                raise FactoryError(f"{self.text}: {module.__name__} has no attribute "
                                   f"{self.attribute!r}", field=key)
            value = getattr(value, part)
        if not callable(value):
            raise FactoryError(f"{self.text} is {describe_type(value)}, not callable; name a "
                               "function or a class", field=key)
        return value

    def _module(self, key: str) -> Any:
        if self.path is None:
            name = self.text.rpartition(":")[0]
            try:
                return importlib.import_module(name)
            except ModuleNotFoundError as exc:
                if exc.name is not None and name.startswith(exc.name):
                    raise FactoryError(f"{self.text}: no module named {exc.name!r} (looked in "
                                       f"the working directory {os.getcwd()} and PYTHONPATH); "
                                       "install it, run from its directory, or use the form "
                                       '"path/to/file.py:function"', field=key) from None
                raise _import_failed(self.text, key, exc) from None
            except Exception as exc:
                raise _import_failed(self.text, key, exc) from None
        return _import_file(self.path, self.text, key)


def _is_module(value: object) -> bool:
    return type(value).__name__ == "module"


def _python_name(value: object) -> str:
    module = getattr(value, "__module__", None) or type(value).__module__
    name = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"{module}:{name}"


def _import_failed(text: str, key: str, exc: BaseException) -> FactoryError:
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    return FactoryError(f"{text}: importing it raised {type(exc).__name__}: {first}", field=key)


#: Modules imported from files, by module name: what a worker process must import too.
_FILE_MODULES: dict[str, Path] = {}


def file_modules() -> dict[str, Path]:
    """The modules imported from ``"file.py:function"`` references so far (name -> file)."""
    return dict(_FILE_MODULES)


def _load_file(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # pickling by reference looks classes up here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    _FILE_MODULES[name] = path
    return module


def _import_file(path: Path, text: str, key: str) -> Any:
    """Import the file ``path`` as a module of its own (the same file: the same module)."""
    path = path.resolve()
    if not path.is_file():
        raise FactoryError(f"{text}: no file {path}", field=key)
    stem = re.sub(r"\W", "_", path.stem)
    name = f"_p2p_file_{stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:10]}"
    if name in sys.modules:
        return sys.modules[name]
    try:
        return _load_file(name, path)
    except Exception as exc:
        raise _import_failed(text, key, exc) from None


class Portable:
    """A dataset defined by a file's module, made loadable in a worker process: pickling
    carries the files' paths, and unpickling imports them before the dataset itself."""

    def __init__(self, dataset: Any, modules: dict[str, Path]) -> None:
        self.dataset = dataset
        self.modules = modules

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getstate__(self) -> dict[str, object]:
        return {"modules": self.modules, "dataset": pickle.dumps(self.dataset)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.modules = state["modules"]
        for name, path in self.modules.items():
            if name not in sys.modules:
                _load_file(name, path)
        self.dataset = pickle.loads(state["dataset"])


def call_with(function: Callable[..., Any], offered: Mapping[str, object], *, key: str,
              text: str) -> Any:
    """Call ``function`` with the entries of ``offered`` its signature accepts (all of
    them if it takes ``**kwargs``); an exception it raises becomes one FactoryError line."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        parameters = None
    if parameters is None or any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        chosen = dict(offered)
    else:
        chosen = {k: v for k, v in offered.items() if k in parameters}
        missing = [name for name, p in parameters.items()
                   if p.default is p.empty and name not in chosen
                   and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if missing:
            raise FactoryError(f"{text} requires {', '.join(missing)}, which is not given; it is "
                               f"called with keyword arguments among {', '.join(offered)}",
                               field=key)
    try:
        return function(**chosen)
    except FactoryError:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise FactoryError(f"{text} raised {type(exc).__name__}: {first}", field=key) from None
