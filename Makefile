PYTHON ?= python3
VENV ?= .venv
PYTEST_ARGS ?=
# Test processes of `make test` (pytest-xdist; 0: one process, on the Redis at TOOLFLEET_REDIS_URL).
# Three: two cores run the suite's worker and server processes beside them without starving its timed tests.
TEST_PROCESSES ?= 3

BIN := $(VENV)/bin
# Installs come from uv.lock (exact versions, with hashes) through uv, itself pinned here.
UV_VERSION := 0.13.9
UV := UV_PROJECT_ENVIRONMENT=$(VENV) $(BIN)/uv
# Runs its arguments with a Redis reachable at TOOLFLEET_REDIS_URL (an embedded one if none answers).
WITH_REDIS := $(BIN)/python -m workers._devredis --
# The unit tests: no worker processes (nothing of tests/integration, nothing marked integration).
UNIT_TESTS := tests --ignore=tests/integration -m 'not integration'

.PHONY: setup compiled test test-fast lint docs lock demo bench soak capacity clean

$(VENV)/.uv-$(UV_VERSION):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check 'uv==$(UV_VERSION)'
	touch $@

# --locked: the lock must match pyproject.toml (else `make lock`); the virtualenv gets exactly the lock.
# --compile-bytecode, as pip does: without it, and with PYTHONDONTWRITEBYTECODE set, every process
# compiles each module it imports again (a second of CPU for each worker or command a test starts).
$(VENV)/.installed: pyproject.toml uv.lock $(VENV)/.uv-$(UV_VERSION) Makefile
	$(UV) sync --locked --all-extras --compile-bytecode --quiet
	touch $@

# The project's own modules compiled once, for the hundreds of processes a test run starts.
compiled: setup
	$(BIN)/python -m compileall -q orchestrator workers tests bench

setup: $(VENV)/.installed

test: compiled
	$(WITH_REDIS) $(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadfile $(PYTEST_ARGS)

test-fast: compiled
	$(WITH_REDIS) $(BIN)/python -m pytest -n $(TEST_PROCESSES) $(UNIT_TESTS) $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The documentation site (mkdocs.yml) into site/: strict, so a broken link, anchor or page fails it; its
# configuration and command-line references are generated from the code as it builds.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Every dependency to the newest version pyproject.toml's ranges allow, then the virtualenv to match.
lock: $(VENV)/.uv-$(UV_VERSION)
	$(UV) lock --upgrade
	$(MAKE) setup

demo: setup
	$(WITH_REDIS) $(BIN)/toolfleet demo

bench: setup
	$(WITH_REDIS) $(BIN)/python -m bench

# The chaos soak: a fleet on simulated hosts under load and random faults, its invariants checked.
SOAK_MINUTES ?= 2
SOAK_SEED ?= 1
SOAK_REPORT ?= bench/results/soak.json
soak: compiled
	$(BIN)/python -m bench.soak --minutes $(SOAK_MINUTES) --seed $(SOAK_SEED) --report $(SOAK_REPORT)

# Calls/s against replicas and workers (1-4 each) and the costs of one call: docs/SCALING.md.
capacity: compiled
	$(BIN)/python -m bench.capacity

clean:
	rm -rf $(VENV) build dist site *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find . -path ./.git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
