"""The product installs like a package: a wheel, in a fresh environment outside the checkout.

``pip wheel`` builds from a copy of the tracked files; the wheel goes into a new
virtual environment whose only other packages are the dependencies (reached
through a ``.pth`` line to the development environment's site-packages, whose
editable installs of the checkout are not loaded from there). From a directory
outside the checkout: ``p2p config``, the simulator, and the swarm launcher
(which runs ``p2p run`` daemons) work, the bundled data loads from the wheel,
and neither the lab nor the tests came along.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest
from import_graph import ROOT

pytestmark = pytest.mark.e2e
TIMEOUT = 600  # only a hang reaches it


def run(args: list[str], cwd: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT,
                          env=env | {"OMP_NUM_THREADS": "1"}, check=False, **kw)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{' '.join(args)}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the fresh environment's python, a working directory outside the checkout)."""
    top = tmp_path_factory.mktemp("wheel")
    source = top / "source"
    tracked = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    for name in tracked:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(top / "dist"), str(source)], cwd=top)
    wheel = next((top / "dist").glob("*.whl"))
    env = top / "env"
    # no pip of its own (ensurepip costs seconds): this environment's pip installs into it
    run([sys.executable, "-m", "venv", "--without-pip", str(env)], cwd=top)
    python = env / "bin" / "python"
    env_site = Path(run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                        cwd=top).stdout.strip())
    (env_site / "dependencies.pth").write_text(site.getsitepackages()[0] + "\n")
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         "--no-index", str(wheel)], cwd=top)
    work = top / "work"
    work.mkdir()
    return python, work


def test_the_wheel_holds_the_product_and_its_data_only(installed: tuple[Path, Path]) -> None:
    python, work = installed
    probe = (
        "import importlib.util, json, p2p, learner\n"
        "from learner.tasks import get_task\n"
        "found = {m: importlib.util.find_spec(m) is not None for m in ('lab', 'tests', 'scripts')}\n"
        "x = get_task('mnist5k').load(None, seed=0)\n"
        "from importlib import resources\n"
        "from p2p.dashboard.server import STATIC_FILES\n"
        "static = resources.files('p2p.dashboard').joinpath('static')\n"
        "assets = all(static.joinpath(n).is_file() for n in (*STATIC_FILES, 'index.html'))\n"
        "print(json.dumps({'p2p': p2p.__file__, 'learner': learner.__file__, 'found': found,\n"
        "                  'dashboard_assets': assets}))\n"
    )
    out = json.loads(run([str(python), "-c", probe], cwd=work).stdout.splitlines()[-1])
    env = str(python.parent.parent)
    assert out["p2p"].startswith(env) and out["learner"].startswith(env), out
    assert out["found"] == {"lab": False, "tests": False, "scripts": False}
    assert out["dashboard_assets"]  # the page, its script and the vendored uPlot + license


def test_config_simulator_and_swarm_run_from_the_wheel(installed: tuple[Path, Path]) -> None:
    python, work = installed
    p2p = python.parent / "p2p"
    (work / "node.toml").write_text('[network]\nlayers = "64=16=10"\n[training]\nrounds = 3\n')
    resolved = json.loads(run([str(p2p), "config", "--config", "node.toml", "--json"],
                              cwd=work).stdout)
    assert resolved["training"]["rounds"] == 3
    run([str(python), "-m", "p2p.simulation", "--nodes", "4", "--rounds", "3", "--quiet",
         "--json", "sim.json"], cwd=work)
    sim = json.loads((work / "sim.json").read_text())
    assert len(sim["nodes"]) == 4
    run([str(python), "-m", "p2p.swarm", "--nodes", "2", "--rounds", "3", "--quiet",
         "--json", "swarm.json", "--workdir", str(work / "swarm")], cwd=work)
    swarm = json.loads((work / "swarm.json").read_text())
    assert [r["round"] for r in swarm["nodes"]] == [3, 3]
