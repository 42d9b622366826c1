#!/usr/bin/env python3
"""Fake identities against peer sampling, old rules (plain Cyclon) next to the Sybil rules.

The code is :mod:`lab.bench.sybil`; ``--help`` lists the options.
"""

from lab.bench.sybil import main

if __name__ == "__main__":
    raise SystemExit(main())
