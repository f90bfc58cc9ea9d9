"""``ExecutionCompleteSensor`` (``abm_provider.sensors.exports``) against the emulator in poke,
reschedule and deferrable modes.

Deferrable and reschedule runs go through `dag.test()`, which runs the trigger inline and resumes the
task through `execute_complete`, as the triggerer and scheduler would.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout, AirflowSkipException

from abm_provider.operators.exports import CreateExportJobOperator
from abm_provider.sensors.exports import ExecutionCompleteSensor
from abm_provider.triggers.exports import ExecutionCompleteTrigger
from support.dag_runs import xcom
from support.emulator_log import seen
from support.export_files import EXPORT_TYPE

EXECUTIONS_PATH = f"/exports/v1/exportJobs/{EXPORT_TYPE}/executions"
START = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def job(abm: Any, context: dict[str, Any]) -> Any:
    """The emulator with a TACTIC_PERFORMANCE job (far-off schedule: only fired executions exist)."""
    CreateExportJobOperator(task_id="job", export_type=EXPORT_TYPE, schedule="0 5 1 1 *").execute(context)
    return abm


def _polls(abm: Any, answered: bool = False) -> list[dict[str, Any]]:
    return seen(abm, method="GET", path=EXECUTIONS_PATH, answered=answered)


def _sensor(**kwargs: Any) -> ExecutionCompleteSensor:
    kwargs.setdefault("poke_interval", 0.5)
    kwargs.setdefault("timeout", 60)
    kwargs.setdefault("retry_max_wait", 0.5)
    return ExecutionCompleteSensor(task_id="wait", export_type=EXPORT_TYPE, **kwargs)


# -- poke ------------------------------------------------------------------------------------------


def test_poke_waits_for_running_execution(job: Any, context: dict[str, Any]) -> None:
    fired = job.fire(EXPORT_TYPE, outcome="COMPLETE", runningSeconds=2)
    result = _sensor(mode="poke", deferrable=False).execute(context)
    assert result["id"] == fired["id"]
    assert result["state"] == "COMPLETE"
    assert result["downloadUri"].startswith(job.storage_url)
    assert len(_polls(job)) >= 2  # it did wait: the first look saw the execution running


def test_updated_after_skips_older_executions(job: Any, context: dict[str, Any]) -> None:
    old = job.fire(EXPORT_TYPE, outcome="COMPLETE")
    old = next(e for e in _executions(job) if e["id"] == old["id"])
    new = job.fire(EXPORT_TYPE, outcome="COMPLETE", runningSeconds=2)
    result = _sensor(mode="poke", deferrable=False, updated_after=old["updateTime"]).execute(context)
    assert result["id"] == new["id"]


def test_poke_fails_fast_on_failed_execution(job: Any, context: dict[str, Any]) -> None:
    fired = job.fire(EXPORT_TYPE, outcome="FAILED")
    with pytest.raises(AirflowFailException, match=fired["id"]):
        _sensor(mode="poke", deferrable=False, timeout=600).execute(context)
    assert len(_polls(job)) == 1


def test_soft_fail_skips_on_failed_execution(job: Any, context: dict[str, Any]) -> None:
    job.fire(EXPORT_TYPE, outcome="FAILED")
    with pytest.raises(AirflowSkipException):
        _sensor(mode="poke", deferrable=False, soft_fail=True).execute(context)


def test_poke_survives_503_and_429(job: Any, context: dict[str, Any]) -> None:
    fired = job.fire(EXPORT_TYPE, outcome="COMPLETE", runningSeconds=1)
    job.inject_fault(origin="api", method="GET", path=EXECUTIONS_PATH, kind="status", status=503, count=3)
    job.inject_fault(
        origin="api", method="GET", path=EXECUTIONS_PATH, kind="status", status=429, retryAfter="1", count=2
    )
    result = _sensor(mode="poke", deferrable=False, max_attempts=2).execute(context)
    assert result["id"] == fired["id"]
    statuses = [r.get("status") for r in _polls(job)]
    assert statuses.count(503) == 3 and statuses.count(429) == 2 and statuses[-1] == 200


@pytest.mark.parametrize("deferrable", [False, True])
def test_unknown_job_type_fails_for_good_in_every_mode(
    abm: Any, context: dict[str, Any], deferrable: bool
) -> None:
    """A 404 no retry can fix fails without task retries (or skips with soft_fail), deferred or not."""
    with pytest.raises(AirflowFailException, match="Could not list TACTIC_PERFORMANCE executions: .*404"):
        _sensor(mode="poke", deferrable=deferrable).execute(context)
    with pytest.raises(AirflowSkipException, match="404"):
        _sensor(mode="poke", deferrable=deferrable, soft_fail=True).execute(context)


def _executions(abm: Any) -> list[dict[str, Any]]:
    from abm_provider.hooks.abm import AbmHook

    return list(AbmHook("abm_default").iter_executions(EXPORT_TYPE))


# -- trigger, directly ----------------------------------------------------------------------------


async def test_trigger_survives_503_and_429(job: Any) -> None:
    fired = job.fire(EXPORT_TYPE, outcome="COMPLETE", runningSeconds=1)
    job.inject_fault(origin="api", method="GET", path=EXECUTIONS_PATH, kind="status", status=503, count=3)
    job.inject_fault(
        origin="api", method="GET", path=EXECUTIONS_PATH, kind="status", status=429, retryAfter="1", count=2
    )
    trigger = ExecutionCompleteTrigger(
        abm_conn_id="abm_default",
        export_type=EXPORT_TYPE,
        poll_interval=0.5,
        max_attempts=2,
        retry_max_wait=0.5,
    )
    events = [event.payload async for event in trigger.run()]
    assert [e["status"] for e in events] == ["success"]
    assert events[0]["execution"]["id"] == fired["id"]
    statuses = [r.get("status") for r in _polls(job)]
    assert statuses.count(503) == 3 and statuses.count(429) == 2 and statuses[-1] == 200


def test_execute_complete_raises_on_every_non_success(context: dict[str, Any]) -> None:
    sensor = _sensor(deferrable=True)
    with pytest.raises(AirflowFailException, match="exec-9"):
        sensor.execute_complete(context, {"status": "failed", "message": "exec-9 is FAILED"})
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute_complete(context, {"status": "timeout", "message": "deadline"})
    with pytest.raises(AirflowFailException, match="401"):
        sensor.execute_complete(context, {"status": "error", "message": "401 UNAUTHENTICATED"})
    with pytest.raises(AirflowFailException):
        sensor.execute_complete(context, {"status": "cancelled"})
    with pytest.raises(AirflowFailException):
        sensor.execute_complete(context, None)
    soft = _sensor(deferrable=True, soft_fail=True)
    for event in ({"status": "timeout"}, {"status": "failed"}):
        with pytest.raises(AirflowSkipException):
            soft.execute_complete(context, event)
    done = {"id": "e1", "state": "COMPLETE", "downloadUri": "https://x/y"}
    assert sensor.execute_complete(context, {"status": "success", "execution": done}) == done


def test_request_settings_reach_the_hook_and_the_trigger() -> None:
    sensor = _sensor(max_attempts=2, retry_max_wait=0.7, request_timeout=9, hook_params={"max_pages": 4})
    assert sensor.get_hook().hook_params == {
        "max_pages": 4,
        "max_attempts": 2,
        "retry_max_wait": 0.7,
        "request_timeout": 9,
    }


def test_request_max_wait_is_not_a_second_name_of_retry_max_wait() -> None:
    with pytest.raises(TypeError, match="request_max_wait"):
        ExecutionCompleteSensor(task_id="wait", export_type=EXPORT_TYPE, request_max_wait=0.3)


def test_default_deferrable_follows_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    assert _sensor().deferrable is True
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "False")
    assert _sensor().deferrable is False


# -- dag.test(): reschedule and deferrable ---------------------------------------------------------


def _dag(dag_id: str, **sensor_kwargs: Any) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False) as dag:
        _sensor(**sensor_kwargs)
    return dag


def _fire_after_first_poll(abm: Any, **fire_kwargs: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """Fire an execution only once the sensor has looked and found none, so it must wait for it.

    `dag.test()` spends seconds before the first poke; firing up front would let the execution be
    complete before the sensor ever looked, and the test would not show the waiting path. The
    emulator logs a request when it arrives, before it is answered, so "looked" is the first poll
    whose answer has started (it has a status): firing on a poll still being served could let that
    poll see the execution.
    """
    fired: dict[str, Any] = {}

    def run() -> None:
        deadline = time.monotonic() + 120
        while not _polls(abm, answered=True) and time.monotonic() < deadline:
            time.sleep(0.1)
        fired.update(abm.fire(EXPORT_TYPE, **fire_kwargs))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, fired


def test_reschedule_mode_in_dag_test(job: Any, run_dag: Any) -> None:
    # The first poll is slow to answer, as on a loaded machine: the execution must still be fired
    # only after that poll was answered, or the poll would find it and the sensor never reschedule.
    job.inject_fault(origin="api", method="GET", path=EXECUTIONS_PATH, kind="delay", delaySeconds=1, count=1)
    thread, fired = _fire_after_first_poll(job, outcome="COMPLETE")
    tis = run_dag(_dag("abm_exports_reschedule", mode="reschedule", deferrable=False, poke_interval=1))
    thread.join()
    assert tis["wait"].state == "success"
    assert xcom(tis["wait"])["id"] == fired["id"]
    assert len(_polls(job)) >= 2  # rescheduled at least once before the execution existed


def test_deferrable_in_dag_test(job: Any, run_dag: Any) -> None:
    thread, fired = _fire_after_first_poll(job, outcome="COMPLETE", runningSeconds=1)
    tis = run_dag(_dag("abm_exports_deferrable", deferrable=True, poke_interval=1))
    thread.join()
    assert tis["wait"].state == "success"
    result = xcom(tis["wait"])
    assert result["id"] == fired["id"] and result["downloadUri"]
    assert len(_polls(job)) >= 2  # the first look found nothing, so it deferred and the trigger polled


def test_deferrable_fails_fast_on_failure(job: Any, run_dag: Any) -> None:
    thread, _ = _fire_after_first_poll(job, outcome="FAILED")
    tis = run_dag(_dag("abm_exports_deferrable_failed", deferrable=True, poke_interval=0.5, timeout=600))
    thread.join()
    assert tis["wait"].state == "failed"


def test_deferrable_times_out_at_configured_timeout(job: Any, run_dag: Any) -> None:
    tis = run_dag(_dag("abm_exports_deferrable_timeout", deferrable=True, poke_interval=1, timeout=3))
    assert tis["wait"].state == "failed"
    assert len(_polls(job)) >= 2  # it was deferred and polling when the deadline ended it


def test_deferrable_timeout_with_soft_fail_skips(job: Any, run_dag: Any) -> None:
    tis = run_dag(
        _dag("abm_exports_deferrable_soft", deferrable=True, poke_interval=1, timeout=2, soft_fail=True)
    )
    assert tis["wait"].state == "skipped"
