#!/usr/bin/env python3
"""Churn: kill -9 a quarter of a swarm of real daemons mid-run, restart them, compare.

The code is :mod:`lab.reliability.churn`; ``--help`` lists the options.
"""

import sys

from lab.reliability.churn import main

if __name__ == "__main__":
    sys.exit(main())
