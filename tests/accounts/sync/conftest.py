"""Fixtures of the list-sync tests: the emulator as ``abm_default`` and a warehouse on DuckDB or PostgreSQL.

Each test gets its own DuckDB file or its own PostgreSQL schema, reached through the Airflow connection
``abm_warehouse`` set in the environment.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sync_support import warehouse  # noqa: F401 - the fixture, shared with tests/reliability


@pytest.fixture
def abm(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The emulator as the default ABM connection."""
    conn = {"conn_type": "abm", "host": emulator.base_url, "password": emulator.api_key}
    monkeypatch.setenv("AIRFLOW_CONN_ABM_DEFAULT", json.dumps(conn))
    return emulator
