"""peersampling package."""
