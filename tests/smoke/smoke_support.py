"""Set-up shared by the smoke subset and the full suite: an isolated Airflow home, DAG loading, states.

The smoke subset runs in venvs that hold only the built wheels (``make compat``, ``make release-check``),
where the full suite's ``tests/conftest.py`` is not loaded, so what both need lives here.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

DAGS = Path(__file__).resolve().parents[2] / "dags"


def isolate_airflow() -> Path:
    """Point Airflow at a fresh home with a SQLite metadata database; set before Airflow is imported.

    Airflow reads its configuration at import time. Settings already in the environment win, so a
    caller that isolated Airflow first keeps its home.
    """
    home = Path(os.environ.get("ABM_TEST_AIRFLOW_HOME") or tempfile.mkdtemp(prefix="abm-airflow-home-"))
    os.environ["ABM_TEST_AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(DAGS))
    os.environ.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{home / 'airflow.db'}")
    os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "INFO")
    return home


def migrate_metadata_db() -> None:
    """Create the metadata database's tables, which ``dag.test()`` writes its runs to."""
    from airflow.utils.db import initdb

    initdb()


def load_dag(file_name: str) -> Any:
    """Import a DAG file under a fresh module name, so it reads the current environment."""
    name = f"abm_test_dag_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(name, DAGS / file_name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module.dag


def task_states(dag_run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}


def run_dag(file_name: str, **kwargs: Any) -> Any:
    """``dag.test()`` of a DAG file, on every supported Airflow.

    Airflow 3.1.0's ``dag.test()`` refuses a DAG that is not yet in the metadata database ("the dag is
    not serialized"); later releases write it themselves. ``airflow dags test`` writes it first on
    3.1.0 too, and so does this, only where the refusal happens.
    """
    dag = load_dag(file_name)
    try:
        return dag.test(**kwargs)
    except Exception as err:
        if "is not serialized" not in str(err):
            raise
    from airflow.utils.cli import get_bagged_dag

    get_bagged_dag(None, dag.dag_id)
    return dag.test(**kwargs)


def record_trigger_runs(monkeypatch: Any) -> list[Any]:
    """Note every run of the export sensor's trigger: a non-empty list means the sensor deferred."""
    from abm_provider.triggers.exports import ExecutionCompleteTrigger

    runs: list[Any] = []
    original_run = ExecutionCompleteTrigger.run

    async def recording_run(self: ExecutionCompleteTrigger) -> Any:
        runs.append(self)
        async for event in original_run(self):
            yield event

    monkeypatch.setattr(ExecutionCompleteTrigger, "run", recording_run)
    return runs


#: Seconds after which an execution is fired even if the sensor never polled (below the tests' 300 s).
_SENSOR_WAIT_CAP = 240
#: Seconds the sensor has, after its first answered poll, to defer before the execution is fired anyway.
_AFTER_FIRST_POLL = 60


def fire_once_deferred(
    emulator: Any, export_type: str, deferred: list[Any], fired: list[Any]
) -> threading.Thread:
    """Fire an execution once the sensor has deferred, so the trigger is what sees it complete.

    Waiting on the deferral, not on a clock, keeps a test right however slow the machine is. If the
    sensor polls and then does not defer within a minute, the execution is fired anyway, so the run
    ends and the test's assertion on ``deferred`` says why. That minute starts at the sensor's first
    answered poll, not when the DAG starts: on a loaded machine the tasks before the sensor may take
    longer than a minute, and an execution fired before the sensor's first poll is found complete
    there, so the sensor never defers (seen in ``make compat``'s lanes running beside the suite).
    """

    earlier = {seen.get("requestId") for seen in emulator.requests_seen()}  # other tests' polls

    def polled() -> bool:
        return any(
            seen.get("method") == "GET"
            and "/executions" in str(seen.get("path"))
            and seen.get("status")
            and seen.get("requestId") not in earlier
            for seen in emulator.requests_seen()
        )

    def wait_and_fire() -> None:
        give_up = time.monotonic() + _SENSOR_WAIT_CAP
        deadline: float | None = None
        while not deferred and time.monotonic() < give_up:
            if deadline is None and polled():
                deadline = time.monotonic() + _AFTER_FIRST_POLL
            if deadline is not None and time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        fired.append(emulator.fire(export_type))

    thread = threading.Thread(target=wait_and_fire, daemon=True)
    thread.start()
    return thread
