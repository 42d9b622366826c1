"""``python -m p2p.swarm``: the local swarm launcher (:mod:`p2p.swarm.cli`)."""

import sys

from p2p.swarm.cli import main

sys.exit(main())
