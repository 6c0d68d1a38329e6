# Hangar — the two set-up commands are `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# The laptop targets run in development mode (development keys, no TLS) unless DEBUG is set;
# with DEBUG=false the settings demand real SECRET_KEY and AGENT_TOKEN_KEY (README).
DEV := DEBUG=$${DEBUG:-true}

.PHONY: demo test test-fast lint format install migrate bench ci clean chaos loadtest

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet --upgrade pip
	@$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

migrate: install
	@$(DEV) $(PY) manage.py migrate --noinput
	@$(DEV) $(PY) manage.py migrate --database ledger --noinput
	@$(DEV) $(PY) manage.py setup_periodic_tasks

demo: migrate
	@$(DEV) $(PY) manage.py demo

# The suite in parallel (pytest-xdist): one worker per core, at most 4, since each worker builds
# its own test databases first; a test file stays on one worker. test-fast leaves out the tests
# marked slow (browser, subprocess, fuzz and scale): docs/development.md.
XDIST := -n auto --maxprocesses=4 --dist loadfile

test: install
	@$(VENV)/bin/pytest $(XDIST) $(PYTEST_ARGS)

test-fast: install
	@$(VENV)/bin/pytest $(XDIST) -m "not slow" $(PYTEST_ARGS)

# ruff (lint and format check), import-linter (the dependency rule) and a migrations check.
lint: install
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check .
	@$(VENV)/bin/lint-imports
	@$(DEV) $(PY) manage.py makemigrations --check --dry-run

format: install
	@$(VENV)/bin/ruff check --fix .
	@$(VENV)/bin/ruff format .

# The fault suite: its own PostgreSQL cluster and Redis on free ports (never yours); see docs/faults.md.
chaos: install
	@$(PY) -m tests.chaos.harness

bench: migrate
	@$(PY) -m benchmarks

# N node agents (locust, headless) against gunicorn on PostgreSQL; docs/PERFORMANCE.md.
# e.g. make loadtest LOADTEST_ARGS="--nodes 1024,2048,2560,3072 --workers 2 --duration 60"
loadtest: install
	@$(PY) -m benchmarks.loadtest $(LOADTEST_ARGS)

clean:
	rm -rf $(VENV) var
