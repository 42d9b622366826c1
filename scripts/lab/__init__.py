"""The lab: what measures the daemon, apart from what ships.

Benchmarks (:mod:`lab.bench`), paper reproductions (:mod:`lab.paper`), attack
clients (:mod:`lab.attack`), reliability runs (:mod:`lab.reliability`), the
push-sum simulator and its adversaries used to study attacks (:mod:`lab.sim`)
and the standalone averaging peers (:mod:`lab.averaging`). The entry points
are the files of ``scripts/<group>/``; ``make venv`` installs this package in
development (``scripts/pyproject.toml``). The product packages never import it
(``tests/test_layering.py``).
"""
