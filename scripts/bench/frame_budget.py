#!/usr/bin/env python3
"""Squatting the frame budget by reconnecting: what honest pushes get, and at what cost.

The code is :mod:`lab.bench.frame_budget`; ``--help`` lists the options.
"""

import sys

from lab.bench.frame_budget import main

if __name__ == "__main__":
    sys.exit(main())
