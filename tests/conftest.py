"""Shared test set-up: an isolated Airflow home, one emulator process per session, and the emulator as
``abm_default`` with a task context for operators called with ``execute()`` (a folder may override them).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from smoke.smoke_support import isolate_airflow, migrate_metadata_db
from support.tasks import task_context, use_emulator

if TYPE_CHECKING:
    from abm_emulator.testing import RunningEmulator

# Airflow reads its configuration at import time, so the environment is set before any test imports it.
_AIRFLOW_HOME = isolate_airflow()

# The cloud warehouses' emulators, for any folder (one definition, so one server each per session).
pytest_plugins = ["support.cloud_warehouses"]


@pytest.fixture(scope="session")
def abm_emulator_options() -> dict[str, Any]:
    """The emulator of the run (the ``abm-emulator`` pytest plugin's) accepts two keys."""
    return {"api_keys": ["test-key-alpha", "test-key-beta"]}


@pytest.fixture(scope="session")
def emulator_process(abm_emulator_process: RunningEmulator) -> RunningEmulator:
    """One emulator subprocess for the whole run; tests that need a clean slate use `emulator`."""
    return abm_emulator_process


@pytest.fixture
def emulator(emulator_process: RunningEmulator) -> RunningEmulator:
    """The session's emulator, reset to an empty state with no faults before the test."""
    emulator_process.reset()
    return emulator_process


@pytest.fixture
def abm(emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> RunningEmulator:
    """The (reset) emulator reachable as ``abm_default``, with task outputs under the test's tmp dir."""
    return use_emulator(emulator, monkeypatch, tmp_path / "state")


@pytest.fixture
def context() -> dict[str, Any]:
    """The slice of a task context the operators read when called with ``execute()``."""
    return task_context("abm_test", "manual__test")


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated metadata database (SQLite in the session's Airflow home), for `dag.test()`.

    Created once per run on first use; tests that only call `execute()` never pay for it.
    """
    migrate_metadata_db()
    return _AIRFLOW_HOME
