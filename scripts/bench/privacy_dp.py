#!/usr/bin/env python3
"""Accuracy under differential privacy (DP-SGD) on the synchronous reference.

The code is :mod:`lab.bench.privacy_dp`; ``--help`` lists the options.
"""

from lab.bench.privacy_dp import main

if __name__ == "__main__":
    raise SystemExit(main())
