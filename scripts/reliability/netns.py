#!/usr/bin/env python3
"""Real daemons in two network namespaces joined by a lossy, slow veth link.

The code is :mod:`lab.reliability.netns`; ``--help`` lists the options.
"""

import sys

from lab.reliability.netns import main

if __name__ == "__main__":
    sys.exit(main())
