#!/usr/bin/env python3
"""Checkpoints corrupted 200 ways: none may load silently.

The code is :mod:`lab.reliability.checkpoint_faults`; ``--help`` lists the options.
"""

import sys

from lab.reliability.checkpoint_faults import main

if __name__ == "__main__":
    sys.exit(main())
