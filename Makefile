# The two set-up commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CLUSTER := containers/cluster
# Slurm versions the integration tests run against: trixie = 24.11, bookworm = 22.05 (sid = 26.05).
LIQUID_SUITES ?= trixie bookworm
export LIQUID_SUITES

.PHONY: demo test unit host venv up down clean dist

## demo: bring up the containerized Slurm cluster, submit a few jobs, show what Slurm says
demo: host venv
	$(CLUSTER) up
	$(BIN)/python examples/demo.py

## test: unit tests, then integration tests against the real clusters of every suite in LIQUID_SUITES
test: host venv
	$(BIN)/python -m pytest tests

## unit: the tests that need no cluster
unit: venv
	$(BIN)/python -m pytest tests/unit

## host: docker.io and debootstrap on this machine (installed with apt when missing), dockerd running
host:
	$(CLUSTER) setup

venv: $(BIN)/.installed
$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[site,test,plot]'
	touch $@

## dist: the sdist and the wheel built from it (a release's files; the wheel carries etc/ and docs/)
dist: venv
	$(BIN)/python -m pip install -q build
	$(BIN)/python -m build --outdir dist

up: host
	$(CLUSTER) up

down:
	for suite in trixie bookworm sid; do $(CLUSTER) --suite $$suite down; done

clean: down
	rm -rf $(VENV) containers/.build
