"""The Airflow stack of `make e2e` as local processes, shared by its scenarios.

The topology of `docker/docker-compose.yaml` without Docker: api-server, scheduler, dag-processor,
triggerer and Celery workers, on the PostgreSQL server and Redis that run on this machine (in
databases and a Redis db of their own per scenario), plus the emulator. Every process started is
stopped on the way out, also on failure, Ctrl-C or SIGTERM.

Like the compose stack, all processes share one Airflow home (the compose ``airflow-logs`` volume) and
one ``[abm] state_dir`` (the compose ``abm-state`` volume).
"""

from __future__ import annotations

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
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import requests

ROOT = Path(__file__).resolve().parents[1]
PG_HOST, PG_PORT = "127.0.0.1", 5432
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
API_KEY = "e2e-secret-key-7f3a9c"
TRIGGERER_HOST = "triggerer"
# Limits of the waits every scenario shares; a passing run on this machine needs about 3 s, 15 s and
# 1 s of them.
MIGRATE_TIMEOUT_SECONDS = 90
API_TIMEOUT_SECONDS = 90
PARSE_TIMEOUT_SECONDS = 90
SKIPPED = 3
INTERRUPTED = 130
RUN_MARKER = "ABM_E2E_RUN"
T = TypeVar("T")
LOCK_TIMEOUT_SECONDS = 240


@dataclass(frozen=True)
class Stack:
    """What one scenario owns on the shared servers: two databases, a Redis db and a lock.

    Scenarios with different stacks may run at once (two halves of ``make test``); two runs of one
    scenario take turns on its PostgreSQL advisory lock.
    """

    meta_db: str
    warehouse_db: str
    redis_db: int
    lock_key: int

    @contextmanager
    def exclusive_run(self) -> Iterator[None]:
        """Hold the scenario's advisory lock for the whole run: two runs at once (two checkouts' test
        suites on one machine or CI host) would otherwise drop each other's databases and share a
        broker."""
        import psycopg

        with psycopg.connect(
            host=PG_HOST, port=PG_PORT, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            deadline = time.monotonic() + LOCK_TIMEOUT_SECONDS
            locked = "SELECT pg_try_advisory_lock(%s)"
            while not (conn.execute(locked, (self.lock_key,)).fetchone() or (False,))[0]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"another e2e run held the lock for over {LOCK_TIMEOUT_SECONDS} s")
                log("another run of this e2e scenario is in progress on this PostgreSQL server; waiting")
                time.sleep(10)
            try:
                yield
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (self.lock_key,))

    def recreate_databases(self) -> None:
        """A fresh metadata and warehouse database per run, so nothing from an earlier run can pass a
        check."""
        import psycopg

        with psycopg.connect(
            host=PG_HOST, port=PG_PORT, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            for name in (self.meta_db, self.warehouse_db):
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{name}"')

    def flush_broker(self) -> None:
        """Messages queued by an aborted earlier run would otherwise be executed against this run's DB."""
        import redis

        redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=self.redis_db).flushdb()

    def warehouse(self) -> Any:
        """A connection to the scenario's warehouse database (a context manager)."""
        import psycopg

        return psycopg.connect(host=PG_HOST, port=PG_PORT, user="postgres", dbname=self.warehouse_db)

    def __str__(self) -> str:
        return f"databases {self.meta_db} and {self.warehouse_db}, redis db {self.redis_db}"

    def prepare(self) -> None:
        self.recreate_databases()
        self.flush_broker()


def log(message: str) -> None:
    print(f"[e2e {datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def missing_services() -> list[str]:
    """The servers every scenario needs that do not answer, by name."""
    wanted = {"PostgreSQL": (PG_HOST, PG_PORT), "Redis": (REDIS_HOST, REDIS_PORT)}
    return [name for name, (host, port) in wanted.items() if not reachable(host, port)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def airflow_env(
    stack: Stack, home: Path, api_port: int, emulator_url: str, marker: str, poke_interval: float
) -> dict[str, str]:
    """The configuration every process gets, as the compose file's ``x-airflow-common`` environment."""
    meta = f"postgresql+psycopg2://postgres@{PG_HOST}:{PG_PORT}/{stack.meta_db}"
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
            "AIRFLOW__CELERY__BROKER_URL": f"redis://{REDIS_HOST}:{REDIS_PORT}/{stack.redis_db}",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql://postgres@{PG_HOST}:{PG_PORT}/{stack.meta_db}",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "AIRFLOW__ABM__STATE_DIR": str(home / "abm-state"),
            "ABM_POKE_INTERVAL": str(poke_interval),
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
                    "schema": stack.warehouse_db,
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

    def stop_one(self, name: str) -> None:
        """Stop one component (SIGTERM, SIGKILL after 20 s), as an operator restarting it would; its
        log stays for the checks."""
        proc = self.running.pop(name)
        self._stop_groups({name: proc})
        log(f"stopped {name} (exit code {proc.returncode})")

    def stop(self) -> None:
        """SIGTERM every group, SIGKILL what is left after 20 s, then any stray process with our marker."""
        self._stop_groups(self.running)
        strays = marked_pids(self.marker)
        for pid in strays:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        log(f"all Airflow processes stopped{f' ({len(strays)} strays killed)' if strays else ''}")

    @staticmethod
    def _stop_groups(procs: Mapping[str, subprocess.Popen[bytes]]) -> None:
        for proc in procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for name, proc in procs.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(f"{name} did not stop on SIGTERM; killing it")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def start_airflow(
    procs: Processes, api_port: int, workers: tuple[str, ...], private_disks: bool = False
) -> None:
    """The api-server, scheduler, dag-processor, triggerer and Celery workers, each a process of its own."""
    procs.start("api-server", ["api-server", "--port", str(api_port), "--workers", "1"])
    procs.start("scheduler", ["scheduler"])
    procs.start("dag-processor", ["dag-processor"])
    start_triggerer(procs, "triggerer")
    for worker in workers:
        procs.start(
            worker,
            ["celery", "worker", "--celery-hostname", f"{worker}@%h", "--concurrency", "2"],
            private_dir=procs.home / "abm-state" if private_disks else None,
            ABM_E2E_HOSTNAME=worker,
            AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port()),
        )


def start_triggerer(procs: Processes, name: str) -> None:
    """A triggerer on the host ``triggerer``; ``name`` tells a restarted one's log from the first's."""
    procs.start(
        name,
        ["triggerer"],
        ABM_E2E_HOSTNAME=TRIGGERER_HOST,
        AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()),
    )


def migrate(env: Mapping[str, str]) -> None:
    airflow = str(Path(sys.executable).with_name("airflow"))
    subprocess.run(
        [airflow, "db", "migrate"],
        env=dict(env),
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=MIGRATE_TIMEOUT_SECONDS,
    )
    log("metadata database migrated")


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

    def wait_parsed(self, dag_id: str, procs: Processes) -> None:
        parsed = partial(self.call, "GET", f"/dags/{dag_id}")
        self.wait_until(f"{dag_id} to be parsed", parsed, procs, PARSE_TIMEOUT_SECONDS)

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        """Every run of the DAG, oldest first."""
        runs = self.call("GET", f"/dags/{dag_id}/dagRuns", params={"order_by": "run_after"})
        return list(runs["dag_runs"])

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


def check(condition: bool, message: str, failures: list[str]) -> None:
    log(("ok    " if condition else "FAIL  ") + message)
    if not condition:
        failures.append(message)


def attempt(what: str, step: Callable[[], T], failures: list[str]) -> T | None:
    """Run one check so that an error in it (a table a failed run never created) still lets the
    others report."""
    try:
        return step()
    except Exception as exc:  # any error here is a failed check, reported with the rest
        check(False, f"{what} could not run: {type(exc).__name__}: {exc}".strip(), failures)
        return None


def show_tails(procs: Processes) -> None:
    for name in procs.logs:
        log(f"--- last lines of {name}.log ---\n{procs.tail(name, 25)}")


def _terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM/SIGHUP unwind like Ctrl-C, so the ExitStack stops every process started."""
    raise KeyboardInterrupt(f"signal {signum}")


@dataclass(frozen=True)
class Running:
    """A started stack, as a scenario gets it."""

    env: dict[str, str]
    home: Path
    api: Api
    procs: Processes
    emulator: Any


def run_stack(
    stack: Stack,
    home: Path,
    *,
    workers: tuple[str, ...],
    poke_interval: float,
    emulator: Callable[[int, int], AbstractContextManager[Any]],
    scenario: Callable[[Running], list[str]],
    seed: Callable[[], None] | None = None,
    private_disks: bool = False,
) -> list[str]:
    """Start the stack on fresh databases, then the emulator (last, so its clock starts whatever
    Airflow's start-up took), run the scenario and return its failures; the processes' last lines are
    shown when it did not pass. ``emulator(port, storage_port)`` starts it; ``seed`` fills the
    warehouse first."""
    marker = uuid.uuid4().hex
    with ExitStack() as stacked:
        stacked.enter_context(stack.exclusive_run())
        stack.prepare()
        api_port, emulator_port, storage_port = free_port(), free_port(), free_port()
        emulator_url = f"http://127.0.0.1:{emulator_port}"
        env = airflow_env(stack, home, api_port, emulator_url, marker, poke_interval)
        procs = Processes(home, env, marker)
        stacked.callback(procs.stop)
        log(f"AIRFLOW_HOME {home}; {stack}")
        migrate(env)
        if seed is not None:
            seed()
        start_airflow(procs, api_port, workers, private_disks)
        api = Api(api_port)
        api.wait_until("the API server", lambda: api.call("GET", "/version"), procs, API_TIMEOUT_SECONDS)
        started = stacked.enter_context(emulator(emulator_port, storage_port))
        log(f"emulator at {started.base_url}, clock {started.clock()}")
        try:
            failures = scenario(Running(env, home, api, procs, started))
        except Exception:
            show_tails(procs)
            raise
        if failures:
            show_tails(procs)
        return failures


def main(run: Callable[[Path, float], list[str]]) -> int:
    """Run a scenario in a fresh Airflow home: 0 passed, 1 a check failed, 3 skipped (a server is not
    reachable; the reason is printed), 130 interrupted. The logs stay when it did not pass."""
    missing = missing_services()
    if missing:
        log(f"SKIPPED: {' and '.join(missing)} not reachable on 127.0.0.1; the e2e run needs both")
        return SKIPPED
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _terminate)
    started = time.monotonic()
    home = Path(tempfile.mkdtemp(prefix="abm-e2e-"))
    try:
        failures = run(home, started)
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
