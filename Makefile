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

.PHONY: help install mariadb-dev browser test lint typecheck unit release-check compat demo bench e2e clean

help:
	@echo "make demo    - the main job end to end: emulator + the example DAGs into DuckDB, then a summary"
	@echo "make test    - install (if needed), then ruff, mypy and pytest"
	@echo "make install - create .venv from uv.lock with compiled bytecode"
	@echo "make release-check - build both distributions, twine check, file lists, install from the sdists, smoke"
	@echo "make compat  - the built wheels on Airflow 3.1.2 (plain pip; lowest dependencies), 3.1.8, 3.2.2, and 3.3.2 on Python 3.12 and 3.13 (pyenv), smoke"

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check "uv==0.13.9"

# mysqlclient (the [mysql] extra, through the MySQL provider) has no Linux wheel: it is built against
# MariaDB Connector/C, found by pkg-config. Debian's libmariadb-dev is installed when missing and make
# runs as root, so a fresh machine needs nothing by hand.
mariadb-dev:
	@if command -v pkg-config >/dev/null && { pkg-config --exists mariadb || pkg-config --exists mysqlclient; }; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's libmariadb-dev and pkg-config to build mysqlclient (the [mysql] extra)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libmariadb-dev pkg-config gcc >/dev/null; \
	else \
	  echo "!!! MariaDB Connector/C headers missing and not root: mysqlclient (the [mysql] extra) cannot build."; \
	  echo "!!! Install them with: sudo apt-get install libmariadb-dev pkg-config"; exit 1; \
	fi

$(VENV)/.synced: $(UV) uv.lock pyproject.toml emulator/pyproject.toml | mariadb-dev
	$(UV) sync --frozen --all-extras --all-packages
	@touch $@

install: $(VENV)/.synced

lint: install
	$(VENV)/bin/ruff check src emulator/src tests dags scripts
	$(VENV)/bin/ruff format --check src emulator/src tests dags scripts

typecheck: install
	$(VENV)/bin/mypy

# The browser test (tests/ui) drives Debian's Chromium through Debian's chromedriver; no browser is
# ever downloaded. Installed when missing and make runs as root; otherwise that test is skipped.
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's chromium and chromium-driver for the browser test (tests/ui)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else \
	  echo "!!! chromium/chromedriver missing and not root: the browser test (tests/ui) WILL BE SKIPPED."; \
	  echo "!!! Install them with: sudo apt-get install chromium chromium-driver"; \
	fi

unit: install
	$(VENV)/bin/pytest $(PYTEST_ARGS)

# Both build the wheels and sdists, then run tests/smoke in fresh venvs (docs/compatibility.md).
release-check: install
	$(VENV)/bin/python scripts/release.py check

compat: install
	$(VENV)/bin/python scripts/release.py compat

# `make test` runs four things side by side, since most tests wait on sockets, subprocesses and
# emulated clocks rather than on the two cores: the suite in three lanes that share nothing (each
# pytest process has its own emulator, Airflow home, DuckDB files and PostgreSQL schemas; the DAG
# tests' database is used by tests/dags alone), and mypy followed by the release and compatibility
# checks. The first lane streams; the logs of the others follow it. A test folder added later runs
# in the third lane. The slowest tests of each lane close its log, to balance the lanes by.
DURATIONS := --durations=15
FIRST_LANE := tests/docs tests/hooks tests/exports tests/sensors tests/triggers tests/operators tests/deploy
SECOND_LANE := tests/accounts tests/warehouse tests/ui tests/e2e
LOGS := .test-logs

test: lint browser
	@mkdir -p $(LOGS); \
	{ $(VENV)/bin/mypy; typed=$$?; $(VENV)/bin/python scripts/release.py check compat; checked=$$?; \
	  exit $$(( typed || checked )); } > $(LOGS)/typecheck-release-and-compat.log 2>&1 & release=$$!; \
	$(VENV)/bin/pytest $(DURATIONS) $(SECOND_LANE) > $(LOGS)/second-lane.log 2>&1 & second=$$!; \
	$(VENV)/bin/pytest $(DURATIONS) tests $(foreach d,$(FIRST_LANE) $(SECOND_LANE),--ignore=$(d)) \
	  > $(LOGS)/third-lane.log 2>&1 & third=$$!; \
	$(VENV)/bin/pytest $(DURATIONS) $(FIRST_LANE); first=$$?; \
	wait $$second; second_rc=$$?; wait $$third; third_rc=$$?; wait $$release; release_rc=$$?; \
	for lane in second third; do echo "== the suite's $$lane lane ($(LOGS)/$$lane-lane.log)"; cat $(LOGS)/$$lane-lane.log; done; \
	echo "== make typecheck, make release-check and make compat ($(LOGS)/typecheck-release-and-compat.log)"; \
	cat $(LOGS)/typecheck-release-and-compat.log; \
	if [ $$first -ne 0 ] || [ $$second_rc -ne 0 ] || [ $$third_rc -ne 0 ] || [ $$release_rc -ne 0 ]; then \
	  echo "make test FAILED (lanes: $$first, $$second_rc, $$third_rc; typecheck/release-check/compat: $$release_rc)"; exit 1; \
	fi

demo: install
	$(VENV)/bin/python scripts/demo.py

e2e: install
	$(VENV)/bin/python scripts/e2e.py

bench: install
	$(VENV)/bin/python scripts/bench.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(TOOLS) .pytest_cache .mypy_cache .ruff_cache .state .release $(LOGS)
