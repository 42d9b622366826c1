#!/usr/bin/env python3
"""Benchmark of the peer sampling service in the seeded in-process simulator.

The code is :mod:`lab.bench.peer_sampling`; ``--help`` lists the options.
"""

from lab.bench.peer_sampling import main

if __name__ == "__main__":
    raise SystemExit(main())
