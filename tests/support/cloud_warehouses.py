"""The cloud warehouses' emulators, each a real server process on a free loopback port, and the Airflow
connection a test reaches it with.

- Snowflake: fakesnow's ASGI app (``fakesnow.server:app``) under uvicorn, on TLS with a certificate
  made at start by its own CA, since the official ``SnowflakeHook`` has no plain-HTTP setting. The
  connection's extras give ``account``, ``database``, ``host``, ``port`` and ``insecure_mode`` (no
  OCSP check); the test process trusts the CA through ``REQUESTS_CA_BUNDLE``, set for the test only
  (never in the server's environment, nor for the whole session).
- BigQuery: bqemulator, through :mod:`support.bqemulator_offline` (which skips the DuckDB extension
  downloads), with a ``HOME`` of its own; the test reaches it with ``google-cloud-bigquery`` and
  anonymous credentials, at the REST URL or through ``BIGQUERY_EMULATOR_HOST``.

One server per emulator and session (``fakesnow_server``, ``bqemulator_server``); each test gets a
database or dataset of its own (``snowflake_connection``, ``bigquery_connection``). A missing
emulator fails the tests that use it: it is a dev dependency (``make install``), never a reason to
skip. Every wait is bounded, and only the processes started here are stopped.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import importlib.util
import json
import os
import select
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NoReturn

import pytest

#: How long a server may take to start answering (cold imports on a busy 2-core machine included).
START_TIMEOUT = 90.0
#: How long a server may take to exit after SIGTERM before it is killed.
STOP_TIMEOUT = 15.0
#: The Snowflake connector retries an HTTP 500 (what fakesnow answers to an error it does not handle)
#: until this many seconds have passed (its default is forever); a request that takes long but
#: succeeds is bounded by the connector's socket timeout instead.
SNOWFLAKE_NETWORK_TIMEOUT = 10
#: The ids ``SnowflakeHook`` and the Google provider use when given none.
SNOWFLAKE_CONN_ID = "snowflake_default"
BIGQUERY_CONN_ID = "google_cloud_default"
BIGQUERY_PROJECT = "abm-test-project"
LAUNCHER = Path(__file__).with_name("bqemulator_offline.py")


def require(module: str, what: str) -> None:
    """Fail (never skip) the test when an emulator's package is not installed."""
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{what} is not installed: it is a dev dependency of this repository; run `make install`")


# --- processes ------------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM it when the test process dies, even by SIGKILL (Linux)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


class ServerProcess:
    """A server this module started, its output in ``log``; :meth:`stop` ends it and nothing else."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path, pass_fds: tuple[int, ...] = ()):
        self.command = command
        self.log = log
        self._log_file: IO[bytes] = log.open("wb")
        # The death signal follows the thread that forked, so it is only armed from the main thread.
        in_main_thread = threading.current_thread() is threading.main_thread()
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            pass_fds=pass_fds,
            start_new_session=True,
            preexec_fn=_die_with_parent if in_main_thread else None,
        )

    def fail(self, reason: str) -> NoReturn:
        """Stop the server and fail the test, saying why, with the end of the server's output."""
        self.stop()
        tail = self.log.read_text(encoding="utf-8", errors="replace")[-4000:]
        pytest.fail(f"{reason}\ncommand: {' '.join(self.command)}\noutput:\n{tail}", pytrace=False)

    def wait_for_200(
        self,
        method: str,
        path: str,
        connect: Callable[[float], http.client.HTTPConnection],
        deadline: float,
    ) -> None:
        """Send ``method path`` on a new ``connect(timeout)`` until it answers 200, failing the test
        when the server exits or ``deadline`` (``time.monotonic()``) passes; each attempt is bounded."""
        while True:
            if self.process.poll() is not None:
                self.fail(
                    f"the server exited with code {self.process.returncode} before {method} {path} answered"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.fail(f"{method} {path} did not answer 200 within {START_TIMEOUT:g}s")
            connection = connect(min(remaining, 2))
            try:
                connection.request(method, path)
                if connection.getresponse().status == 200:
                    return
            except (OSError, http.client.HTTPException):
                pass
            finally:
                connection.close()

    def stop(self) -> None:
        """SIGTERM, a bounded wait, then SIGKILL."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT)
        self._log_file.close()


def _tmp_env(home: Path) -> dict[str, str]:
    """The test run's environment for a server, with a home and a temporary folder of its own."""
    home.mkdir(parents=True, exist_ok=True)
    drop = ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "BIGQUERY_EMULATOR_HOST")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "HOME": str(home), "TMPDIR": str(home), "PYTHONUNBUFFERED": "1"}


# --- Snowflake: fakesnow --------------------------------------------------------------------------


@dataclass(frozen=True)
class FakesnowServer:
    """fakesnow serving HTTPS on ``host:port`` with a certificate of ``ca_file``'s CA."""

    host: str
    port: int
    ca_file: Path
    log: Path

    def connection(self, database: str, schema: str = "PUBLIC") -> dict[str, Any]:
        """A ``snowflake`` Airflow connection to ``database`` (fakesnow creates it at login)."""
        extra = {
            "account": "fakesnow",
            "database": database,
            "host": self.host,
            "port": self.port,
            "insecure_mode": True,  # no OCSP check: its responders are on the internet
        }
        return {
            "conn_type": "snowflake",
            "login": "fake",
            "password": "snow",
            "schema": schema,
            "extra": extra,
        }

    def client_env(self) -> dict[str, str]:
        """What the Snowflake connector's process needs: trust in the CA, and no probe of the cloud
        providers' metadata addresses (169.254.169.254) to guess where it runs."""
        return {"REQUESTS_CA_BUNDLE": str(self.ca_file), "SNOWFLAKE_DISABLE_PLATFORM_DETECTION": "true"}


def _certificate(folder: Path) -> tuple[Path, Path, Path]:
    """A new CA and a certificate it signs for 127.0.0.1 and localhost: (ca, certificate, key)."""
    import trustme

    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    ca.cert_pem.write_to_path(str(paths[0]))
    issued.cert_chain_pems[0].write_to_path(str(paths[1]))
    issued.private_key_pem.write_to_path(str(paths[2]))
    return paths


def _wait_for_https(server: ServerProcess, port: int, ca_file: Path, deadline: float) -> None:
    """Until fakesnow answers a request: each attempt blocks on the socket (the listening socket
    exists before the server does, so a connection waits in its backlog), never on a fixed sleep."""
    context = ssl.create_default_context(cafile=str(ca_file))
    # answered with {"success": true}; changes nothing
    server.wait_for_200(
        "POST",
        "/queries/v1/abort-request",
        lambda timeout: http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=timeout),
        deadline,
    )


@pytest.fixture(scope="session")
def fakesnow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakesnowServer]:
    """fakesnow under uvicorn, on TLS, on a free loopback port, for the whole session."""
    require("fakesnow", "fakesnow (the Snowflake emulator)")
    with running_fakesnow(tmp_path_factory.mktemp("fakesnow")) as server:
        yield server


@contextlib.contextmanager
def running_fakesnow(folder: Path) -> Iterator[FakesnowServer]:
    """fakesnow under uvicorn, on TLS, on a free loopback port, its files in ``folder``, until the
    block ends (the fixture's server; ``make bench`` starts one with it too)."""
    ca_file, cert_file, key_file = _certificate(folder)
    # Bound here and handed over, so the port is known before the server starts and no other process
    # can take it in between.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    port = listener.getsockname()[1]
    command = [
        sys.executable, "-m", "uvicorn", "fakesnow.server:app", "--fd", str(listener.fileno()),
        "--ssl-certfile", str(cert_file), "--ssl-keyfile", str(key_file),
        "--lifespan", "off", "--log-level", "warning", "--timeout-graceful-shutdown", "1",
    ]  # fmt: skip
    try:
        # TMPDIR: where fakesnow keeps what PUT uploads.
        server = ServerProcess(
            command, _tmp_env(folder / "home"), folder / "fakesnow.log", (listener.fileno(),)
        )
    finally:
        listener.close()
    try:
        _wait_for_https(server, port, ca_file, time.monotonic() + START_TIMEOUT)
        yield FakesnowServer("127.0.0.1", port, ca_file, server.log)
    finally:
        server.stop()


@dataclass(frozen=True)
class SnowflakeTarget:
    """A test's database on the session's fakesnow, reachable as ``conn_id``."""

    conn_id: str
    database: str
    server: FakesnowServer


@pytest.fixture
def snowflake_connection(fakesnow_server: FakesnowServer, monkeypatch: pytest.MonkeyPatch) -> SnowflakeTarget:
    """``snowflake_default`` pointing at a new database on fakesnow, for this test.

    Sets, for the test alone, the connection, the connector's trust in the server's CA and a
    network timeout of ``SNOWFLAKE_NETWORK_TIMEOUT`` (``SnowflakeHook`` passes none from a
    connection, so the connector's default is set in this process).
    """
    from snowflake.connector import connection as connector

    database = f"ABM_TEST_{uuid.uuid4().hex[:10].upper()}"
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{SNOWFLAKE_CONN_ID.upper()}", json.dumps(fakesnow_server.connection(database))
    )
    for name, value in fakesnow_server.client_env().items():
        monkeypatch.setenv(name, value)
    for name in ("network_timeout", "login_timeout"):
        _, types = connector.DEFAULT_CONFIGURATION[name]
        monkeypatch.setitem(connector.DEFAULT_CONFIGURATION, name, (SNOWFLAKE_NETWORK_TIMEOUT, types))
    return SnowflakeTarget(SNOWFLAKE_CONN_ID, database, fakesnow_server)


# --- BigQuery: bqemulator -------------------------------------------------------------------------


@dataclass(frozen=True)
class BqEmulatorServer:
    """bqemulator serving REST at ``rest_url`` and gRPC (the Storage APIs) at ``grpc_endpoint``."""

    project: str
    rest_url: str
    grpc_endpoint: str
    log: Path

    def connection(self) -> dict[str, Any]:
        """A ``google_cloud_platform`` Airflow connection: the project, anonymous credentials."""
        return {
            "conn_type": "google_cloud_platform",
            "extra": {"project": self.project, "is_anonymous": True},
        }

    def client(self) -> Any:
        """A ``google.cloud.bigquery.Client`` on the emulator, with anonymous credentials."""
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import bigquery

        return bigquery.Client(
            project=self.project,
            credentials=AnonymousCredentials(),
            client_options=ClientOptions(api_endpoint=self.rest_url),
        )


def _read_ready(server: ServerProcess, ready: int, deadline: float) -> dict[str, str]:
    """The launcher's ready line from the pipe: waits on the pipe itself, bounded by ``deadline``; the
    pipe's end (the process exited before writing) fails at once."""
    data = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            server.fail(f"bqemulator was not ready within {START_TIMEOUT:g}s")
        readable, _, _ = select.select([ready], [], [], remaining)
        if not readable:
            continue
        chunk = os.read(ready, 65536)
        if not chunk:
            break
        data += chunk
    if not data:
        server.process.wait(STOP_TIMEOUT)
        server.fail(f"bqemulator exited with code {server.process.returncode} before it was ready")
    found: dict[str, str] = json.loads(data)
    return found


def _wait_until_ready(server: ServerProcess, rest_url: str, deadline: float) -> None:
    """``/readyz`` answers 200 (DuckDB and the catalog answer): checked once the launcher said it
    serves, so this normally succeeds at the first request."""
    host, port = rest_url.removeprefix("http://").rsplit(":", 1)
    server.wait_for_200(
        "GET",
        "/readyz",
        lambda timeout: http.client.HTTPConnection(host, int(port), timeout=timeout),
        deadline,
    )


@pytest.fixture(scope="session")
def bqemulator_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BqEmulatorServer]:
    """bqemulator, offline, on free loopback ports, for the whole session."""
    require("bqemulator", "bqemulator (the BigQuery emulator)")
    with running_bqemulator(tmp_path_factory.mktemp("bqemulator")) as server:
        yield server


@contextlib.contextmanager
def running_bqemulator(folder: Path) -> Iterator[BqEmulatorServer]:
    """bqemulator, offline, on free loopback ports, its files in ``folder``, until the block ends."""
    ready, ready_to_write = os.pipe()
    command = [
        sys.executable,
        str(LAUNCHER),
        "--project",
        BIGQUERY_PROJECT,
        "--ready-fd",
        str(ready_to_write),
    ]
    try:
        server = ServerProcess(
            command, _tmp_env(folder / "home"), folder / "bqemulator.log", (ready_to_write,)
        )
    finally:
        os.close(ready_to_write)  # the child's copy is the only writer left: its exit ends the pipe
    try:
        deadline = time.monotonic() + START_TIMEOUT
        try:
            urls = _read_ready(server, ready, deadline)
        finally:
            os.close(ready)
        _wait_until_ready(server, urls["rest_url"], deadline)
        yield BqEmulatorServer(BIGQUERY_PROJECT, urls["rest_url"], urls["grpc_endpoint"], server.log)
    finally:
        server.stop()


@dataclass(frozen=True)
class BigQueryTarget:
    """A test's dataset on the session's bqemulator; the connection ``conn_id`` names its project."""

    conn_id: str
    project: str
    dataset: str
    server: BqEmulatorServer

    def client(self) -> Any:
        return self.server.client()


@pytest.fixture
def bigquery_connection(
    bqemulator_server: BqEmulatorServer, monkeypatch: pytest.MonkeyPatch
) -> BigQueryTarget:
    """``google_cloud_default`` naming the emulator's project, and a dataset name of this test's own
    (not created). ``BIGQUERY_EMULATOR_HOST`` sends any ``bigquery.Client`` made in this process to the
    emulator, for the test alone."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{BIGQUERY_CONN_ID.upper()}", json.dumps(bqemulator_server.connection()))
    monkeypatch.setenv("BIGQUERY_EMULATOR_HOST", bqemulator_server.rest_url)
    dataset = f"abm_test_{uuid.uuid4().hex[:10]}"
    return BigQueryTarget(BIGQUERY_CONN_ID, bqemulator_server.project, dataset, bqemulator_server)
