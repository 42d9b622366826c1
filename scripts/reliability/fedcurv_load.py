#!/usr/bin/env python3
"""FedCurv swarms over many seeds beside two CPU burners: no node may die.

The code is :mod:`lab.reliability.fedcurv_load`; ``--help`` lists the options.
"""

import sys

from lab.reliability.fedcurv_load import main

if __name__ == "__main__":
    sys.exit(main())
