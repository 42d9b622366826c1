"""Suite-wide settings.

Property tests run derandomized (the same examples on every run, no example
database): CI must never fail on an example a previous run happened not to
draw. Set ``HYPOTHESIS_PROFILE=explore`` to search with fresh random examples
(and keep any failure it finds as a regular test).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
