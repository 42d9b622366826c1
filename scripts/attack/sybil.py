#!/usr/bin/env python3
"""20 live fake identities against 3 honest daemons (issue 11, items 2 and 4).

The code is :mod:`lab.attack.sybil`; ``--help`` lists the options.
"""

import sys

from lab.attack.sybil import main

if __name__ == "__main__":
    sys.exit(main())
