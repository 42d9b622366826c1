#!/usr/bin/env python3
"""Message loss and delay injected at the transport layer: accuracy and push-sum weight.

The code is :mod:`lab.reliability.faults`; ``--help`` lists the options.
"""

import sys

from lab.reliability.faults import main

if __name__ == "__main__":
    sys.exit(main())
