"""Fixtures of the list-sync tests: the emulator as ``abm_default`` and a warehouse on DuckDB, PostgreSQL
or MariaDB (``sync_support.warehouse``, on the registry ``support.warehouses``).

Each test gets its own DuckDB file, PostgreSQL schema or MariaDB database, reached through the Airflow
connection ``abm_warehouse`` set in the environment.
"""

from __future__ import annotations

from typing import Any

import pytest
from sync_support import warehouse  # noqa: F401 - the fixture, shared with tests/reliability

from support.tasks import use_emulator


@pytest.fixture
def abm(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The emulator as the default ABM connection."""
    return use_emulator(emulator, monkeypatch)
