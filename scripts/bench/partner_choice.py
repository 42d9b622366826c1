#!/usr/bin/env python3
"""The honest cost of choosing push targets by reciprocity (gossip.partner_choice).

The code is :mod:`lab.bench.partner_choice`; ``--help`` lists the options.
"""

import sys

from lab.bench.partner_choice import main

if __name__ == "__main__":
    sys.exit(main())
