#!/usr/bin/env python3
"""Reproduce the papers' modified-MNIST experiments with the synchronous reference.

The code is :mod:`lab.paper.reproduce`; ``--help`` lists the options.
"""

from lab.paper.reproduce import main

if __name__ == "__main__":
    raise SystemExit(main())
