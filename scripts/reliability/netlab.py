#!/usr/bin/env python3
"""A real-network testbed: daemons on a public segment and on private LANs behind NATs.

The code is :mod:`lab.reliability.netlab`; ``--help`` lists the options.
"""

import sys

from lab.reliability.netlab import main

if __name__ == "__main__":
    sys.exit(main())
