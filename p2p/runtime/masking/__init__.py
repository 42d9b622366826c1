"""Masking epochs inside a node: the trio driver of the pair agreements and the
node's plug-in host (``gossip.privacy = "masked"``). The protocol itself is
:mod:`gossip.masking.epochs`. See docs/design/gossip.md.
"""
