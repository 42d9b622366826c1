#!/usr/bin/env python3
"""Partial vs local vs one global model at scale: a grid of simulations.

The code is :mod:`lab.bench.scale`; ``--help`` lists the options.
"""

import sys

from lab.bench.scale import main

if __name__ == "__main__":
    sys.exit(main())
