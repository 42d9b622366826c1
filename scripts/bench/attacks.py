#!/usr/bin/env python3
"""One lying holder against push-sum gossip, with and without the merge defences.

The code is :mod:`lab.bench.attacks`; ``--help`` lists the options.
"""

from lab.bench.attacks import main

if __name__ == "__main__":
    raise SystemExit(main())
