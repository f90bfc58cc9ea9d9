"""Fixtures for the reliability tests: the emulator behind ``abm_default``, a task context, tmp state."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sync.sync_support import warehouse  # noqa: F401 - the list-sync tests' warehouse fixture

from .badinput_support import pg_schemas  # noqa: F401 - a fixture of every test here


@pytest.fixture
def abm(emulator: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """The (reset) emulator reachable as ``abm_default``, with task outputs under the test's tmp dir."""
    conn = {"conn_type": "abm", "host": emulator.base_url, "password": emulator.api_key}
    monkeypatch.setenv("AIRFLOW_CONN_ABM_DEFAULT", json.dumps(conn))
    monkeypatch.setenv("AIRFLOW__ABM__STATE_DIR", str(tmp_path / "state"))
    return emulator


@pytest.fixture
def context() -> dict[str, Any]:
    """The slice of a task context the operators read when called with ``execute()``."""
    ti = SimpleNamespace(
        dag_id="abm_reliability", task_id="task", run_id="manual__reliability", try_number=1, map_index=-1
    )
    return {"ti": ti, "task_instance": ti, "run_id": "manual__reliability"}
