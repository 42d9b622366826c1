"""The maths of the collaboration strategies (torch and numpy; no trio, no p2p).

One module per scheme; the node's runtime for each lives in :mod:`p2p.strategy`.
Modules are imported by name (``learner.strategies.fedlinked``) so that importing
this package does not import torch.
"""
