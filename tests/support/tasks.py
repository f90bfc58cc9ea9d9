"""What an operator's ``execute()`` needs around it in a test: the ABM connection and a task context."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest


def use_emulator(emulator: Any, monkeypatch: pytest.MonkeyPatch, state_dir: Path | None = None) -> Any:
    """Make ``emulator`` the ``abm_default`` connection (and ``state_dir`` the task outputs' home)."""
    conn = {"conn_type": "abm", "host": emulator.base_url, "password": emulator.api_key}
    monkeypatch.setenv("AIRFLOW_CONN_ABM_DEFAULT", json.dumps(conn))
    if state_dir is not None:
        monkeypatch.setenv("AIRFLOW__ABM__STATE_DIR", str(state_dir))
    return emulator


def task_context(dag_id: str, run_id: str, task_id: str = "task") -> dict[str, Any]:
    """The slice of a task context the operators read when called with ``execute()``."""
    ti = SimpleNamespace(dag_id=dag_id, task_id=task_id, run_id=run_id, try_number=1, map_index=-1)
    return {"ti": ti, "task_instance": ti, "run_id": run_id}
