"""No import cycles in the project's packages (DESIGN section 2), checked on the source.

The graph has one node per module of ``p2p``, ``gossip``, ``peersampling`` and
``learner`` and an edge for every ``import`` / ``from ... import`` statement
found anywhere in the file: at module level, under ``if TYPE_CHECKING:`` (a
cycle there is still a cycle a reader has to untangle, and the type checker
follows it) and inside functions (a lazy import only hides a cycle). ``from a
import b`` points at the submodule ``a.b`` when there is one, else at ``a``.
Importing a submodule also runs its package's ``__init__``; that implicit edge
is not counted, as in other import-graph tools, or every package that
re-exports its modules would be a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("p2p", "gossip", "peersampling", "learner")


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
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
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


def test_project_has_no_import_cycle() -> None:
    graph = module_graph(ROOT, PACKAGES)
    # the graph really is the project's: a vacuous graph would pass trivially
    assert "p2p.runtime.node" in graph and "gossip.pushsum" in graph
    assert "p2p.wire.transport" in graph["p2p.runtime.node"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_find_cycle_reports_the_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}) is None  # diamond
    assert find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert find_cycle({"x": {"a"}, "a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
    assert find_cycle({"a": {"missing"}}) is None  # edges out of the graph are leaves


def test_module_graph_counts_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import A\n")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg.b import B\n"
        "A = 1\n"
    )
    (pkg / "b.py").write_text("def f():\n    import pkg.sub.c\n")
    (pkg / "d.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from .. import d\nfrom pkg import sub\nimport os\n")
    graph = module_graph(tmp_path, ["pkg"])
    assert graph == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.b"},  # under TYPE_CHECKING
        "pkg.b": {"pkg.sub.c"},  # inside a function
        "pkg.d": set(),
        "pkg.sub": set(),
        "pkg.sub.c": {"pkg.d", "pkg.sub"},  # relative, and a package named by from-import
    }
    assert find_cycle(graph) is None
    (pkg / "sub" / "c.py").write_text("from pkg.a import A\n")  # closes a -> b -> c -> a
    assert find_cycle(module_graph(tmp_path, ["pkg"])) == ["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]
