#!/usr/bin/env python3
"""FedCurv (paper 004), decentralized, on a label-skewed digits split: real nodes, simulated.

The code is :mod:`lab.paper.fedcurv`; ``--help`` lists the options.
"""

from lab.paper.fedcurv import main

if __name__ == "__main__":
    raise SystemExit(main())
