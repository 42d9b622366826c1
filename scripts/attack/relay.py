#!/usr/bin/env python3
"""A member relaying between two honest daemons (issue 11, item 1), over TCP.

The code is :mod:`lab.attack.relay`; ``--help`` lists the options.
"""

import sys

from lab.attack.relay import main

if __name__ == "__main__":
    sys.exit(main())
