#!/usr/bin/env python3
"""What an honest-but-curious neighbour learns from the pushes it receives.

The code is :mod:`lab.bench.privacy`; ``--help`` lists the options.
"""

from lab.bench.privacy import main

if __name__ == "__main__":
    raise SystemExit(main())
