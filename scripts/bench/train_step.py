#!/usr/bin/env python3
"""Benchmark: one SGD step of a partial network on one core, against plain torch.

The code is :mod:`lab.bench.train_step`; ``--help`` lists the options.
"""

from lab.bench.train_step import main

if __name__ == "__main__":
    raise SystemExit(main())
