"""Tests of the documentation: what the README tells a newcomer to run."""
