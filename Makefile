PYTHON ?= python3
VENV ?= .venv
PYTEST_ARGS ?=

BIN := $(VENV)/bin
# Runs its arguments with a Redis reachable at TOOLFLEET_REDIS_URL (an embedded one if none answers).
WITH_REDIS := $(BIN)/python -m workers._devredis --

.PHONY: setup test lint demo bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

test: setup
	$(WITH_REDIS) $(BIN)/python -m pytest $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

demo: setup
	$(WITH_REDIS) $(BIN)/toolfleet demo

bench: setup
	$(WITH_REDIS) $(BIN)/python -m bench

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find . -path ./.git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
