#!/usr/bin/env python3
"""A flood of circuit requests against a relay, over loopback sockets: do its limits hold?

The code is :mod:`lab.attack.circuit_flood`; ``--help`` lists the options.
"""

import sys

from lab.attack.circuit_flood import main

if __name__ == "__main__":
    sys.exit(main())
