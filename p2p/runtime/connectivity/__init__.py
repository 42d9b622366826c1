"""How peers reach a node: observed addresses and dial-backs (sans-IO cores), the
node's probe task and dial-back service. See docs/guide/deployment.md.
"""

from p2p.runtime.connectivity.dialback import DIALBACK_MESSAGES, DialBackGate
from p2p.runtime.connectivity.driver import NodeConnectivity
from p2p.runtime.connectivity.reachability import Reachability, ReachabilityStatus

__all__ = ["DIALBACK_MESSAGES", "DialBackGate", "NodeConnectivity", "Reachability",
           "ReachabilityStatus"]
