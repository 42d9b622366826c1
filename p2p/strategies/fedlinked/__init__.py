"""``fedlinked``: distillation towards peers' representations of the public split.

``settings.py`` (the ``fedlinked_*`` keys), ``messages.py`` (the representation pull),
``maths.py`` (representations, utilities, the target; torch), ``node.py``.
"""

from p2p.strategies.base import StrategyPlugin
from p2p.strategies.fedlinked.messages import FEDLINKED_MESSAGES
from p2p.strategies.fedlinked.settings import FedLinkedKeys, check

__all__ = ["FEDLINKED_MESSAGES", "PLUGIN", "FedLinkedKeys"]

PLUGIN = StrategyPlugin(
    name="fedlinked",
    summary="distillation towards peers' representations of the public split, no parameter "
            "sent (refuses declared `[[models]]`, needs `data.public_size`)",
    settings=FedLinkedKeys,
    check=check,
    messages=FEDLINKED_MESSAGES,
    build="p2p.strategies.fedlinked.node:build",
)
