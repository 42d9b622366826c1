#!/usr/bin/env python3
"""Benchmark: one lock-step training round of N nodes, plain loop against batched.

The code is :mod:`lab.bench.batched`; ``--help`` lists the options.
"""

from lab.bench.batched import main

if __name__ == "__main__":
    raise SystemExit(main())
