# `make test` and `make swarm` work on a fresh machine: they build .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test swarm venv lint pytest slow bench docs clean browser

$(STAMP): pyproject.toml scripts/pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# the CPU build of torch lies on local disk; asking for it first keeps pip
	# from resolving the range to a CUDA wheel
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[test,docs]"
	# the lab (benchmarks, attacks, paper runs): development only, never in the wheel
	$(BIN)/pip install -q --no-deps -e scripts
	touch $(STAMP)

venv: $(STAMP)

# ruff on everything; mypy on the packages and the lab (not tests), configured in
# pyproject.toml: strict on gossip, peersampling and p2p.wire
lint: $(STAMP)
	$(BIN)/ruff check p2p learner gossip peersampling common scripts tests
	$(BIN)/mypy

# Debian's chromium + chromium-driver for the dashboard's browser test, when missing
# and installable (root, apt-get); otherwise that test says it skips
browser:
	sh .ci/browser.sh

# two pytest-xdist workers, each test file whole on one (its module fixtures built
# once, its tests in order); docs/results/suite.md has the figures
pytest: $(STAMP) browser
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

test: lint docs pytest

slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

swarm: $(STAMP)
	$(BIN)/python scripts/swarm.py $(ARGS)

# the documentation site in build/site; strict: a broken link or anchor fails it
# (NO_MKDOCS_2_WARNING silences the Material theme's end-of-life notice)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .mypy_cache
