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

from pathlib import Path

from import_graph import PRODUCT, ROOT, find_cycle, module_graph


def test_project_has_no_import_cycle() -> None:
    graph = module_graph(ROOT, PRODUCT)
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
