#!/usr/bin/env python3
"""One lying member against real daemons' merges, with and without ``gossip.merge_guard``.

The code is :mod:`lab.attack.merge`; ``--help`` lists the options.
"""

from lab.attack.merge import main

if __name__ == "__main__":
    raise SystemExit(main())
