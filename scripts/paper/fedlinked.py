#!/usr/bin/env python3
"""FedLinked (paper 002), decentralized, on digits task sets: the in-process simulation.

The code is :mod:`lab.paper.fedlinked`; ``--help`` lists the options.
"""

from lab.paper.fedlinked import main

if __name__ == "__main__":
    raise SystemExit(main())
