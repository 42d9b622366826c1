"""gossip package."""
