#!/usr/bin/env python3
"""Throughput of the p2p transport against a raw trio socket and the ciphers' ceiling.

The code is :mod:`lab.bench.transport`; ``--help`` lists the options.
"""

from lab.bench.transport import main

if __name__ == "__main__":
    raise SystemExit(main())
