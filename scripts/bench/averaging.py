#!/usr/bin/env python3
"""Averaging primitive: N peer processes average 1M float32 values with the gossip stack.

The code is :mod:`lab.bench.averaging`; ``--help`` lists the options.
"""

from lab.bench.averaging import main

if __name__ == "__main__":
    raise SystemExit(main())
