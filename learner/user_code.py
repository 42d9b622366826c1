"""The user's own code named in a config: ``"package.module:function"`` or ``"path/file.py:function"``.

A :class:`FactoryRef` is read without importing anything (``p2p config`` checks
its form first); :meth:`FactoryRef.resolve` imports the module and returns the
callable, and :func:`call_with` passes it only the keyword arguments its
signature takes. A file is imported under its own name with its directory on
``sys.path``, so that DataLoader workers started by spawn or forkserver can
unpickle what it defines. Every failure is one :class:`FactoryError` line
naming the key, the reference and what to fix (docs/guide/own-model.md).
"""

from __future__ import annotations

import importlib
import inspect
import keyword
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from learner.errors import FieldError

__all__ = ["FactoryError", "FactoryRef", "call_with", "describe_type"]

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


def _import_file(path: Path, text: str, key: str) -> Any:
    """Import ``path`` as module ``path.stem`` with its directory first on ``sys.path``."""
    path = path.resolve()
    if not path.is_file():
        raise FactoryError(f"{text}: no file {path}", field=key)
    name = path.stem
    if not name.isidentifier():
        raise FactoryError(f"{text}: {path.name} is not an importable module name; rename it "
                           "(letters, digits, '_')", field=key)
    loaded = sys.modules.get(name)
    if loaded is not None:
        where = getattr(loaded, "__file__", None)
        if where is not None and Path(where).resolve() == path:
            return loaded
        raise FactoryError(f"{text}: a module named {name!r} is already imported from "
                           f"{where or 'a built-in'}; rename {path.name}", field=key)
    directory = str(path.parent)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    try:
        return importlib.import_module(name)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise _import_failed(text, key, exc) from None


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
