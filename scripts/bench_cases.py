"""The measured cases of ``scripts/bench.py``, each run alone in a fresh child process.

A case runs in its own interpreter so that its peak resident memory (``VmHWM``, which Linux resets on
exec, unlike ``ru_maxrss``) and its CPU time belong to that case alone, as they would to an Airflow task
process. The parent passes the case name and a JSON object of parameters on the command line and reads
back one ``BENCH_RESULT {json}`` line from stdout; everything else the case prints is ignored.

    .venv/bin/python scripts/bench_cases.py CASE '{"param": ...}'
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

RESULT_PREFIX = "BENCH_RESULT "
ORG_ID = "00D000000000001"
BATCH = 1000
# The warehouse tables the cases write; bench.py drops them between runs.
PROVIDER_TABLE = "bench_provider"
CEILING_TABLE = "bench_ceiling"
BASELINE_TABLE = "bench_baseline"
ACCOUNTS_SQL = "SELECT account_id, account_name, crm_org_id FROM bench_accounts"
# The list sync's source table, and the prefix of its state tables (beside it, on the same connection).
SYNC_TABLE = "bench_sync_targets"
SYNC_STATE_PREFIX = "abm_sync_"
COLUMN_MAP = {"id": "account_id", "name": "account_name", "crmOrgId": "crm_org_id"}
# The audience sync's source (accounts and their tier), its exclusions, and its state tables' prefix.
AUDIENCE_TABLE = "bench_audience_tiers"
AUDIENCE_CUSTOMERS = "bench_audience_customers"
AUDIENCE_STATE_PREFIX = "abm_aud_"

Params = dict[str, Any]


def status_kib(field: str) -> int:
    """A ``/proc/self/status`` memory figure in KiB (``VmHWM`` peak, ``VmRSS`` current)."""
    status = Path("/proc/self/status").read_text()
    return int(status.split(f"{field}:")[1].split()[0])


def cpu_seconds() -> float:
    """User + system CPU of this process so far (children excluded)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def task_context(task_id: str, run_id: str = "bench") -> Any:
    """The little of an Airflow context the provider's operators read outside a DAG run."""
    ti = SimpleNamespace(dag_id="bench", task_id=task_id, run_id=run_id, try_number=1, map_index=-1)
    return {"ti": ti, "task_instance": ti, "run_id": run_id}


def curl_to_file(uri: str, target: Path) -> float:
    """Seconds ``curl`` takes to write the link to a file: the download ceiling, no Python involved."""
    started = time.perf_counter()
    subprocess.run(["curl", "--silent", "--show-error", "--fail", "-o", str(target), uri], check=True)
    return time.perf_counter() - started


# ---------------------------------------------------------------------------------------- section 1


def load_operator(p: Params, source: Any, **extra: Any) -> Any:
    """The load task both export cases run (forced: every run loads again)."""
    from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator

    return ExecutionCsvToSqlOperator(
        task_id="load",
        source=source,
        sql_conn_id=p["conn_id"],
        table=PROVIDER_TABLE,
        export_type=p["export_type"],
        force=True,
        dialect_options=p.get("dialect_options"),
        **extra,
    )


def provider_export(p: Params) -> Params:
    """The example DAG's one task: ExecutionCsvToSqlOperator given the execution, loading as it downloads."""

    if p.get("duckdb_path"):
        Path(p["duckdb_path"]).unlink(missing_ok=True)
    archive = Path(p["base"]) / "streamed.csv"
    for stale in (archive, archive.with_name(archive.name + ".manifest.json")):
        stale.unlink(missing_ok=True)
    load = load_operator(p, p["execution"], archive=str(archive))
    started = time.perf_counter()
    result = load.execute(task_context("load"))
    finished = time.perf_counter()
    size = archive.stat().st_size
    archive.unlink()
    return {
        "bytes": size,
        "rows": int(result["rows_loaded"]),
        "rows_rejected": int(result["rows_rejected"]),
        "seconds": finished - started,
    }


def provider_two_tasks(p: Params) -> Params:
    """The two-task form: DownloadExecutionCsvOperator, then ExecutionCsvToSqlOperator on the file."""
    from abm_provider.operators.exports import DownloadExecutionCsvOperator

    if p.get("duckdb_path"):
        Path(p["duckdb_path"]).unlink(missing_ok=True)
    download = DownloadExecutionCsvOperator(
        task_id="download", execution=p["execution"], base=p["base"], if_exists="overwrite"
    )
    load = load_operator(p, "{{ placeholder }}")
    started = time.perf_counter()
    downloaded = download.execute(task_context("download"))
    loaded_at = time.perf_counter()
    load.source = downloaded
    result = load.execute(task_context("load"))
    finished = time.perf_counter()
    Path(downloaded["path"]).unlink(missing_ok=True)
    return {
        "bytes": int(downloaded["bytes"]),
        "rows": int(result["rows_loaded"]),
        "rows_rejected": int(result["rows_rejected"]),
        "seconds": finished - started,
        "download_seconds": loaded_at - started,
        "load_seconds": finished - loaded_at,
    }


def ceiling_duckdb(p: Params) -> Params:
    """``curl`` to a file, then DuckDB's own ``read_csv`` into a table, under the same memory limit."""
    import duckdb

    target = Path(p["base"]) / "ceiling.csv"
    Path(p["duckdb_path"]).unlink(missing_ok=True)
    download_s = curl_to_file(p["execution"]["downloadUri"], target)
    started = time.perf_counter()
    with duckdb.connect(p["duckdb_path"]) as con:
        options = p.get("dialect_options") or {}
        if options.get("memory_limit"):
            con.execute(f"SET memory_limit = '{options['memory_limit']}'")
        if options.get("threads"):
            con.execute(f"SET threads = {int(options['threads'])}")
        con.execute(
            f"CREATE TABLE {CEILING_TABLE} AS SELECT * FROM read_csv(?, header = true)", [str(target)]
        )
        row = con.execute(f"SELECT COUNT(*) FROM {CEILING_TABLE}").fetchone()
    load_s = time.perf_counter() - started
    size = target.stat().st_size
    target.unlink()
    return {
        "bytes": size,
        "rows": int(row[0]) if row else 0,
        "seconds": download_s + load_s,
        "download_seconds": download_s,
        "load_seconds": load_s,
    }


def ceiling_postgres(p: Params) -> Params:
    """``curl`` to a file, then ``psql \\copy`` into a typed table (created before the clock starts)."""
    from abm_provider.warehouse.schema import export_schema

    schema = export_schema(p["export_type"])
    columns = ", ".join(f"{name} {kind.sql_type}" for name, kind in schema.columns)
    psql = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", p["pg_dsn"]]
    subprocess.run(
        [
            *psql,
            "-c",
            f"DROP TABLE IF EXISTS {CEILING_TABLE}",
            "-c",
            f"CREATE TABLE {CEILING_TABLE} ({columns})",
        ],
        check=True,
    )
    target = Path(p["base"]) / "ceiling.csv"
    download_s = curl_to_file(p["execution"]["downloadUri"], target)
    started = time.perf_counter()
    out = subprocess.run(
        [
            *psql,
            "-c",
            f"\\copy {CEILING_TABLE} FROM '{target}' WITH (FORMAT csv, HEADER true)",
            "-c",
            "\\echo",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    load_s = time.perf_counter() - started
    del out
    counted = subprocess.run(
        [*psql, "-At", "-c", f"SELECT COUNT(*) FROM {CEILING_TABLE}"],
        check=True,
        capture_output=True,
        text=True,
    )
    size = target.stat().st_size
    target.unlink()
    return {
        "bytes": size,
        "rows": int(counted.stdout.strip()),
        "seconds": download_s + load_s,
        "download_seconds": download_s,
        "load_seconds": load_s,
    }


def baseline_pandas(p: Params) -> Params:
    """What users write by hand: ``requests.get().content`` -> ``pandas.read_csv`` -> ``to_sql``."""
    import pandas as pd
    import requests
    from sqlalchemy import create_engine

    engine = create_engine(p["sqlalchemy_url"])
    started = time.perf_counter()
    content = requests.get(p["execution"]["downloadUri"], timeout=600).content
    frame = pd.read_csv(io.BytesIO(content))
    frame.to_sql(BASELINE_TABLE, engine, if_exists="replace", index=False)
    seconds = time.perf_counter() - started
    engine.dispose()
    return {"bytes": len(content), "rows": len(frame), "seconds": seconds}


# ---------------------------------------------------------------------------------------- section 2


def provider_list_sync(p: Params) -> Params:
    """AddAccountsToListOperator reading the accounts table with a SQL query, batches of 1000."""
    from abm_provider.operators.account_lists import AddAccountsToListOperator

    op = AddAccountsToListOperator(
        task_id="sync",
        list_id=p["list_id"],
        sql=ACCOUNTS_SQL,
        sql_conn_id=p["conn_id"],
        column_map=COLUMN_MAP,
        batch_size=BATCH,
        rejects_base=p["base"],
    )
    started = time.perf_counter()
    summary = op.execute(task_context("sync"))
    seconds = time.perf_counter() - started
    return {"accounts": int(summary["sent"]), "added": int(summary["added"]), "seconds": seconds}


def bare_batches(p: Params) -> Iterator[list[dict[str, str]]]:
    """The same rows as the operator reads, 1000 per request, as plain dicts.

    Read from the DuckDB file ``duckdb_path``, or with ``pg_dsn`` from PostgreSQL (a server-side cursor);
    ``sql`` is the query, by default the lists section's.
    """
    sql = p.get("sql") or ACCOUNTS_SQL
    if p.get("pg_dsn"):
        import psycopg

        with psycopg.connect(p["pg_dsn"]) as conn, conn.cursor(name="bare") as cursor:
            cursor.execute(sql)
            while rows := cursor.fetchmany(BATCH):
                yield [{"id": i, "name": n, "crmOrgId": org, "crmType": "SALESFORCE"} for i, n, org in rows]
        return
    import duckdb

    with duckdb.connect(p["duckdb_path"], read_only=True) as con:
        cursor = con.execute(sql)
        while rows := cursor.fetchmany(BATCH):
            yield [{"id": i, "name": n, "crmOrgId": org, "crmType": "SALESFORCE"} for i, n, org in rows]


def bare_list_sync(p: Params) -> Params:
    """A bare ``requests.Session`` loop posting the same batches: no validation, retries or rejects."""
    import requests

    url = f"{p['base_url']}/accountLists/v2/accountLists/{p['list_id']}/accounts/add"
    sent = added = 0
    started = time.perf_counter()
    with requests.Session() as session:
        session.headers["Authorization"] = f"Bearer {p['api_key']}"
        for batch in bare_batches(p):
            response = session.post(url, json={"accounts": batch}, timeout=60)
            response.raise_for_status()
            sent += len(batch)
            added += int(response.json().get("addedAccounts") or 0)
    seconds = time.perf_counter() - started
    return {"accounts": sent, "added": added, "seconds": seconds}


# ---------------------------------------------------------------------------------------- section 3


def admin(base_url: str, method: str, path: str, body: Params | None = None) -> Any:
    import requests

    response = requests.request(method, f"{base_url}/_admin/{path}", json=body, timeout=60)
    response.raise_for_status()
    return response.json()


def triggers(p: Params) -> Params:
    """N ExecutionCompleteTriggers in one event loop until the execution they wait for completes."""
    from abm_provider.triggers.exports import ExecutionCompleteTrigger

    polls = 0
    count = int(p["count"])
    # CPU when every trigger has finished its first look: that round also pays for the connection
    # lookups, the sessions and the lazy imports, so steady rounds are measured from there on.
    first_round_cpu: list[float] = []

    class CountingTrigger(ExecutionCompleteTrigger):
        """Counts finished looks at the executions, so CPU can be divided by poll rounds actually made."""

        async def check_once(self, hook: Any) -> Any:
            nonlocal polls
            verdict = await super().check_once(hook)
            polls += 1
            if polls == count:
                first_round_cpu.append(cpu_seconds())
            return verdict

    clock = admin(p["base_url"], "GET", "clock")
    after = clock.get("now") or clock.get("time") or clock.get("clock")
    rounds = int(p["rounds"])
    made = [
        CountingTrigger(
            abm_conn_id="abm_default",
            export_type=p["export_type"],
            updated_after=after,
            poll_interval=float(p["poll_interval"]),
        )
        for _ in range(count)
    ]
    idle_kib = status_kib("VmRSS")
    admin(
        p["base_url"],
        "POST",
        f"exportJobs/{p['export_type']}/fire",
        {"apiKey": p["api_key"], "outcome": "COMPLETE", "runningSeconds": rounds * float(p["poll_interval"])},
    )

    async def first_event(trigger: ExecutionCompleteTrigger) -> str:
        async for event in trigger.run():
            return str(event.payload["status"])
        return "none"

    async def run_all() -> list[str]:
        return list(await asyncio.gather(*(first_event(t) for t in made)))

    cpu0, started = cpu_seconds(), time.perf_counter()
    statuses = asyncio.run(run_all())
    cpu, seconds = cpu_seconds() - cpu0, time.perf_counter() - started
    # RSS only grows while the loop runs (nothing is freed back to the OS), so the process's high-water
    # mark is the loop's peak; reading it at the end costs no CPU during the rounds being measured.
    peak_kib = status_kib("VmHWM")
    poll_rounds = polls / len(made)
    steady_cpu = cpu0 + cpu - first_round_cpu[0]
    return {
        "first_round_cpu": first_round_cpu[0] - cpu0,
        "steady_cpu_per_round": steady_cpu / max(poll_rounds - 1, 1e-9),
        "triggers": len(made),
        "successes": statuses.count("success"),
        "polls": polls,
        "poll_rounds": poll_rounds,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "cpu_per_round": cpu / max(poll_rounds, 1e-9),
        "idle_rss_kib": idle_kib,
        "loop_peak_rss_kib": peak_kib,
        "added_rss_kib": max(peak_kib - idle_kib, 0),
        "status_after": status_summary(statuses),
    }


def status_summary(statuses: list[str]) -> dict[str, int]:
    return {s: statuses.count(s) for s in sorted(set(statuses))}


def poke_sensor(p: Params) -> Params:
    """One poke-mode ExecutionCompleteSensor process: what each of N worker slots would hold."""
    from abm_provider.sensors.exports import ExecutionCompleteSensor

    sensor = ExecutionCompleteSensor(
        task_id="wait",
        export_type=p["export_type"],
        updated_after=p.get("updated_after"),
        deferrable=False,
        mode="poke",
        poke_interval=1,
    )
    context = task_context("wait")
    sensor.poke(context)  # the first poke pays for the connection lookup and the session
    cpu0 = cpu_seconds()
    pokes = int(p["pokes"])
    for _ in range(pokes):
        sensor.poke(context)
    return {"pokes": pokes, "cpu_per_poke": (cpu_seconds() - cpu0) / pokes}


# ---------------------------------------------------------------------------------------- section 4

PROVIDER_MODULES = (
    "abm_provider.hooks.abm",
    "abm_provider.operators.exports",
    "abm_provider.operators.account_lists",
    "abm_provider.sensors.exports",
    "abm_provider.triggers.exports",
    "abm_provider.transfers.csv_to_sql",
)
# What the provider imports from outside itself; measured so "beyond Airflow" can also exclude them.
PROVIDER_DEPENDENCIES = (
    "airflow.triggers.base",
    "requests",
    "aiohttp",
    "tenacity",
)


def import_time(p: Params) -> Params:
    """Seconds to import ``airflow.sdk``, then the provider's dependencies, then the provider."""
    import importlib

    started = time.perf_counter()
    importlib.import_module("airflow.sdk")
    sdk_done = time.perf_counter()
    if p.get("with_dependencies"):
        for name in PROVIDER_DEPENDENCIES:
            importlib.import_module(name)
    deps_done = time.perf_counter()
    for name in PROVIDER_MODULES:
        importlib.import_module(name)
    finished = time.perf_counter()
    return {
        "airflow_seconds": sdk_done - started,
        "dependencies_seconds": deps_done - sdk_done,
        "provider_seconds": finished - deps_done,
    }


def dag_parse(p: Params) -> Params:
    """Parse one DAG file as the dag processor does: Airflow already imported, the file not."""
    import airflow.sdk  # noqa: F401 - the dag processor has it loaded before it parses
    from airflow.dag_processing.dagbag import DagBag

    started = time.perf_counter()
    bag = DagBag(dag_folder=p["path"], safe_mode=False, load_op_links=False)
    seconds = time.perf_counter() - started
    if bag.import_errors:
        raise RuntimeError(f"{p['path']} failed to parse: {bag.import_errors}")
    return {"seconds": seconds, "dags": len(bag.dags)}


# ---------------------------------------------------------------------------------------- section 5


def timed_phases(cls: Any, phases: dict[str, str]) -> dict[str, float]:
    """Wrap methods of ``cls`` (in this child only) to add up their wall time under the given keys.

    A method the class no longer has is skipped, so the figure goes missing rather than the case failing.
    """
    totals: dict[str, float] = {}

    def timed(key: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                totals[key] = totals.get(key, 0.0) + time.perf_counter() - started

        return wrapper

    for name, key in phases.items():
        if hasattr(cls, name):
            setattr(cls, name, timed(key, getattr(cls, name)))
    return totals


def timed_execute(op: Any, run_id: str) -> tuple[Any, float]:
    """``op``'s result in run ``run_id``, and the seconds its ``execute`` took."""
    started = time.perf_counter()
    summary = op.execute(task_context(op.task_id, run_id))
    return summary, time.perf_counter() - started


def account_list_sync(p: Params) -> Params:
    """AccountListSyncOperator over a table, its state tables on the same connection, run ``run_id``.

    The first run of a list plans every row and sends it all; a later run sends only what changed.
    The engine's plan (read, validate and stage the source, diff in SQL) and send (requests, each batch
    recorded) phases are timed apart.
    """
    from abm_provider.accounts.sync.engine import ListSync
    from abm_provider.operators.account_lists import AccountListSyncOperator

    phases = timed_phases(ListSync, {"_plan": "plan_seconds", "_send_run": "send_seconds"})
    op = AccountListSyncOperator(
        task_id="sync",
        list_id=p["list_id"],
        table=SYNC_TABLE,
        sql_conn_id=p["conn_id"],
        column_map=COLUMN_MAP,
        state_table_prefix=SYNC_STATE_PREFIX,
        max_in_flight=int(p.get("max_in_flight", 2)),
    )
    summary, seconds = timed_execute(op, p["run_id"])
    return {**{k: v for k, v in summary.items() if k != "list_id"}, **phases, "seconds": seconds}


def account_audience_sync(p: Params) -> Params:
    """AccountAudienceSyncOperator tiering a table over ``audiences`` (``{tier: list id}``) by its
    ``tier`` column, the customers table excluded, state tables on the same connection, run ``run_id``.

    The programme's totals, flattened, with its moves between lists; the engine's plan (tier the source
    and plan every list) and send (every list's removals, then its additions) phases timed apart.
    """
    from abm_provider.accounts.audiences.engine import AudienceSync
    from abm_provider.operators.account_lists import AccountAudienceSyncOperator

    phases = timed_phases(AudienceSync, {"_plan": "plan_seconds", "_send": "send_seconds"})
    op = AccountAudienceSyncOperator(
        task_id="audiences",
        audiences=p["audiences"],
        audience_column="tier",
        exclusions=[{"table": AUDIENCE_CUSTOMERS}],
        table=AUDIENCE_TABLE,
        sql_conn_id=p["conn_id"],
        column_map=COLUMN_MAP,
        state_table_prefix=AUDIENCE_STATE_PREFIX,
        max_in_flight=int(p.get("max_in_flight", 2)),
    )
    summary, seconds = timed_execute(op, p["run_id"])
    return {
        **summary["totals"],
        "lists": len(summary["lists"]),
        "move_counts": {f"{m['from']} -> {m['to']}": int(m["accounts"]) for m in summary["moves"]},
        **phases,
        "seconds": seconds,
    }


def cloud_load(p: Params) -> Params:
    """One load of a local export file into an empty cloud warehouse (an emulator), by ``method``,
    into ``table`` (``bench_provider`` when not given; BigQuery's is ``dataset.bench_provider``).

    The Snowflake connector retries an emulator's HTTP 500 until its network timeout, by default
    for ever: it is bounded here as the tests bound it.
    """
    import hashlib

    from snowflake.connector import connection as connector

    from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator

    for name in ("network_timeout", "login_timeout"):
        connector.DEFAULT_CONFIGURATION[name] = (60, connector.DEFAULT_CONFIGURATION[name][1])
    path = Path(p["path"])
    with path.open("rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    source = {
        "path": str(path),
        "bytes": path.stat().st_size,
        "sha256": digest,
        "execution_id": "bench-1",
        "export_type": "TACTIC_PERFORMANCE",
    }
    op = ExecutionCsvToSqlOperator(
        task_id="load",
        source=source,
        sql_conn_id=p["conn_id"],
        table=p.get("table", PROVIDER_TABLE),
        method=p["method"],
    )
    started = time.perf_counter()
    out = op.execute(task_context("load"))
    return {
        "seconds": time.perf_counter() - started,
        "rows_loaded": out["rows_loaded"],
        "method": out["method"],
    }


CASES: dict[str, Callable[[Params], Params]] = {
    "provider_export": provider_export,
    "provider_two_tasks": provider_two_tasks,
    "ceiling_duckdb": ceiling_duckdb,
    "ceiling_postgres": ceiling_postgres,
    "baseline_pandas": baseline_pandas,
    "provider_list_sync": provider_list_sync,
    "bare_list_sync": bare_list_sync,
    "account_list_sync": account_list_sync,
    "account_audience_sync": account_audience_sync,
    "triggers": triggers,
    "poke_sensor": poke_sensor,
    "import_time": import_time,
    "dag_parse": dag_parse,
    "cloud_load": cloud_load,
}


def run_profiled(case: str, params: Params, folder: Path) -> Params:
    """The case under cProfile, its stats saved as ``<folder>/<case>-<pid>.pstats`` (``--profile``)."""
    import cProfile

    folder.mkdir(parents=True, exist_ok=True)
    profiler = cProfile.Profile()
    result = profiler.runcall(CASES[case], params)
    profiler.dump_stats(str(folder / f"{case}-{os.getpid()}.pstats"))
    return result


def main(argv: list[str]) -> int:
    case, params = argv[1], json.loads(argv[2])
    profile_dir = os.environ.get("BENCH_PROFILE_DIR")
    result = run_profiled(case, params, Path(profile_dir)) if profile_dir else CASES[case](params)
    result["peak_rss_kib"] = status_kib("VmHWM")
    result["cpu_seconds_total"] = cpu_seconds()
    sys.stdout.flush()
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
