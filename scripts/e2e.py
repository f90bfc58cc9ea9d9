"""`make e2e`: both example DAGs on Airflow's distributed engine, as local processes.

The topology of `docker/docker-compose.yaml` without Docker: api-server, scheduler, dag-processor,
triggerer and two Celery workers, on the PostgreSQL server and Redis that run on this machine (in a
database and a Redis db of their own), plus the emulator. It triggers both DAGs through the REST API,
waits for them, then checks what only a multi-process run can show: the warehouse tables in
PostgreSQL, the list in the emulator, that the sensor was deferred and resumed by the triggerer, and
that tasks ran on both workers. Every process it starts is stopped on the way out, also on failure.

Exit codes: 0 passed, 1 a check failed, 3 skipped (PostgreSQL or Redis unreachable; the reason is printed).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
PG_HOST, PG_PORT = "127.0.0.1", 5432
REDIS_HOST, REDIS_PORT, REDIS_DB = "127.0.0.1", 6379, 11
META_DB, WAREHOUSE_DB = "abm_e2e_airflow", "abm_e2e_warehouse"
API_KEY = "e2e-secret-key-7f3a9c"
TARGET_ACCOUNTS = 1_200
WORKERS = ("worker-a", "worker-b")
DAGS = ("abm_export_to_warehouse", "abm_sync_account_lists")
DEADLINE_SECONDS = 420
SKIPPED = 3


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


def recreate_databases() -> None:
    import psycopg

    with psycopg.connect(
        host=PG_HOST, port=PG_PORT, user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        for name in (META_DB, WAREHOUSE_DB):
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')


def flush_broker() -> None:
    import redis

    redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB).flushdb()


def seed_target_accounts() -> None:
    import psycopg

    rows = [
        (f"001{i:015d}" if i % 97 else f"BAD {i}", f"Account {i}, S.A. \u00e9", "00D000000000001")
        for i in range(TARGET_ACCOUNTS)
    ]
    with psycopg.connect(host=PG_HOST, port=PG_PORT, user="postgres", dbname=WAREHOUSE_DB) as conn:
        conn.execute("CREATE TABLE abm_target_accounts (account_id TEXT, account_name TEXT, crm_org_id TEXT)")
        with conn.cursor().copy("COPY abm_target_accounts FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)


def airflow_env(home: Path, api_port: int, emulator_url: str) -> dict[str, str]:
    meta = f"postgresql+psycopg2://postgres@{PG_HOST}:{PG_PORT}/{META_DB}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "PYTHONPATH": str(ROOT / "scripts"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": "e2e_hostname.hostname",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API_AUTH__JWT_SECRET": "e2e-jwt-secret-not-for-production",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": meta,
            "AIRFLOW__CELERY__BROKER_URL": f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql://postgres@{PG_HOST}:{PG_PORT}/{META_DB}",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "AIRFLOW__ABM__STATE_DIR": str(home / "abm-state"),
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


class Processes:
    """Starts Airflow components with their own log files and stops all of them, whatever happens."""

    def __init__(self, home: Path, env: Mapping[str, str]) -> None:
        self.home = home
        self.env = dict(env)
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}

    def start(self, name: str, args: list[str], **extra_env: str) -> None:
        path = self.home / f"{name}.log"
        self.logs[name] = path
        airflow = str(Path(sys.executable).with_name("airflow"))
        with path.open("wb") as out:
            self.running[name] = subprocess.Popen(
                [airflow, *args],
                env={**self.env, **extra_env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
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
        for proc in self.running.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for name, proc in self.running.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(f"{name} did not stop on SIGTERM; killing it")
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log("all Airflow processes stopped")


class Api:
    """The few REST calls the run needs (the all-admins auth manager needs no token)."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}/api/v2"
        self.session = requests.Session()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.session.request(method, self.base + path, timeout=30, **kwargs)
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:500]}")
        return response.json() if response.content else None

    def wait_until(self, what: str, probe: Any, procs: Processes, timeout: float) -> Any:
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


def wait_for_runs(api: Api, procs: Processes, runs: Mapping[str, str]) -> dict[str, str]:
    states: dict[str, str] = {}
    deadline = time.monotonic() + DEADLINE_SECONDS
    last_report = 0.0
    while True:
        procs.check_alive()
        for dag_id, run_id in runs.items():
            states[dag_id] = api.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]
        if all(state in ("success", "failed") for state in states.values()):
            return states
        if time.monotonic() - last_report > 15:
            last_report = time.monotonic()
            log(f"runs: {states}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"DAG runs not finished after {DEADLINE_SECONDS} s: {states}")
        time.sleep(3)


def task_instances(api: Api, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    return list(api.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"])


def check(condition: bool, message: str, failures: list[str]) -> None:
    log(("ok    " if condition else "FAIL  ") + message)
    if not condition:
        failures.append(message)


def verify(api: Api, procs: Processes, runs: Mapping[str, str], emulator: Any) -> list[str]:
    import psycopg

    failures: list[str] = []
    instances = {dag_id: task_instances(api, dag_id, run_id) for dag_id, run_id in runs.items()}
    for dag_id, tis in instances.items():
        for ti in tis:
            log(f"  {dag_id}.{ti['task_id']}: {ti['state']} on {ti.get('hostname')}")
    hosts = {ti.get("hostname") for tis in instances.values() for ti in tis if ti["state"] == "success"}
    check(
        set(WORKERS) <= hosts,
        f"tasks ran on both Celery workers (hosts seen: {sorted(map(str, hosts))})",
        failures,
    )

    with psycopg.connect(host=PG_HOST, port=PG_PORT, user="postgres", dbname=WAREHOUSE_DB) as conn:
        rows, keys, days = conn.execute(
            "SELECT COUNT(*), COUNT(DISTINCT (date, tactic_id)), COUNT(DISTINCT date) "
            "FROM abm_tactic_performance"
        ).fetchone() or (0, 0, 0)
        members = (conn.execute("SELECT COUNT(*) FROM abm_list_membership").fetchone() or (0,))[0]
        rejects = (conn.execute("SELECT COUNT(*) FROM abm_list_rejects").fetchone() or (0,))[0]
    check(
        rows > 0 and rows == keys, f"warehouse: {rows} rows over {days} days, one per natural key", failures
    )

    state = emulator.admin("GET", "/_admin/state")
    lists = [lst for account in state.get("accounts", {}).values() for lst in account.get("lists", [])]
    on_list = sum(int(lst.get("memberCount", lst.get("member_count", 0))) for lst in lists)
    expected_members = sum(1 for i in range(TARGET_ACCOUNTS) if i % 97)
    check(
        on_list == members == expected_members,
        f"list membership: emulator {on_list}, warehouse {members}, expected {expected_members}; "
        f"{rejects} rejects",
        failures,
    )

    triggerer_log = procs.logs["triggerer"].read_text(errors="replace")
    sensor = next(ti for ti in instances[DAGS[0]] if ti["task_id"] == "wait_for_execution")
    deferred = "ExecutionCompleteTrigger" in triggerer_log
    check(
        deferred and sensor["state"] == "success",
        "the sensor was deferred to the triggerer and resumed (trigger in the triggerer log, task succeeded)",
        failures,
    )
    check(API_KEY not in triggerer_log, "the API key is absent from the triggerer log", failures)
    return failures


@contextmanager
def emulator_running() -> Iterator[Any]:
    from abm_emulator.testing import start_emulator

    start = (datetime.now(UTC) + timedelta(days=1)).replace(hour=4, minute=59, second=0, microsecond=0)
    with start_emulator(
        api_keys=[API_KEY], clock_speed=600.0, clock_start=start.isoformat(), export_size_bytes=500_000
    ) as emulator:
        yield emulator


def main() -> int:
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
    started = time.monotonic()
    home = Path(tempfile.mkdtemp(prefix="abm-e2e-"))
    failures: list[str] = []
    with ExitStack() as stack:
        recreate_databases()
        flush_broker()
        emulator = stack.enter_context(emulator_running())
        api_port = free_port()
        env = airflow_env(home, api_port, emulator.base_url)
        procs = Processes(home, env)
        stack.callback(procs.stop)
        log(f"AIRFLOW_HOME {home}; emulator at {emulator.base_url}")
        subprocess.run(
            [str(Path(sys.executable).with_name("airflow")), "db", "migrate"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        seed_target_accounts()
        procs.start("api-server", ["api-server", "--port", str(api_port)])
        procs.start("scheduler", ["scheduler"])
        procs.start("dag-processor", ["dag-processor"])
        procs.start("triggerer", ["triggerer"], AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()))
        for worker in WORKERS:
            procs.start(
                worker,
                ["celery", "worker", "--celery-hostname", f"{worker}@%h", "--concurrency", "2"],
                ABM_E2E_HOSTNAME=worker,
                AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port()),
            )
        api = Api(api_port)
        api.wait_until("the API server", lambda: api.call("GET", "/version"), procs, 120)
        for dag_id in DAGS:
            api.wait_until(
                f"{dag_id} to be parsed", lambda d=dag_id: api.call("GET", f"/dags/{d}"), procs, 180
            )
        runs: dict[str, str] = {}
        for dag_id in DAGS:
            run = api.call("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": {}})
            runs[dag_id] = run["dag_run_id"]
            api.call("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
            log(f"triggered {dag_id}: {run['dag_run_id']}")
        states = wait_for_runs(api, procs, runs)
        log(f"runs finished: {states}")
        for dag_id, state in states.items():
            check(state == "success", f"{dag_id} run {runs[dag_id]} succeeded", failures)
        failures += verify(api, procs, runs, emulator)
        if failures:
            for name in procs.logs:
                log(f"--- last lines of {name}.log ---\n{procs.tail(name, 25)}")
    log(f"e2e {'FAILED' if failures else 'passed'} in {time.monotonic() - started:.0f} s")
    if not failures:
        shutil.rmtree(home, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
