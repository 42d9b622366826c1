#!/usr/bin/env python3
"""Attack one real daemon on 127.0.0.1 and measure what it costs it.

The code is :mod:`lab.reliability.hostile`; ``--help`` lists the options.
"""

import sys

from lab.reliability.hostile import main

if __name__ == "__main__":
    sys.exit(main())
