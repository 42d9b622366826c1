"""Automatic semi-local groups inside a node: the agreement (sans-IO), its wire
messages, the trio driver, the node's plug-in host and the status it reports.
See docs/design/partial-models.md.
"""
