"""`make e2e`, events scenario: the event-driven export DAG on its Asset watcher, in separate processes.

A scheduler, a triggerer, a dag-processor, an api-server and a Celery worker (`e2e_stack`) run
``abm_export_on_event``, whose Asset watcher (``ExecutionCompletedEventTrigger``) runs in the
triggerer. The emulator's clock runs at real speed, and executions complete when this script says:

1. one execution completes: exactly one DAG run follows, and it loads that execution;
2. two executions complete in one jump of the clock, so between two polls: both are loaded, whether
   Airflow folds their events into one run or not;
3. the triggerer is stopped and a new one started: it polls again and fires nothing it fired before
   (the cursor is in the Asset's state store);
4. the table equals loading the three executions one by one, oldest first, into a table of its own.

"Settled" is read from Airflow's records, never from a sleep: the watched Asset's events, the DAG's
queue of asset events, and its runs, in that order, so a run made between two reads is still seen.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

import requests
from e2e_stack import (
    API_KEY,
    API_TIMEOUT_SECONDS,
    Api,
    Processes,
    Running,
    Stack,
    attempt,
    check,
    log,
    run_stack,
    start_triggerer,
)

STACK = Stack(
    meta_db="abm_e2e_events_meta", warehouse_db="abm_e2e_events_wh", redis_db=6, lock_key=0x0AB3_E2E1
)
DAG_ID = "abm_export_on_event"
LOAD_TASK = "load_unloaded"
EXPORT_TYPE = "TACTIC_PERFORMANCE"
ASSET_NAME = f"abm_export/abm_default/{EXPORT_TYPE}"
TABLE = "abm_tactic_performance"
ONE_BY_ONE = f"{TABLE}_one_by_one"
WORKERS = ("worker-a",)
# The watcher's poll interval (the DAG reads it from ABM_POKE_INTERVAL).
POLL_INTERVAL_SECONDS = 2
# Two executions run this long (emulated seconds), then one clock jump completes both: between two
# polls, yet seconds apart, so "oldest first" names one order (the service breaks a tie by id).
RUNNING_SECONDS = (600, 605)
# Polls the restarted triggerer's watcher must make before "it fired nothing" is read.
POLLS_AFTER_RESTART = 3
# Limits of each wait; a passing run on this machine needs about 30 s of each.
SETTLE_TIMEOUT_SECONDS = 240
POLLS_TIMEOUT_SECONDS = 120


def create_export_job(base_url: str) -> None:
    """The job the executions belong to, as a user's ``CreateExportJobOperator`` made it before."""
    response = requests.post(
        f"{base_url}/exports/v1/exportJobs",
        json={"type": EXPORT_TYPE, "schedule": "0 5 * * *"},
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=30,
    )
    response.raise_for_status()


def watcher_polls(emulator: Any) -> int:
    """Listings the watcher made and the emulator answered: it alone lists COMPLETE executions newest
    first (the load lists them oldest first). A request is logged when it arrives, so one not yet
    answered (no status) could still see an execution completed after it was counted."""
    return sum(
        1
        for seen in emulator.requests_seen()
        if seen.get("origin") == "api"
        and seen.get("status") is not None
        and str(seen.get("path", "")).endswith(f"/exportJobs/{EXPORT_TYPE}/executions")
        and "updateTime desc" in unquote_plus(str(seen.get("query", "")))
    )


class Watched:
    """What Airflow recorded of the watcher and the DAG, through the REST API."""

    def __init__(self, api: Api, procs: Processes) -> None:
        self.api = api
        self.procs = procs
        self.asset_id = self._asset_id()

    def _asset_id(self) -> int:
        def find() -> int | None:
            assets = self.api.call("GET", "/assets", params={"name_pattern": ASSET_NAME})["assets"]
            return next((int(a["id"]) for a in assets if a["name"] == ASSET_NAME), None)

        found: int = self.api.wait_until(f"the Asset {ASSET_NAME}", find, self.procs, API_TIMEOUT_SECONDS)
        return found

    def fired(self) -> list[str]:
        """The execution ids of the watched Asset's events, oldest first (the trigger's payloads)."""
        events = self.api.call(
            "GET", "/assets/events", params={"asset_id": self.asset_id, "order_by": "timestamp", "limit": 100}
        )["asset_events"]
        return [str(((e.get("extra") or {}).get("payload") or {}).get("execution_id")) for e in events]

    def queued(self) -> list[Any]:
        answer = self.api.call("GET", f"/dags/{DAG_ID}/assets/queuedEvents")
        return list(answer.get("queued_events", []))

    def loaded(self, run_id: str) -> list[str]:
        """The executions a run's load task loaded (its XCom)."""
        entry = self.api.call(
            "GET",
            f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{LOAD_TASK}/xcomEntries/return_value",
            params={"deserialize": "true", "stringify": "false"},
        )
        value = entry.get("value") or {}
        return [str(r["execution_id"]) for r in value.get("executions", []) if not r.get("skipped")]

    def settled(self, fired: int) -> tuple[list[str], list[dict[str, Any]]] | None:
        """(fired ids, runs) once ``fired`` events are recorded, none waits in the DAG's queue and every
        run has finished; read in that order, so a run the scheduler makes between reads is seen."""
        ids = self.fired()
        if len(ids) < fired or self.queued():
            return None
        runs = self.api.dag_runs(DAG_ID)
        if not runs or any(r["state"] not in ("success", "failed") for r in runs):
            return None
        return ids, runs

    def wait_settled(self, fired: int) -> tuple[list[str], list[dict[str, Any]]]:
        settled: tuple[list[str], list[dict[str, Any]]] = self.api.wait_until(
            f"{fired} watcher event(s) and every run they made finished",
            lambda: self.settled(fired),
            self.procs,
            SETTLE_TIMEOUT_SECONDS,
        )
        return settled


def wait_for_polls(emulator: Any, procs: Processes, count: int, what: str) -> None:
    deadline = time.monotonic() + POLLS_TIMEOUT_SECONDS
    while watcher_polls(emulator) < count:
        procs.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {POLLS_TIMEOUT_SECONDS} s waiting for {what}")
        time.sleep(0.5)


def check_runs(
    watched: Watched, runs: list[dict[str, Any]], expected: list[str], what: str, failures: list[str]
) -> None:
    """The runs all succeeded, were made by the Asset, and together loaded ``expected`` (oldest first),
    each once."""
    loaded = [execution for run in runs for execution in watched.loaded(run["dag_run_id"])]
    states = [(r["dag_run_id"], r["state"], r["run_type"]) for r in runs]
    check(
        all(state == "success" and kind == "asset_triggered" for _, state, kind in states),
        f"{what}: the Asset made {len(runs)} run(s), all succeeded ({states})",
        failures,
    )
    check(
        loaded == expected,
        f"{what}: the runs loaded {loaded}, each once, oldest first; completed: {expected}",
        failures,
    )


def restart_triggerer(emulator: Any, procs: Processes) -> int:
    """Stop the triggerer, start another; returns the watcher's polls before the new one started."""
    procs.stop_one("triggerer")
    before = watcher_polls(emulator)
    start_triggerer(procs, "triggerer-restarted")
    wait_for_polls(
        emulator, procs, before + POLLS_AFTER_RESTART, f"{POLLS_AFTER_RESTART} polls by the new triggerer"
    )
    return before


def load_one_by_one(env: dict[str, str], home: Path, ids: list[str]) -> None:
    """Load each execution in turn, oldest first, with the provider in this process, into ONE_BY_ONE."""
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home / "one-by-one"),
            "AIRFLOW__ABM__STATE_DIR": str(home / "one-by-one" / "state"),
            "AIRFLOW_CONN_ABM_DEFAULT": env["AIRFLOW_CONN_ABM_DEFAULT"],
            "AIRFLOW_CONN_ABM_WAREHOUSE": env["AIRFLOW_CONN_ABM_WAREHOUSE"],
        }
    )
    from abm_provider.hooks.abm import AbmHook
    from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator

    listed = {str(e["id"]): e for e in AbmHook("abm_default").iter_executions(EXPORT_TYPE)}
    for number, execution_id in enumerate(ids):
        ExecutionCsvToSqlOperator(
            task_id=f"one_by_one_{number}",
            source=listed[execution_id],
            sql_conn_id="abm_warehouse",
            table=ONE_BY_ONE,
            export_type=EXPORT_TYPE,
        ).execute(context={})


def check_one_by_one(failures: list[str]) -> None:
    """Both tables hold the same rows, written by the same executions (the load time aside)."""
    with STACK.warehouse() as conn:
        columns = [
            row[0]
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                "AND column_name <> '_loaded_at' ORDER BY ordinal_position",
                (TABLE,),
            ).fetchall()
        ]
        listed = ", ".join(f'"{c}"' for c in columns)
        differ = []
        for a, b in ((TABLE, ONE_BY_ONE), (ONE_BY_ONE, TABLE)):
            query = f"SELECT COUNT(*) FROM (SELECT {listed} FROM {a} EXCEPT ALL SELECT {listed} FROM {b}) d"
            differ.append(int((conn.execute(query).fetchone() or (0,))[0]))
        rows = int((conn.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone() or (0,))[0])
    check(
        rows > 0 and differ == [0, 0],
        f"{TABLE} ({rows} rows) equals loading the executions one by one (rows only in one table: {differ})",
        failures,
    )


@contextmanager
def emulator_running(port: int, storage_port: int) -> Iterator[Any]:
    """At real speed, on a clock a day ahead (every execution is newer than the watcher's start) and
    hours from the job's 05:00 fire time, so only this script completes executions."""
    from abm_emulator.testing import start_emulator

    start = (datetime.now(UTC) + timedelta(days=1)).replace(hour=12, minute=0, second=0, microsecond=0)
    with start_emulator(
        port=port,
        storage_port=storage_port,
        api_keys=[API_KEY],
        clock_speed=1.0,
        clock_start=start.isoformat(),
        export_size_bytes=300_000,
    ) as emulator:
        yield emulator


def scenario(running: Running) -> list[str]:
    api, procs, emulator = running.api, running.procs, running.emulator
    failures: list[str] = []
    create_export_job(emulator.base_url)
    api.wait_parsed(DAG_ID, procs)
    api.call("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})
    # The watcher's trigger is made when an unpaused DAG is parsed: ask for that parse now rather
    # than wait for the next one (30 s apart by default).
    api.call("PUT", f"/parseDagFile/{api.call('GET', f'/dags/{DAG_ID}')['file_token']}")
    log(f"unpaused {DAG_ID} and asked for it to be parsed again; waiting for its watcher to poll")
    watched = Watched(api, procs)
    wait_for_polls(emulator, procs, 1, "the watcher's first poll")

    first = str(emulator.fire(EXPORT_TYPE)["id"])
    log(f"execution {first} completed")
    fired, runs = watched.wait_settled(1)
    check(fired == [first], f"one completed execution, one watcher event (events: {fired})", failures)
    check(len(runs) == 1, f"one completed execution, exactly one DAG run ({len(runs)})", failures)
    check_runs(watched, runs, [first], "one execution", failures)

    together = [str(emulator.fire(EXPORT_TYPE, running_seconds=seconds)["id"]) for seconds in RUNNING_SECONDS]
    emulator.advance(max(RUNNING_SECONDS) + 1)
    log(f"executions {together} completed in one jump of the clock")
    fired, later = watched.wait_settled(3)
    check(
        sorted(fired) == sorted([first, *together]),
        f"two executions completed between two polls: one event each (events: {fired})",
        failures,
    )
    check_runs(watched, later[len(runs) :], together, "two executions at once", failures)

    before = restart_triggerer(emulator, procs)
    fired_after, after = watched.wait_settled(3)
    check(
        fired_after == fired and len(after) == len(later),
        f"the restarted triggerer polled {watcher_polls(emulator) - before} times and fired nothing old "
        f"(events {len(fired)} -> {len(fired_after)}, runs {len(later)} -> {len(after)})",
        failures,
    )

    attempt(
        "the one-by-one load",
        lambda: load_one_by_one(running.env, running.home, [first, *together]),
        failures,
    )
    attempt("the one-by-one comparison", lambda: check_one_by_one(failures), failures)
    return failures


def run(home: Path, started: float) -> list[str]:
    return run_stack(
        STACK,
        home,
        workers=WORKERS,
        poke_interval=POLL_INTERVAL_SECONDS,
        emulator=emulator_running,
        scenario=scenario,
    )
