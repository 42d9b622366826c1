#!/usr/bin/env python3
"""The thesis' associative-network experiment (ch. 3 V.5) averaged through push-sum.

The code is :mod:`lab.paper.associative`; ``--help`` lists the options.
"""

import logging
import sys

from lab.paper.associative import main

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(main())
