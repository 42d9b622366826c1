#!/usr/bin/env python3
"""Study: the examples' own models (a ResNet, a transformer) split into partial models.

The code is :mod:`lab.bench.own_model`; ``--help`` lists the options.
"""

from lab.bench.own_model import main

if __name__ == "__main__":
    raise SystemExit(main())
