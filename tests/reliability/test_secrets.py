"""Secret hygiene end to end: both example DAGs run with a recognisable key, which then appears nowhere.

The key is searched for, raw and inside the Basic token, in everything a run leaves behind that a
person might read or share: every log line (stdlib logging and what structlog prints), every row of
every table of the metadata database (XComs, rendered template fields, trigger rows, task instances,
events), every file in the Airflow home and the run's own directory (task logs, downloads, rejects,
the DuckDB warehouse), and the text and traceback of the exceptions the operators raise.

Transient faults are injected during the runs so retry warnings and error texts are produced and
searched too. Related checks live elsewhere and are not repeated here: the hook-level search of logs,
errors and storage requests, and origin-bound auth (``tests/hooks/test_secrets.py``); TLS
verification on by default and a CA bundle from the connection extra, for both hooks
(``tests/hooks/test_tls.py``); the emulator accepting Bearer and Basic (``tests/emulator/test_auth.py``)
and the hook using Basic (``tests/hooks/test_abm_emulator.py::test_basic_auth_is_accepted``).
"""

from __future__ import annotations

import base64
import importlib.util
import json
import logging
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.warehouses import Warehouse

KEY = "sekret-KEY-7f3a9"
ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "dags"


def _forms(key: str) -> list[str]:
    """The key as it is sent: raw, and base64 inside a Basic token (with and without padding)."""
    token = base64.b64encode(f"{key}:".encode()).decode()
    return [key, token, token.rstrip("=")]


@pytest.fixture(scope="module")
def keyed_emulator() -> Iterator[Any]:
    """An emulator whose only key is the recognisable one."""
    from abm_emulator.testing import start_emulator

    with start_emulator(api_keys=[KEY], export_size_bytes=60_000) as running:
        yield running


def _load_dag(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"secrets_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def _register(dag: Any) -> None:
    """Serialize the DAG into the metadata database, as the DAG processor would, for ``dag.test()``."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    DagBundlesManager().sync_bundles_to_db()
    with create_session() as session:
        update_dag_parsing_results_in_db(
            "dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(), session=session
        )


def _run(path: Path) -> dict[str, str]:
    dag = _load_dag(path)
    if "wait_for_execution" in dag.task_dict:
        # The example polls every minute; the test polls every second, the DAG is otherwise as shipped.
        dag.task_dict["wait_for_execution"].poke_interval = 1
    _register(dag)
    dag_run = dag.test()
    return {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}


def _fire_once_polled(emulator: Any) -> None:
    """Start a COMPLETE execution once the sensor has asked for executions (and found none)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if any(e["path"].endswith("/executions") and e["status"] == 200 for e in emulator.requests_seen()):
            break
        time.sleep(0.2)
    emulator.fire("TACTIC_PERFORMANCE", api_key=KEY)


def _seed_targets(warehouse: Warehouse) -> None:
    rows = [(f"001{i:012d}", f"Account {i}", "00D000000000001") for i in range(40)]
    rows.append(("BAD ID", "Broken", "00D000000000001"))
    warehouse.replace_table("abm_target_accounts", ["account_id", "account_name", "crm_org_id"], rows)


def _database_text() -> str:
    """Every row of every table of the metadata database, trigger kwargs decrypted, as one text."""
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session
    from sqlalchemy import MetaData, select

    parts: list[str] = []
    with create_session() as session:
        meta = MetaData()
        meta.reflect(bind=session.get_bind())
        for table in meta.sorted_tables:
            for row in session.execute(select(table)):
                parts.append(f"{table.name}: {row!r}")
        for trigger in session.query(Trigger).all():
            parts.append(f"trigger kwargs: {trigger.kwargs!r}")
    return "\n".join(parts)


def _files_text(*roots: Path) -> tuple[str, int]:
    """The bytes of every file under ``roots`` (decoded leniently) and how many files there were."""
    parts: list[str] = []
    count = 0
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                count += 1
                parts.append(path.read_bytes().decode("latin-1"))
    return "\n".join(parts), count


def test_both_example_dags_leave_the_key_nowhere(
    keyed_emulator: Any,
    airflow_db: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    emulator = keyed_emulator
    emulator.reset()
    warehouse = Warehouse("duckdb", "abm_warehouse", tmp_path / "warehouse.duckdb").use(monkeypatch)
    _seed_targets(warehouse)
    conn = {"conn_type": "abm", "host": emulator.base_url, "password": KEY, "extra": {"retry_max_wait": 2}}
    monkeypatch.setenv("AIRFLOW_CONN_ABM_DEFAULT", json.dumps(conn))
    monkeypatch.setenv("AIRFLOW__ABM__STATE_DIR", str(tmp_path / "state"))
    caplog.set_level(logging.DEBUG)

    # The export job exists; an execution completes once the sensor has looked and found none, so it
    # defers and its trigger polls. Retries are provoked on the way.
    from abm_provider.hooks.abm import AbmHook

    AbmHook(retry_max_wait=2).create_export_job("TACTIC_PERFORMANCE", "0 5 * * *")
    emulator.admin("DELETE", "/_admin/requests")
    firing = threading.Thread(target=_fire_once_polled, args=(emulator,), daemon=True)
    firing.start()
    emulator.inject_fault(method="POST", path="/exports/v1/exportJobs", kind="status", status=503)
    emulator.inject_fault(
        method="GET", path="/exports/v1/.*/executions", kind="status", status=429, retryAfter="1"
    )
    emulator.inject_fault(
        origin="storage", method="GET", path="/.*", kind="disconnect_mid_body", afterBytes=20_000
    )
    emulator.inject_fault(
        method="POST", path="/accountLists/v2/folders", kind="status", status=500, when="after"
    )
    emulator.inject_fault(method="POST", path="/accountLists/v2/accountLists/.*/add", kind="reset")

    export_states = _run(DAGS / "abm_export_to_warehouse.py")
    firing.join(timeout=5)
    sync_states = _run(DAGS / "abm_sync_account_lists.py")
    assert set(export_states.values()) == {"success"}, export_states
    assert set(sync_states.values()) == {"success"}, sync_states
    assert emulator.admin("GET", "/_admin/faults")["faults"] == [], "every injected fault fired"
    assert warehouse.count("abm_tactic_performance") > 0
    assert warehouse.count("abm_sync_members") == 40

    errors = _operator_errors(emulator, tmp_path)
    captured = capfd.readouterr()
    logged = "\n".join([caplog.text, *(r.getMessage() for r in caplog.records), captured.out, captured.err])
    database = _database_text()
    files, file_count = _files_text(airflow_db, tmp_path)
    # The searches look where the runs wrote: retries were logged, XComs and rendered fields stored.
    assert "503" in logged and "429" in logged and "Resuming download" in logged
    assert "rendered_task_instance_fields" in database and "xcom" in database
    assert file_count > 3
    tables = sorted({line.split(":", 1)[0] for line in database.splitlines() if ": " in line})
    print(
        f"\nsearched {len(logged)} chars of logs, {len(database)} chars of metadata DB rows "
        f"(tables with rows: {', '.join(tables)}), {file_count} files, {len(errors)} exception texts"
    )
    for secret in _forms(KEY):
        assert secret not in logged, "the key is in a log line"
        assert secret not in database, "the key is in the metadata database"
        assert secret not in files, "the key is in a file of the Airflow home or the run"
        for text in errors:
            assert secret not in text, "the key is in an exception text"
    api_requests = [e for e in emulator.requests_seen() if e["origin"] == "api"]
    assert api_requests and all(KEY in e["headers"].get("authorization", "") for e in api_requests)


def _operator_errors(emulator: Any, tmp_path: Path) -> list[str]:
    """Texts and formatted tracebacks of failures: a refused key, an exhausted retry budget, a 404."""
    from abm_provider.operators.account_lists import (
        AddAccountsToListOperator,
        CreateAccountListFolderOperator,
    )
    from abm_provider.operators.exports import CreateExportJobOperator

    context: Any = {"run_id": "manual__secrets", "ti": None}
    failing = [
        (
            CreateAccountListFolderOperator(task_id="f", folder_name="x", max_attempts=2, retry_max_wait=0.1),
            {"method": "POST", "path": "/accountLists/v2/folders", "kind": "status", "status": 401},
        ),
        (
            CreateExportJobOperator(
                task_id="j",
                export_type="TACTIC_PERFORMANCE",
                schedule="0 5 * * *",
                max_attempts=2,
                retry_max_wait=0.1,
            ),
            {"method": "*", "path": "/exports/.*", "kind": "status", "status": 503, "count": 10},
        ),
        (
            AddAccountsToListOperator(
                task_id="a",
                list_id="no-such-list",
                accounts=[{"id": "001000000000001", "crmOrgId": "o"}],
                rejects_path=str(tmp_path / "rejects.csv"),
            ),
            None,
        ),
    ]
    texts: list[str] = []
    for operator, fault in failing:
        emulator.clear_faults()
        if fault is not None:
            emulator.inject_fault(**fault)
        with pytest.raises(Exception) as info:  # noqa: PT011 - any failure; its text is what is checked
            operator.execute(context)
        texts += [str(info.value), repr(info.value), "".join(traceback.format_exception(info.value))]
    emulator.clear_faults()
    assert (
        any("401" in t for t in texts) and any("503" in t for t in texts) and any("404" in t for t in texts)
    )
    return texts


@pytest.mark.parametrize("auth_type", ["bearer", "basic"])
async def test_bearer_and_basic_work_for_the_worker_and_the_triggerer_hooks(
    keyed_emulator: Any, monkeypatch: pytest.MonkeyPatch, auth_type: str
) -> None:
    """The sync hook's Basic is tested in tests/hooks; the async hook (triggerer) with both is here."""
    from abm_provider.hooks.abm import AbmAsyncHook, AbmHook

    emulator = keyed_emulator
    emulator.reset()
    conn = {"conn_type": "abm", "host": emulator.base_url, "password": KEY, "extra": {"auth_type": auth_type}}
    monkeypatch.setenv("AIRFLOW_CONN_ABM_AUTH", json.dumps(conn))
    hook = AbmHook("abm_auth")
    hook.create_export_job("TACTIC_PERFORMANCE", "0 5 * * *")
    hook.close()
    fired = emulator.fire("TACTIC_PERFORMANCE", api_key=KEY)
    async with AbmAsyncHook("abm_auth") as async_hook:
        listed = [e["id"] async for e in async_hook.iter_executions("TACTIC_PERFORMANCE")]
    assert listed == [fired["id"]]
    sent = [e["headers"]["authorization"] for e in emulator.requests_seen() if e["origin"] == "api"]
    expected = f"Bearer {KEY}" if auth_type == "bearer" else f"Basic {_forms(KEY)[1]}"
    assert len(sent) == 2 and set(sent) == {expected}
