"""The node configs a :class:`~p2p.swarm.SwarmSpec` makes, read back as a daemon reads them.

For tests of ``scripts/swarm.py`` and of the spec: no daemon is started.
"""

from __future__ import annotations

from pathlib import Path

from p2p.config import NodeConfig, load_config, render_config_toml
from p2p.swarm import SwarmSpec, node_config

__all__ = ["swarm_node_configs"]


def swarm_node_configs(spec: SwarmSpec, root: Path) -> list[NodeConfig]:
    """Every node's config, written to ``root/node<i>.toml`` and loaded back.

    Node ``i``'s data dir is ``root/n<i>``; no bootstrap addresses.
    """
    out = []
    for i in range(spec.nodes):
        path = root / f"node{i}.toml"
        path.write_text(render_config_toml(node_config(spec, i, root / f"n{i}", None)))
        out.append(load_config(path))
    return out
