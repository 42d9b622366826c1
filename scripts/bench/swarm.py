#!/usr/bin/env python3
"""Real daemons against each other and against the synchronous reference.

The code is :mod:`lab.bench.swarm`; ``--help`` lists the options.
"""

import sys

from lab.bench.swarm import main

if __name__ == "__main__":
    sys.exit(main())
