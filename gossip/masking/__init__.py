"""The masked exchange: masking epochs (:mod:`.epochs`, sans-IO) and the secure
masks they draw (:mod:`.noise`, a ChaCha20 keystream). See docs/design/gossip.md.
"""

from gossip.masking.noise import MaskSource, mask_source_from

__all__ = ["MaskSource", "mask_source_from"]
