"""Shared test set-up: an isolated Airflow home and one emulator process per session."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Airflow reads its configuration at import time, so the environment is set before any test imports it.
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="abm-airflow-home-"))
os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(Path(__file__).resolve().parents[1] / "dags"))
os.environ.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{_AIRFLOW_HOME / 'airflow.db'}")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "INFO")


@pytest.fixture(scope="session")
def emulator_process() -> Iterator[object]:
    """One emulator subprocess for the whole run; tests that need a clean slate use `emulator`."""
    from abm_emulator.testing import start_emulator

    with start_emulator(api_keys=["test-key-alpha", "test-key-beta"]) as running:
        yield running


@pytest.fixture
def emulator(emulator_process: object) -> object:
    """The session's emulator, reset to an empty state with no faults before the test."""
    emulator_process.reset()  # type: ignore[attr-defined]
    return emulator_process


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated metadata database (SQLite in the session's Airflow home), for `dag.test()`.

    Created once per run on first use; tests that only call `execute()` never pay for it.
    """
    from airflow.utils.db import initdb

    initdb()
    return _AIRFLOW_HOME
