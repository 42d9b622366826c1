#!/usr/bin/env python3
"""Connection floods against a real daemon on loopback, measured against a no-attack run.

The code is :mod:`lab.attack.flood`; ``--help`` lists the options.
"""

import sys

from lab.attack.flood import main

if __name__ == "__main__":
    sys.exit(main())
