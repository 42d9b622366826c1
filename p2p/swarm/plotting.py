"""What every ``--plot`` figure shares (swarm launcher and simulator): a title naming
the run, colours that stay distinct beyond 10 nodes, and a line saying where the
file went."""

from __future__ import annotations

import colorsys
from pathlib import Path
from typing import Any

from p2p.swarm.spec import SwarmSpec

__all__ = ["node_colours", "run_title", "save_figure"]

#: beyond this many nodes, lines are grouped (by permutation) with each group's mean bold
MAX_NODE_LINES = 20


def run_title(kind: str, spec: SwarmSpec) -> str:
    """``swarm: digits, network 64=32=10, scheme partial + semi-local, 8 nodes``."""
    semi = (" + semi-local" + (" (auto)" if spec.grouping == "auto" else "")
            if spec.semi_local else "")
    return (f"{kind}: task {spec.task}, network {spec.network().notation()}, scheme "
            f"{spec.scheme}{semi}, {spec.nodes} nodes")


def node_colours(count: int) -> list[tuple[float, float, float]]:
    """``count`` colours that stay distinct beyond 10: matplotlib's tab10 up to 10,
    else hues a golden angle apart at three alternating lightnesses."""
    if count <= 10:
        import matplotlib

        tab = matplotlib.colormaps["tab10"].colors  # type: ignore[attr-defined]
        return [tuple(tab[i]) for i in range(count)]
    return [colorsys.hls_to_rgb((i * 0.381966) % 1.0, (0.38, 0.58, 0.48)[i % 3], 0.8)
            for i in range(count)]


def save_figure(fig: Any, path: Path) -> None:
    """Write ``fig`` to ``path`` and say where."""
    fig.savefig(path, dpi=120)
    print(f"plot written to {Path(path).resolve()}")
