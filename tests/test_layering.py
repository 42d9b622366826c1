"""The dependency rules of DESIGN section 2, checked on the source.

- Arrows go one way: ``p2p`` uses ``gossip``, ``peersampling`` and
  ``learner``; those never import ``p2p`` (nor each other, nor torch where it
  does not belong); trio only in the sans-IO packages' drivers.
- Inside ``p2p`` the arrows go down too: the config and the wire import no
  strategy, runtime or operator surface (plug-ins reach the config by injection,
  ``p2p/plugins.py``); a strategy sees the node only through its host interface
  (``p2p/strategies/base.py``), its maths only torch and numpy, its settings and
  messages no torch; one strategy's folder imports no other's.
- What ships is apart from what measures: no product module imports the lab
  (``scripts/lab``), the tests or the scripts, and every product module is
  reachable from an entry point a user has (the CLI, the node, the simulator,
  the swarm launcher, the testing kit's public names): a module nothing of
  the product reaches is measurement code living in the product.
- The wire (``p2p.wire``) is a layer of its own: it imports nothing of the
  sans-IO packages (what it shares with them lives in ``common``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from import_graph import PRODUCT, ROOT, module_graph, parse, reachable

from p2p.strategies import STRATEGIES

NEVER_IN_PRODUCT = {"lab", "tests", "scripts"}
# package -> top-level modules it must never import
FORBIDDEN = {
    "p2p": NEVER_IN_PRODUCT,
    "peersampling": {"torch", "p2p", "learner", "gossip"} | NEVER_IN_PRODUCT,
    "gossip": {"torch", "p2p", "learner", "peersampling"} | NEVER_IN_PRODUCT,
    "learner": {"p2p", "gossip", "peersampling", "trio", "socket"} | NEVER_IN_PRODUCT,
    "common": {"torch", "p2p", "learner", "gossip", "peersampling", "trio"} | NEVER_IN_PRODUCT,
}
# subpackage -> what it must never import besides its package's rules: the wire is
# a layer of its own, below the sans-IO packages the node composes
FORBIDDEN_BELOW = {
    "p2p/wire": {"gossip", "peersampling", "learner", "torch"},
}
# trio only in the thin drivers of the sans-IO packages
TRIO_ALLOWED = {"driver.py", "drivers.py"}
#: What a user of the product starts from: the ``p2p`` command, ``python -m p2p``,
#: the simulator and the swarm launcher (also their ``python -m`` forms), the
#: node itself and the testing kit's public names.
ENTRY_POINTS = (
    "p2p", "p2p.__main__", "p2p.cli.main", "p2p.runtime.node",
    "p2p.simulation", "p2p.simulation.__main__", "p2p.swarm", "p2p.swarm.__main__",
    "p2p.testing",
)


def imported_roots(path: Path) -> set[str]:
    tree = parse(path)
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_respects_dependency_direction(package: str) -> None:
    offences = []
    for path in sorted((ROOT / package).rglob("*.py")):
        forbidden = set(FORBIDDEN[package])
        if package in {"peersampling", "gossip"} and path.name not in TRIO_ALLOWED:
            forbidden.add("trio")
        bad = imported_roots(path) & forbidden
        if bad:
            offences.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not offences, "; ".join(offences)


@pytest.mark.parametrize("folder", sorted(FORBIDDEN_BELOW))
def test_subpackage_respects_its_layer(folder: str) -> None:
    offences = [f"{path.relative_to(ROOT)} imports {sorted(bad)}"
                for path in sorted((ROOT / folder).rglob("*.py"))
                if (bad := imported_roots(path) & FORBIDDEN_BELOW[folder])]
    assert not offences, "; ".join(offences)


def test_imported_roots_sees_both_import_forms(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("import torch.nn\nfrom trio import sleep\nfrom . import x\n")
    assert imported_roots(sample) == {"torch", "trio"}


#: p2p's layers that sit below others: prefix -> module prefixes it must never import
#: (every import statement counts, those under TYPE_CHECKING and in functions too).
ABOVE = ("p2p.strategies", "p2p.runtime", "p2p.cli", "p2p.swarm", "p2p.simulation",
         "p2p.testing", "p2p.plugins")
NOT_BELOW = {
    "p2p.config": ABOVE,
    "p2p.wire": (*ABOVE, "p2p.config"),
    "p2p.strategies": ABOVE[1:],
}
#: What a strategy may import of the runtime, for types only: the host interface's.
HOST_TYPES = {"p2p.strategies.base": {"p2p.runtime.assembly", "p2p.runtime.train_runner"}}
STRATEGY_FOLDERS = sorted(p.name for p in (ROOT / "p2p" / "strategies").iterdir()
                          if (p / "__init__.py").exists())


def _type_checking_imports(path: Path) -> set[str]:
    """Modules imported under ``if TYPE_CHECKING:`` in ``path``."""
    found: set[str] = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.module:
                    found.add(inner.module)
                elif isinstance(inner, ast.Import):
                    found.update(alias.name for alias in inner.names)
    return found


def _module_path(module: str) -> Path:
    path = ROOT / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def test_no_arrow_runs_back_up_inside_p2p() -> None:
    graph = module_graph(ROOT, PRODUCT)
    offences = []
    for module, targets in sorted(graph.items()):
        for layer, above in NOT_BELOW.items():
            if not (module == layer or module.startswith(layer + ".")):
                continue
            allowed = (HOST_TYPES.get(module, set())
                       & _type_checking_imports(_module_path(module)))
            bad = sorted(t for t in targets - allowed
                         if any(t == a or t.startswith(a + ".") for a in above))
            if bad:
                offences.append(f"{module} imports {bad}")
    assert not offences, "; ".join(offences)


def test_no_arrow_rule_is_vacuous() -> None:
    graph = module_graph(ROOT, PRODUCT)
    assert "p2p.config.schema" in graph and "p2p.strategies.fedcurv.node" in graph
    # the host interface's types are the only runtime names a strategy sees
    assert _type_checking_imports(_module_path("p2p.strategies.base")) >= HOST_TYPES[
        "p2p.strategies.base"]


@pytest.mark.parametrize("folder", STRATEGY_FOLDERS)
def test_a_strategy_folder_keeps_its_rooms_apart(folder: str) -> None:
    """maths: torch/numpy (no p2p, no trio); settings, messages, __init__: no torch, no
    trio, not the node side; no folder imports another's."""
    rules = {
        "maths.py": {"p2p", "gossip", "peersampling", "trio", "socket"},
        "settings.py": {"torch", "trio"},
        "messages.py": {"torch", "trio"},
        "__init__.py": {"torch", "trio"},
    }
    graph = module_graph(ROOT, PRODUCT)
    others = [f"p2p.strategies.{f}" for f in STRATEGY_FOLDERS if f != folder]
    for path in sorted((ROOT / "p2p" / "strategies" / folder).glob("*.py")):
        module = f"p2p.strategies.{folder}" + ("" if path.stem == "__init__" else f".{path.stem}")
        bad = imported_roots(path) & rules.get(path.name, set())
        assert not bad, f"{module} imports {sorted(bad)}"
        crossing = sorted(t for t in graph[module]
                          if any(t == o or t.startswith(o + ".") for o in others))
        assert not crossing, f"{module} imports another strategy's {crossing}"
        if path.name != "node.py":
            assert f"p2p.strategies.{folder}.node" not in graph[module], module


def test_every_strategy_folder_has_its_registry_line() -> None:
    assert sorted(STRATEGIES) == STRATEGY_FOLDERS
    for name in STRATEGY_FOLDERS:
        assert STRATEGIES[name] == f"p2p.strategies.{name}:PLUGIN", name


def test_the_plugins_tables_load_without_torch() -> None:
    """Reading every strategy's settings and messages (what `p2p config` does) loads no
    torch: that is what keeps the node side apart."""
    import subprocess
    import sys

    code = ("import sys; from p2p.strategies import STRATEGY_TABLE, strategy_messages; "
            "[p.settings for p in STRATEGY_TABLE.values()]; strategy_messages(); "
            "from p2p.config import parse_config_text; "
            "parse_config_text('[strategy]\\nname = \"fedcurv\"'); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def registry_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``graph`` plus an edge for each ``"package.module:name"`` string a module holds:
    a registry line naming what it loads on demand (strategies, tasks)."""
    out = {name: set(targets) for name, targets in graph.items()}
    for name in graph:
        path = ROOT / Path(*name.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                module, colon, attr = node.value.partition(":")
                if colon and attr.isidentifier() and module in graph:
                    out[name].add(module)
    return out


def test_every_product_module_is_reached_from_an_entry_point() -> None:
    graph = registry_edges(module_graph(ROOT, PRODUCT))
    assert set(ENTRY_POINTS) <= set(graph), set(ENTRY_POINTS) - set(graph)
    reached = reachable(graph, ENTRY_POINTS)
    # the sans-IO packages are reached through the node: a vacuous graph would pass
    assert {"gossip.pushsum", "peersampling.core", "learner.trainer"} <= reached
    unreached = sorted(set(graph) - reached)
    assert not unreached, ("product modules no entry point imports (measurement code "
                           f"belongs in scripts/lab): {unreached}")


def test_the_lab_is_not_in_the_wheel() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'include = ["p2p*", "learner*", "gossip*", "peersampling*", "common*"]' in text
    assert not (ROOT / "lab").exists()  # the lab lives in scripts/lab only
