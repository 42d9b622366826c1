#!/usr/bin/env python3
"""Automatic groups, centrally: AUCCCR with its calibration against the sklearn baselines.

The code is :mod:`lab.bench.grouping`; ``--help`` lists the options.
"""

from lab.bench.grouping import main

if __name__ == "__main__":
    raise SystemExit(main())
