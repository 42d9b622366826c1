#!/usr/bin/env python3
"""Run a local swarm of real gossip-learning daemons on any task.

The code is :mod:`p2p.swarm.cli`; ``--help`` lists the options.
"""

import sys

from p2p.swarm.cli import main

if __name__ == "__main__":
    sys.exit(main())
