#!/usr/bin/env python3
"""Local attacks on a node's files and admin socket, replayed against the real ``p2p`` command.

The code is :mod:`lab.attack.local`; ``--help`` lists the options.
"""

import sys

from lab.attack.local import main

if __name__ == "__main__":
    sys.exit(main())
