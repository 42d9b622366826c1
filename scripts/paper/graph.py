#!/usr/bin/env python3
"""The learned collaboration graph (paper 003, Bellet et al.) on the S3 task.

The code is :mod:`lab.paper.graph`; ``--help`` lists the options.
"""

import logging
import sys

from lab.paper.graph import main

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(main())
