#!/usr/bin/env python3
"""Benchmark: extract + assign of a partial model against a plain torch.cat.

The code is :mod:`lab.bench.extract`; ``--help`` lists the options.
"""

from lab.bench.extract import main

if __name__ == "__main__":
    raise SystemExit(main())
