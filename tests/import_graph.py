"""The project's import graph, read from the source (for the layering tests).

One node per module; an edge for every ``import`` / ``from ... import``
statement anywhere in the file: at module level, under ``if TYPE_CHECKING:``
and inside functions. ``from a import b`` points at the submodule ``a.b`` when
there is one, else at ``a``. The implicit import of a package's ``__init__``
is not an edge (every package that re-exports its modules would be a cycle);
:func:`reachable` adds it where it matters.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The product's packages: what ships in the wheel.
PRODUCT = ("p2p", "gossip", "peersampling", "learner", "common")


def parse(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed once per process while the file is unchanged
    (several layering and size tests read every source file; do not modify the tree)."""
    stat = path.stat()
    return _parse(path, stat.st_mtime_ns, stat.st_size)


@functools.cache
def _parse(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _modules(root: Path, packages: Iterable[str]) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package ``__init__``)."""
    found: dict[str, tuple[Path, bool]] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            found[".".join(parts)] = (path, is_package)
    return found


def _known(name: str, modules: Mapping[str, object]) -> str | None:
    """The longest prefix of dotted ``name`` that is a module of the graph."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def module_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (every import statement counts)."""
    modules = _modules(root, packages)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        targets: set[str] = set()
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    targets.add(_known(alias.name, modules) or "")
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: resolved against the importing module's package
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    targets.add(submodule if submodule in modules else _known(source, modules) or "")
        targets.discard("")
        targets.discard(name)
        graph[name] = targets
    return graph


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or ``None`` if the graph has none.

    Iterative depth-first search (no recursion limit on deep graphs); nodes are
    visited in sorted order so the reported cycle is stable between runs.
    """
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path: list[str] = [start]
        on_path = {start}
        stack = [iter(sorted(graph.get(start, ())))]
        while stack:
            target = next(stack[-1], None)
            if target is None:
                stack.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if target in on_path:
                return [*path[path.index(target):], target]
            if target not in done:
                path.append(target)
                on_path.add(target)
                stack.append(iter(sorted(graph.get(target, ()))))
    return None


def reachable(graph: Mapping[str, Iterable[str]], roots: Iterable[str]) -> set[str]:
    """The modules ``roots`` import, directly or not; importing ``a.b.c`` also runs
    the packages ``a.b`` and ``a``."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in graph:
            continue
        seen.add(name)
        todo.extend(graph[name])
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
    return seen
