#!/usr/bin/env python3
"""Push-sum benchmark: convergence, loss, crashes and the masked exchange.

The code is :mod:`lab.bench.pushsum`; ``--help`` lists the options.
"""

from lab.bench.pushsum import main

if __name__ == "__main__":
    raise SystemExit(main())
