#!/usr/bin/env python3
"""What the metrics endpoint and the dashboard cost a swarm's daemons (paired on/off runs).

The code is :mod:`lab.bench.monitoring`; ``--help`` lists the options.
"""

from lab.bench.monitoring import main

if __name__ == "__main__":
    raise SystemExit(main())
