"""``python -m p2p.simulation``: the simulator's command line (:mod:`p2p.simulation.cli`)."""

from p2p.simulation.cli import main

raise SystemExit(main())
