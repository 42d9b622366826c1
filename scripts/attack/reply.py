#!/usr/bin/env python3
"""Live reply poisoning against 3 honest daemons: the attacks of issue 31, as a grid.

The code is :mod:`lab.attack.reply`; ``--help`` lists the options.
"""

import sys

from lab.attack.reply import main

if __name__ == "__main__":
    sys.exit(main())
