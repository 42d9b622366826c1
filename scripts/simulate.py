#!/usr/bin/env python3
"""Simulate a swarm of N real nodes in one process, on a virtual clock.

The code is :mod:`p2p.simulation.cli`; ``--help`` lists the options.
"""

import sys

from p2p.simulation.cli import main

if __name__ == "__main__":
    sys.exit(main())
