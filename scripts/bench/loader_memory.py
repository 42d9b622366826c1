#!/usr/bin/env python3
"""Benchmark: a node training on a memory-mapped dataset larger than memory should use.

The code is :mod:`lab.bench.loader_memory`; ``--help`` lists the options.
"""

from lab.bench.loader_memory import main

if __name__ == "__main__":
    raise SystemExit(main())
