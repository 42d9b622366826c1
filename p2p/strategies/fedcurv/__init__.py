"""``fedcurv``: partial averaging plus FedCurv's elastic penalty, its sums gossiped.

``settings.py`` (the ``fedcurv_*`` keys), ``maths.py`` (Fisher, penalty, pull; torch),
``node.py`` (generations of push-summed sums on the node). No messages of its own:
its sums travel as gossiped vectors of the node's push-sum.
"""

from p2p.strategies.base import StrategyPlugin
from p2p.strategies.fedcurv.settings import FedCurvKeys, check

__all__ = ["PLUGIN", "FedCurvKeys"]

PLUGIN = StrategyPlugin(
    name="fedcurv",
    summary="plus FedCurv's elastic penalty (refuses a masked `gossip.privacy`: its sums "
            "travel in clear)",
    settings=FedCurvKeys,
    check=check,
    build="p2p.strategies.fedcurv.node:build",
)
