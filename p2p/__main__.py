"""``python -m p2p``: the same as the ``p2p`` command."""

import sys

from p2p.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
