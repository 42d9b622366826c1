"""Suite-wide settings and fixtures.

Property tests run derandomized (the same examples on every run, no example
database): CI must never fail on an example a previous run happened not to
draw. Set ``HYPOTHESIS_PROFILE=explore`` to search with fresh random examples
(and keep any failure it finds as a regular test). ``restore_logging`` puts the
root logger back after a test that runs ``p2p run`` in this process.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """``p2p run`` in this process configures the root logger: put it back afterwards."""
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved:
        root.addHandler(handler)
    root.setLevel(level)
