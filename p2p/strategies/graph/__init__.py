"""``graph``: personalised models mixed along a learned collaboration graph (paper 003).

``settings.py`` (the ``graph_*`` keys), ``messages.py`` (pulls and edge weights),
``maths.py`` (objective, graph step, mixing, privacy ledger; numpy), ``node.py``.
"""

from p2p.strategies.base import StrategyPlugin
from p2p.strategies.graph.messages import GRAPH_MESSAGES
from p2p.strategies.graph.settings import GraphKeys, check

__all__ = ["GRAPH_MESSAGES", "PLUGIN", "GraphKeys"]

PLUGIN = StrategyPlugin(
    name="graph",
    summary="a learned collaboration graph, whole models pulled from chosen peers (refuses "
            "declared `[[models]]`, needs `data.public_size`)",
    settings=GraphKeys,
    check=check,
    messages=GRAPH_MESSAGES,
    build="p2p.strategies.graph.node:build",
)
