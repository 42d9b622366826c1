#!/usr/bin/env python3
"""How often the merge guard bites honest nodes: an in-memory swarm of real nodes, no attacker.

The code is :mod:`lab.bench.guard_honest`; ``--help`` lists the options.
"""

import sys

from lab.bench.guard_honest import main

if __name__ == "__main__":
    sys.exit(main())
