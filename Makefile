# Every target sets itself up from nothing: Python 3.11 and make are all a machine needs.
SHELL := /bin/bash
PYTHON ?= python3.11
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
export UV_COMPILE_BYTECODE := 1
export UV_LINK_MODE := copy
export UV_PYTHON := $(PYTHON)
export UV_PYTHON_DOWNLOADS := never

.PHONY: help install test lint typecheck unit demo bench e2e clean

help:
	@echo "make demo    - the main job end to end: emulator + both example DAGs into DuckDB, then a summary"
	@echo "make test    - install (if needed), then ruff, mypy and pytest"
	@echo "make install - create .venv from uv.lock with compiled bytecode"

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check "uv==0.13.9"

$(VENV)/.synced: $(UV) uv.lock pyproject.toml
	$(UV) sync --frozen --all-extras
	@touch $@

install: $(VENV)/.synced

lint: install
	$(VENV)/bin/ruff check src tests dags scripts
	$(VENV)/bin/ruff format --check src tests dags scripts

typecheck: install
	$(VENV)/bin/mypy src

unit: install
	$(VENV)/bin/pytest $(PYTEST_ARGS)

test: lint typecheck unit

demo: install
	$(VENV)/bin/python scripts/demo.py

e2e: install
	$(VENV)/bin/python scripts/e2e.py

bench: install
	$(VENV)/bin/python scripts/bench.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(TOOLS) .pytest_cache .mypy_cache .ruff_cache .state
