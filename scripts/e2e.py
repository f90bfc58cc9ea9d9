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
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import requests

ROOT = Path(__file__).resolve().parents[1]
PG_HOST, PG_PORT = "127.0.0.1", 5432
REDIS_HOST, REDIS_PORT, REDIS_DB = "127.0.0.1", 6379, 5
META_DB, WAREHOUSE_DB = "abm_e2e_meta", "abm_e2e_wh"
API_KEY = "e2e-secret-key-7f3a9c"
TARGET_ACCOUNTS = 1_200
WORKERS = ("worker-a", "worker-b")
TRIGGERER_HOST = "triggerer"
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
# Limits of each wait, summing (with the stop) to under the 10 minutes the run may take; a passing run
# on this machine needs about 3 s, 15 s, 1 s and 75 s of them.
MIGRATE_TIMEOUT_SECONDS = 90
API_TIMEOUT_SECONDS = 90
PARSE_TIMEOUT_SECONDS = 90
RUNS_TIMEOUT_SECONDS = 270
SKIPPED = 3
INTERRUPTED = 130
RUN_MARKER = "ABM_E2E_RUN"
T = TypeVar("T")
# pg advisory lock key serialising e2e runs that share this PostgreSQL server and Redis db.
LOCK_KEY = 0x0AB3_E2E0
LOCK_TIMEOUT_SECONDS = 240


def log(message: str) -> None:
    print(f"[e2e {datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def exclusive_run() -> Iterator[None]:
    """Hold a PostgreSQL advisory lock for the whole run: two e2e runs at once (two checkouts' test
    suites on one machine or CI host) would otherwise drop each other's databases and share a broker."""
    import psycopg

    with psycopg.connect(
        host=PG_HOST, port=PG_PORT, user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        deadline = time.monotonic() + LOCK_TIMEOUT_SECONDS
        while not (conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone() or (False,))[0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"another e2e run held the lock for over {LOCK_TIMEOUT_SECONDS} s")
            log("another e2e run is in progress on this PostgreSQL server; waiting for it")
            time.sleep(10)
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))


def recreate_databases() -> None:
    """A fresh metadata and warehouse database per run, so nothing from an earlier run can pass a check."""
    import psycopg

    with psycopg.connect(
        host=PG_HOST, port=PG_PORT, user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        for name in (META_DB, WAREHOUSE_DB):
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')


def flush_broker() -> None:
    """Messages queued by an aborted earlier run would otherwise be executed against this run's DB."""
    import redis

    redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB).flushdb()


def target_rows() -> list[tuple[str, str, str]]:
    """Every 97th id is malformed, so the rejects path of the list sync runs too."""
    return [
        (f"001{i:015d}" if i % 97 else f"BAD {i}", f"Account {i}, S.A. \u00e9", "00D000000000001")
        for i in range(TARGET_ACCOUNTS)
    ]


def seed_target_accounts() -> None:
    import psycopg

    with psycopg.connect(host=PG_HOST, port=PG_PORT, user="postgres", dbname=WAREHOUSE_DB) as conn:
        conn.execute("CREATE TABLE abm_target_accounts (account_id TEXT, account_name TEXT, crm_org_id TEXT)")
        with conn.cursor().copy("COPY abm_target_accounts FROM STDIN") as copy:
            for row in target_rows():
                copy.write_row(row)


def airflow_env(home: Path, api_port: int, emulator_url: str, marker: str) -> dict[str, str]:
    """The configuration every process gets, as the compose file's ``x-airflow-common`` environment."""
    meta = f"postgresql+psycopg2://postgres@{PG_HOST}:{PG_PORT}/{META_DB}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ABM_"))}
    env.update(
        {
            RUN_MARKER: marker,
            "AIRFLOW_HOME": str(home),
            "PYTHONPATH": str(ROOT / "scripts"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": "e2e_hostname.hostname",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": f"e2e-jwt-{marker}",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": meta,
            "AIRFLOW__CELERY__BROKER_URL": f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql://postgres@{PG_HOST}:{PG_PORT}/{META_DB}",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "AIRFLOW__ABM__STATE_DIR": str(home / "abm-state"),
            "ABM_POKE_INTERVAL": str(POKE_INTERVAL_SECONDS),
            # A failure shows at once instead of after two retries two minutes apart (the DAGs read it).
            "ABM_TASK_RETRIES": "0",
            "AIRFLOW_CONN_ABM_DEFAULT": json.dumps(
                {"conn_type": "abm", "host": emulator_url, "password": API_KEY}
            ),
            "AIRFLOW_CONN_ABM_WAREHOUSE": json.dumps(
                {
                    "conn_type": "postgres",
                    "host": PG_HOST,
                    "port": PG_PORT,
                    "login": "postgres",
                    "schema": WAREHOUSE_DB,
                }
            ),
            "ABM_E2E_HOSTNAME": "control-plane",
        }
    )
    return env


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM it when this script dies, even by SIGKILL (a test timeout)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def marked_pids(marker: str) -> list[int]:
    """Processes carrying this run's marker in their environment: anything started here, at any depth."""
    needle = f"{RUN_MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in _environ(entry).split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


_PF_KTHREAD = 0x00200000


def _environ(proc: Path) -> bytes:
    """A process's environment, waiting out an ``execve`` in progress.

    While a process is replacing its image the kernel shows its environment as empty, so a process
    started a moment ago (``setsid sleep`` just forked) would be missed. Only kernel threads have no
    environment at all; anything else that reads empty is read again for a few milliseconds.
    """
    environ = (proc / "environ").read_bytes()
    if environ or _is_kernel_thread(proc):
        return environ
    for _ in range(50):
        time.sleep(0.001)
        environ = (proc / "environ").read_bytes()
        if environ:
            break
    return environ


def _is_kernel_thread(proc: Path) -> bool:
    flags = (proc / "stat").read_text().rpartition(")")[2].split()[6]
    return bool(int(flags) & _PF_KTHREAD)


class Processes:
    """Starts Airflow components in process groups of their own and stops all of them, whatever happens."""

    def __init__(self, home: Path, env: Mapping[str, str], marker: str) -> None:
        self.home = home
        self.env = dict(env)
        self.marker = marker
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}

    def start(self, name: str, args: list[str], private_dir: Path | None = None, **extra_env: str) -> None:
        """``private_dir``: an empty tmpfs mounted there that only this process tree sees (a host's disk)."""
        path = self.home / f"{name}.log"
        self.logs[name] = path
        command = [str(Path(sys.executable).with_name("airflow")), *args]
        if private_dir is not None:
            mount = 'mkdir -p "$0" && mount -t tmpfs tmpfs "$0" && exec "$@"'
            namespace = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount]
            command = [*namespace, str(private_dir), *command]
        with path.open("wb") as out:
            self.running[name] = subprocess.Popen(
                command,
                env={**self.env, **extra_env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        log(f"started {name} (pid {self.running[name].pid})")

    def check_alive(self) -> None:
        for name, proc in self.running.items():
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with {proc.returncode}; see {self.logs[name]}:\n{self.tail(name)}"
                )

    def tail(self, name: str, lines: int = 40) -> str:
        text = self.logs[name].read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        """SIGTERM every group, SIGKILL what is left after 20 s, then any stray process with our marker."""
        for proc in self.running.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for name, proc in self.running.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(f"{name} did not stop on SIGTERM; killing it")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        strays = marked_pids(self.marker)
        for pid in strays:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        log(f"all Airflow processes stopped{f' ({len(strays)} strays killed)' if strays else ''}")


class Api:
    """The few REST calls the run needs (the all-admins auth manager adds a token to every request)."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}/api/v2"
        self.session = requests.Session()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.session.request(method, self.base + path, timeout=30, **kwargs)
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:500]}")
        return response.json() if response.content else None

    def wait_until(self, what: str, probe: Callable[[], Any], procs: Processes, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            procs.check_alive()
            try:
                value = probe()
            except (requests.RequestException, RuntimeError):
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(2)

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return list(self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"])

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")
        return result

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> list[str]:
        """The task's log as text lines (the API answers structured events; only their text is kept)."""
        answer = self.call(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            params={"full_content": "true"},
            headers={"Accept": "application/json"},
        )
        content = answer.get("content", []) if isinstance(answer, dict) else []
        if isinstance(content, str):
            return content.splitlines()
        return [str(item.get("event", item)) if isinstance(item, dict) else str(item) for item in content]


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


def check(condition: bool, message: str, failures: list[str]) -> None:
    log(("ok    " if condition else "FAIL  ") + message)
    if not condition:
        failures.append(message)


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
    import psycopg

    with psycopg.connect(host=PG_HOST, port=PG_PORT, user="postgres", dbname=WAREHOUSE_DB) as conn:
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


def attempt(what: str, step: Callable[[], T], failures: list[str]) -> T | None:
    """Run one check so that an error in it (a table a failed run never created) still lets the
    others report."""
    try:
        return step()
    except Exception as exc:  # any error here is a failed check, reported with the rest
        check(False, f"{what} could not run: {type(exc).__name__}: {exc}".strip(), failures)
        return None


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


def start_airflow(procs: Processes, api_port: int, private_disks: bool) -> None:
    procs.start("api-server", ["api-server", "--port", str(api_port), "--workers", "1"])
    procs.start("scheduler", ["scheduler"])
    procs.start("dag-processor", ["dag-processor"])
    procs.start(
        "triggerer",
        ["triggerer"],
        ABM_E2E_HOSTNAME=TRIGGERER_HOST,
        AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()),
    )
    for worker in WORKERS:
        procs.start(
            worker,
            ["celery", "worker", "--celery-hostname", f"{worker}@%h", "--concurrency", "2"],
            private_dir=procs.home / "abm-state" if private_disks else None,
            ABM_E2E_HOSTNAME=worker,
            AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port()),
        )


def trigger_dags(api: Api, procs: Processes) -> dict[str, str]:
    """Trigger while still paused, then unpause: the scheduler then also makes each DAG's latest
    scheduled run, and both kinds run on the workers. A logical date is given, as the UI's trigger form
    does, because the export DAG's sensor reads ``data_interval_end``."""
    for dag_id in DAGS:
        parsed = partial(api.call, "GET", f"/dags/{dag_id}")
        api.wait_until(f"{dag_id} to be parsed", parsed, procs, PARSE_TIMEOUT_SECONDS)
    runs: dict[str, str] = {}
    for dag_id in DAGS:
        body = {"logical_date": datetime.now(UTC).isoformat(), "conf": {}}
        runs[dag_id] = api.call("POST", f"/dags/{dag_id}/dagRuns", json=body)["dag_run_id"]
        api.call("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
        log(f"triggered and unpaused {dag_id}: {runs[dag_id]}")
    return runs


def run(home: Path, started: float, private_disks: bool) -> list[str]:
    marker = uuid.uuid4().hex
    with ExitStack() as stack:
        stack.enter_context(exclusive_run())
        recreate_databases()
        flush_broker()
        api_port, emulator_port, storage_port = free_port(), free_port(), free_port()
        env = airflow_env(home, api_port, f"http://127.0.0.1:{emulator_port}", marker)
        procs = Processes(home, env, marker)
        stack.callback(procs.stop)
        log(f"AIRFLOW_HOME {home}; metadata DB {META_DB}, warehouse DB {WAREHOUSE_DB}, redis db {REDIS_DB}")
        airflow = str(Path(sys.executable).with_name("airflow"))
        subprocess.run(
            [airflow, "db", "migrate"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=MIGRATE_TIMEOUT_SECONDS,
        )
        log("metadata database migrated")
        seed_target_accounts()
        start_airflow(procs, api_port, private_disks)
        api = Api(api_port)
        api.wait_until("the API server", lambda: api.call("GET", "/version"), procs, API_TIMEOUT_SECONDS)
        emulator = stack.enter_context(emulator_running(emulator_port, storage_port))
        log(f"emulator at {emulator.base_url}, clock {emulator.clock()}")
        try:
            manual = trigger_dags(api, procs)
            observed = Observed()
            runs = wait_for_runs(api, procs, manual, observed, started)
            log(f"all runs finished: {runs}")
            failures = verify(api, procs, runs, emulator, observed)
        except Exception:
            show_tails(procs)
            raise
        if failures:
            show_tails(procs)
        return failures


def show_tails(procs: Processes) -> None:
    for name in procs.logs:
        log(f"--- last lines of {name}.log ---\n{procs.tail(name, 25)}")


def _terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM/SIGHUP unwind like Ctrl-C, so the ExitStack stops every process started."""
    raise KeyboardInterrupt(f"signal {signum}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--private-worker-disks",
        action="store_true",
        help="give each worker its own [abm] state_dir (a tmpfs in a mount namespace: needs unshare and "
        "root), as on hosts without the shared volume, to see which hand-offs need shared storage",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    missing = [
        name
        for name, (host, port) in {
            "PostgreSQL": (PG_HOST, PG_PORT),
            "Redis": (REDIS_HOST, REDIS_PORT),
        }.items()
        if not reachable(host, port)
    ]
    if missing:
        log(f"SKIPPED: {' and '.join(missing)} not reachable on 127.0.0.1; the e2e run needs both")
        return SKIPPED
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _terminate)
    started = time.monotonic()
    home = Path(tempfile.mkdtemp(prefix="abm-e2e-"))
    try:
        failures = run(home, started, args.private_worker_disks)
    except KeyboardInterrupt as exc:
        log(f"interrupted ({exc or 'Ctrl-C'}); every process started was stopped; logs kept in {home}")
        return INTERRUPTED
    except Exception as exc:  # reported, with the logs kept for inspection
        failures = [f"{type(exc).__name__}: {exc}"]
        log(f"FAIL  {failures[0]}")
    wall = time.monotonic() - started
    log(f"e2e {'FAILED' if failures else 'passed'}; wall time {wall:.0f} s")
    if failures:
        log(f"logs kept in {home}")
    else:
        shutil.rmtree(home, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
