"""Fixtures of the hostile suite: no network but loopback, a connection factory, DEBUG log capture.

``network_guard`` (autouse) refuses every name lookup and connection to anything but a loopback
address for the duration of a test, and records the attempt; a test that expects a redirect to be
refused *without connecting* asserts the record is empty. The guard patches ``socket.getaddrinfo`` and
``socket.socket.connect``/``connect_ex``, which both ``requests`` (urllib3) and ``aiohttp`` (asyncio)
go through. ``operator_download`` builds the ``DownloadExecutionCsvOperator`` the download tests run,
publishing to ``destination``; ``hostile`` runs one call against a scripted server (``runs.py``).
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from support.tasks import task_context

from .checks import KEY
from .runs import Against

_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}
_conn_ids = itertools.count()


def is_loopback(host: Any) -> bool:
    if isinstance(host, bytes):
        host = host.decode("latin-1")
    if not isinstance(host, str):
        return False
    text = host.strip("[]").lower()
    if text in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(text.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def network_guard(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every attempt to reach a non-loopback host, refused and recorded."""
    attempts: list[str] = []
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not is_loopback(host):
            attempts.append(f"resolve {host!r}")
            raise socket.gaierror(socket.EAI_NONAME, "hostile suite: no network beyond 127.0.0.1")
        return real_getaddrinfo(host, *args, **kwargs)

    def refused(sock: socket.socket, address: Any) -> bool:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not is_loopback(address[0]):
            attempts.append(f"connect {address!r}")
            return True
        return False

    def connect(self: socket.socket, address: Any) -> None:
        if refused(self, address):
            raise ConnectionRefusedError("hostile suite: no network beyond 127.0.0.1")
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if refused(self, address):
            return 111  # ECONNREFUSED
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    return attempts


@pytest.fixture(autouse=True)
def _debug_logs_and_state(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Every log record at DEBUG is captured (and searched for secrets); task state under tmp."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("AIRFLOW__ABM__STATE_DIR", str(tmp_path / "state"))


@pytest.fixture
def connect(monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """``connect(url, **extra)`` -> a fresh connection id for ``url`` with ``KEY`` and ``extra``."""

    def make(url: str, *, key: str = KEY, **extra: Any) -> str:
        conn_id = f"hostile_{next(_conn_ids)}"
        conn = {"conn_type": "abm", "host": url, "password": key, "extra": extra}
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
        return conn_id

    return make


@pytest.fixture
def destination(tmp_path: Path) -> Path:
    """Where :func:`operator_download` publishes the file (nothing else in ``tmp_path`` but task state)."""
    return tmp_path / "out.csv"


@pytest.fixture
def operator_download(context: dict[str, Any], destination: Path) -> Callable[[str, str], Callable[[], Any]]:
    """``operator_download(conn_id, uri)`` -> a call of ``DownloadExecutionCsvOperator.execute(context)``.

    The operator (built at once, as a task is) downloads ``uri`` to :func:`destination`.
    """
    from abm_provider.operators.exports import DownloadExecutionCsvOperator

    def make(conn_id: str, uri: str) -> Callable[[], Any]:
        operator = DownloadExecutionCsvOperator(
            task_id="d",
            download_uri=uri,
            destination=str(destination),
            abm_conn_id=conn_id,
        )
        return lambda: operator.execute(context)

    return make


@pytest.fixture
def context() -> dict[str, Any]:
    """The slice of a task context ``DownloadExecutionCsvOperator.execute`` reads."""
    return task_context("d", "r", task_id="t")


@pytest.fixture
def hostile(connect: Callable[..., str], operator_download: Callable[[str, str], Any]) -> Against:
    """One call against a scripted server: ``hostile.call``, ``hostile.acall``, ``hostile.download``."""
    return Against(connect, operator_download)
