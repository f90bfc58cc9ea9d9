"""`make e2e`: both example DAGs on Airflow's distributed engine, as local processes.

The topology of `docker/docker-compose.yaml` without Docker: api-server, scheduler, dag-processor,
triggerer and two Celery workers, on the PostgreSQL server and Redis that run on this machine (in
databases and a Redis db of their own), plus the emulator. It triggers both DAGs through the REST API,
waits for them, then checks what only a multi-process run can show: the warehouse tables in
PostgreSQL, the list in the emulator, that the sensor was deferred to the triggerer and resumed, and
that tasks ran on both workers. Every process it starts is stopped on the way out, also on failure,
Ctrl-C or SIGTERM.

Like the compose stack, all processes share one Airflow home (the compose ``airflow-logs`` volume) and
one ``[abm] state_dir`` (the compose ``abm-state`` volume): the export DAG hands the downloaded CSV to
the load task as a file path, which a worker on another host can only read through shared storage.

Exit codes: 0 passed, 1 a check failed, 3 skipped (PostgreSQL or Redis unreachable; the reason is
printed), 130 interrupted (Ctrl-C, SIGTERM or SIGHUP).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import e2e_events
from e2e_stack import API_KEY, TRIGGERER_HOST, Api, Processes, Running, Stack, attempt, check, log, run_stack
from e2e_stack import main as run_scenario

STACK = Stack(meta_db="abm_e2e_meta", warehouse_db="abm_e2e_wh", redis_db=5, lock_key=0x0AB3_E2E0)
TARGET_ACCOUNTS = 1_200
WORKERS = ("worker-a", "worker-b")
DAGS = ("abm_export_to_warehouse", "abm_sync_account_lists")
SENSOR = (DAGS[0], "wait_for_execution")
TRIGGER_CLASS = "ExecutionCompleteTrigger"
# Emulated seconds per real second (a day a minute): the emulated clock starts just after the export's
# 05:00 fire time, so the next execution comes about 60 s after the DAGs are triggered and the first
# sensor, which looks within seconds, finds none and has to defer.
CLOCK_SPEED = 1_440.0
# Download links live in emulated seconds; at this clock speed the default 900 s is under half a second.
LINK_TTL_SECONDS = 30 * 86_400
POKE_INTERVAL_SECONDS = 5
# The wait for both DAGs' runs; a passing run on this machine needs about 75 s of it.
RUNS_TIMEOUT_SECONDS = 270


def target_rows() -> list[tuple[str, str, str]]:
    """Every 97th id is malformed, so the rejects path of the list sync runs too."""
    return [
        (f"001{i:015d}" if i % 97 else f"BAD {i}", f"Account {i}, S.A. \u00e9", "00D000000000001")
        for i in range(TARGET_ACCOUNTS)
    ]


def seed_target_accounts() -> None:
    with STACK.warehouse() as conn:
        conn.execute("CREATE TABLE abm_target_accounts (account_id TEXT, account_name TEXT, crm_org_id TEXT)")
        with conn.cursor().copy("COPY abm_target_accounts FROM STDIN") as copy:
            for row in target_rows():
                copy.write_row(row)


@dataclass
class Observed:
    """What the REST API showed while the runs went on: each sensor's states, and its deferral."""

    sensor_states: dict[str, list[str]] = field(default_factory=dict)
    deferred: dict[str, tuple[float, dict[str, Any]]] = field(default_factory=dict)


def dag_runs(api: Api) -> dict[str, dict[str, str]]:
    """Every run of both DAGs -> state: the manual ones and those the scheduler made on unpausing."""
    return {
        dag_id: {
            run["dag_run_id"]: run["state"] for run in api.call("GET", f"/dags/{dag_id}/dagRuns")["dag_runs"]
        }
        for dag_id in DAGS
    }


def watch_sensors(api: Api, runs: Mapping[str, str], observed: Observed, started: float) -> None:
    dag_id, task_id = SENSOR
    for run_id, run_state in runs.items():
        if run_state in ("success", "failed") and run_id in observed.sensor_states:
            continue
        ti = api.task_instance(dag_id, run_id, task_id)
        state = str(ti.get("state"))
        seen = observed.sensor_states.setdefault(run_id, [])
        if not seen or seen[-1] != state:
            seen.append(state)
        if state == "deferred" and run_id not in observed.deferred:
            observed.deferred[run_id] = (time.monotonic() - started, ti)


def wait_for_runs(
    api: Api, procs: Processes, manual: Mapping[str, str], observed: Observed, started: float
) -> dict[str, dict[str, str]]:
    """Until every run of both DAGs has finished: the runs unpausing created share the DAGs'
    ``max_active_runs=1`` with the triggered ones, and are checked the same way."""
    deadline = time.monotonic() + RUNS_TIMEOUT_SECONDS
    last_report = 0.0
    while True:
        procs.check_alive()
        runs = dag_runs(api)
        watch_sensors(api, runs[SENSOR[0]], observed, started)
        states = [state for dag in runs.values() for state in dag.values()]
        mine = all(manual[dag_id] in runs[dag_id] for dag_id in DAGS)
        if mine and all(state in ("success", "failed") for state in states):
            return runs
        if time.monotonic() - last_report > 15:
            last_report = time.monotonic()
            sensors = "; ".join(f"{r}: {' -> '.join(s)}" for r, s in observed.sensor_states.items())
            log(f"runs: {runs}\n    sensor states: {sensors}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"DAG runs not finished after {RUNS_TIMEOUT_SECONDS} s: {runs}")
        time.sleep(1)


Instances = Mapping[tuple[str, str], list[dict[str, Any]]]


def print_worker_table(instances: Instances) -> None:
    rows = [
        (f"{dag_id}.{ti['task_id']}", run_id.split("__")[0], str(ti["state"]), str(ti.get("hostname")))
        for (dag_id, run_id), tis in instances.items()
        for ti in sorted(tis, key=lambda t: t.get("start_date") or "")
    ]
    width = max(len(row[0]) for row in rows)
    print(f"\n{'task':<{width}}  {'run':<9} {'state':<8} worker", flush=True)
    for task, run_kind, state, host in rows:
        print(f"{task:<{width}}  {run_kind:<9} {state:<8} {host}", flush=True)
    print(flush=True)


def check_workers(instances: Instances, failures: list[str]) -> None:
    print_worker_table(instances)
    hosts = [str(ti.get("hostname")) for tis in instances.values() for ti in tis]
    counts = {host: hosts.count(host) for host in sorted(set(hosts))}
    check(
        set(counts) == set(WORKERS),
        f"every task ran on a Celery worker and both workers ran tasks (task instances per host: {counts})",
        failures,
    )


def check_warehouse(failures: list[str]) -> int:
    """The export landed once per natural key; returns the membership row count for the list check."""
    with STACK.warehouse() as conn:
        rows, keys, days = conn.execute(
            "SELECT COUNT(*), COUNT(DISTINCT (date, tactic_id)), COUNT(DISTINCT date) "
            "FROM abm_tactic_performance"
        ).fetchone() or (0, 0, 0)
        members = int((conn.execute("SELECT COUNT(*) FROM abm_sync_members").fetchone() or (0,))[0])
        rejects = int((conn.execute("SELECT COUNT(*) FROM abm_sync_rejects").fetchone() or (0,))[0])
    check(
        rows > 0 and rows == keys,
        f"warehouse abm_tactic_performance: {rows} rows over {days} days, one per (date, tactic_id)",
        failures,
    )
    bad = sum(1 for row in target_rows() if row[0].startswith("BAD"))
    check(
        rejects == bad,
        f"warehouse abm_sync_rejects: {rejects} rows for the {bad} malformed target ids",
        failures,
    )
    return members


def check_list(emulator: Any, warehouse_members: int, failures: list[str]) -> None:
    """The emulator's own view (admin state), not the provider's, is compared with the target table."""
    accounts = [acc for acc in emulator.state()["accounts"].values() if API_KEY in acc["apiKeys"]]
    lists = [lst for acc in accounts for lst in acc["lists"]]
    on_list: set[str] = set()
    for lst in lists:
        on_list |= {member["id"] for member in emulator.members(lst["listId"], API_KEY)}
    expected = {row[0] for row in target_rows() if not row[0].startswith("BAD")}
    check(
        on_list == expected and warehouse_members == len(expected),
        f"list membership: emulator {len(on_list)} accounts over {len(lists)} list(s), warehouse "
        f"{warehouse_members}, expected {len(expected)} (the well-formed target ids)",
        failures,
    )


def trigger_logs(home: Path, run_id: str) -> dict[int, list[str]]:
    """The sensor's trigger log files as "HH:MM:SS event" lines, by the id of the triggerer job that
    wrote them: the triggerer names them ``attempt=<try>.log.trigger.<job id>.log`` by the task's log."""
    dag_id, task_id = SENSOR
    folder = home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
    found: dict[int, list[str]] = {}
    for path in sorted(folder.glob("attempt=*.log.trigger.*.log")):
        events = []
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError, AttributeError):
                record = json.loads(line)
                events.append(f"{str(record.get('timestamp', ''))[11:19]} {record.get('event')}")
        found[int(path.name.rsplit(".", 2)[1])] = events
    return found


def check_deferral(api: Api, procs: Processes, observed: Observed, failures: list[str]) -> None:
    """Three records that do not depend on each other: the REST API saw the task instance deferred on
    our trigger; the trigger's own log, written by the triggerer job (whose host the jobs API names),
    shows it starting and firing; the task log shows the sensor deferring, then completing on a worker."""
    dag_id, task_id = SENSOR
    triggerer_jobs = {
        job["id"]: job["hostname"]
        for job in api.call("GET", "/jobs", params={"job_type": "TriggererJob"})["jobs"]
    }
    print("\ndeferral evidence:", flush=True)
    print(f"  REST /jobs: triggerer jobs {triggerer_jobs}", flush=True)
    for run_id, states in observed.sensor_states.items():
        print(f"  REST: {task_id} in {run_id}: {' -> '.join(states)}", flush=True)
    resumed = []
    for run_id, (elapsed, ti) in observed.deferred.items():
        trigger = ti.get("trigger") or {}
        print(
            f"  REST: {run_id} deferred {elapsed:.0f} s into the e2e run, trigger {trigger.get('id')} "
            f"{trigger.get('classpath')} created {trigger.get('created_date')}; it had started on "
            f"{ti.get('hostname')}",
            flush=True,
        )
        fired_by = []
        for job_id, events in trigger_logs(procs.home, run_id).items():
            host = triggerer_jobs.get(job_id)
            for event in events:
                print(f"  trigger log (triggerer job {job_id} on {host}): {event[:160]}", flush=True)
            if host == TRIGGERER_HOST and any(event.endswith(" Trigger fired event") for event in events):
                fired_by.append(job_id)
        final = api.task_instance(dag_id, run_id, task_id)
        task_lines = api.task_log(dag_id, run_id, task_id, int(final["try_number"]))
        for line in task_lines:
            if any(word in line for word in ("Deferring", "DEFERRED", "COMPLETE")):
                print(f"  task log try {final['try_number']}: {line[:160]}", flush=True)
        print(f"  REST: {run_id} final state {final['state']} on {final['hostname']}", flush=True)
        if (
            str(trigger.get("classpath", "")).endswith(f".{TRIGGER_CLASS}")
            and fired_by
            and any("DEFERRED" in line for line in task_lines)
            and final["state"] == "success"
            and final["hostname"] in WORKERS
        ):
            resumed.append(run_id)
    check(
        bool(resumed),
        f"the sensor deferred on {TRIGGER_CLASS}, the triggerer fired it, and it resumed to success on a "
        f"worker (runs {resumed})",
        failures,
    )
    leaked = [
        str(path.relative_to(procs.home))
        for path in procs.home.rglob("*.log")
        if API_KEY.encode() in path.read_bytes()
    ]
    check(
        leaked == [], f"the API key is absent from every process and task log (found in {leaked})", failures
    )


def verify(
    api: Api, procs: Processes, runs: Mapping[str, Mapping[str, str]], emulator: Any, observed: Observed
) -> list[str]:
    failures: list[str] = []
    for dag_id, dag in runs.items():
        for run_id, state in dag.items():
            check(state == "success", f"{dag_id} {run_id} succeeded", failures)
    instances = {
        (dag_id, run_id): api.task_instances(dag_id, run_id) for dag_id, dag in runs.items() for run_id in dag
    }
    check_workers(instances, failures)
    members = attempt("the warehouse check", lambda: check_warehouse(failures), failures)
    attempt("the list check", lambda: check_list(emulator, members or 0, failures), failures)
    attempt("the deferral check", lambda: check_deferral(api, procs, observed, failures), failures)
    return failures


@contextmanager
def emulator_running(port: int, storage_port: int) -> Iterator[Any]:
    """The emulator CLI on ports chosen in advance, so it can start last: its clock then begins just
    after the export's 05:00 fire time whatever Airflow's start-up took, and the sensor has to wait."""
    from abm_emulator.testing import start_emulator

    start = (datetime.now(UTC) + timedelta(days=1)).replace(hour=5, minute=0, second=30, microsecond=0)
    with start_emulator(
        port=port,
        storage_port=storage_port,
        api_keys=[API_KEY],
        clock_speed=CLOCK_SPEED,
        clock_start=start.isoformat(),
        link_ttl=LINK_TTL_SECONDS,
        export_size_bytes=300_000,
    ) as emulator:
        yield emulator


def trigger_dags(api: Api, procs: Processes) -> dict[str, str]:
    """Trigger while still paused, then unpause: the scheduler then also makes each DAG's latest
    scheduled run, and both kinds run on the workers. A logical date is given, as the UI's trigger form
    does, because the export DAG's sensor reads ``data_interval_end``."""
    for dag_id in DAGS:
        api.wait_parsed(dag_id, procs)
    runs: dict[str, str] = {}
    for dag_id in DAGS:
        body = {"logical_date": datetime.now(UTC).isoformat(), "conf": {}}
        runs[dag_id] = api.call("POST", f"/dags/{dag_id}/dagRuns", json=body)["dag_run_id"]
        api.call("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
        log(f"triggered and unpaused {dag_id}: {runs[dag_id]}")
    return runs


def scenario(running: Running, started: float) -> list[str]:
    manual = trigger_dags(running.api, running.procs)
    observed = Observed()
    runs = wait_for_runs(running.api, running.procs, manual, observed, started)
    log(f"all runs finished: {runs}")
    return verify(running.api, running.procs, runs, running.emulator, observed)


def run(home: Path, started: float, private_disks: bool) -> list[str]:
    return run_stack(
        STACK,
        home,
        workers=WORKERS,
        poke_interval=POKE_INTERVAL_SECONDS,
        emulator=emulator_running,
        scenario=lambda running: scenario(running, started),
        seed=seed_target_accounts,
        private_disks=private_disks,
    )


SCENARIOS = ("dags", "events")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scenario",
        choices=(*SCENARIOS, "all"),
        default="all",
        help="dags: the daily export and the list sync on Celery workers with a deferred sensor; "
        "events: the event-driven export DAG on its Asset watcher; all (the default): both, in turn",
    )
    parser.add_argument(
        "--private-worker-disks",
        action="store_true",
        help="give each worker its own [abm] state_dir (a tmpfs in a mount namespace: needs unshare and "
        "root), as on hosts without the shared volume, to see which hand-offs need shared storage",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scenarios = SCENARIOS if args.scenario == "all" else (args.scenario,)
    codes = []
    for scenario in scenarios:
        log(f"scenario {scenario}")
        if scenario == "dags":
            codes.append(run_scenario(lambda home, started: run(home, started, args.private_worker_disks)))
        else:
            codes.append(run_scenario(e2e_events.run))
    return max(codes)


if __name__ == "__main__":
    raise SystemExit(main())
