"""The parts of `scripts/e2e.py` that decide skip versus fail and find what to clean up, without Airflow."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load(name: str) -> ModuleType:
    """A script of ``scripts/`` as a module; its siblings import as they do when it runs."""
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def e2e() -> ModuleType:
    return load("e2e")


@pytest.fixture(scope="module")
def stack() -> ModuleType:
    return load("e2e_stack")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_postgres_skips_with_the_reason(
    e2e: ModuleType, stack: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(stack, "PG_PORT", closed_port())
    monkeypatch.setattr(stack, "REDIS_PORT", closed_port())
    for scenario in ("all", "dags", "events"):
        assert e2e.main(["--scenario", scenario]) == stack.SKIPPED == 3
        assert "SKIPPED: PostgreSQL and Redis not reachable" in capsys.readouterr().out


def test_the_hostname_callable_names_each_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    hostname = load("e2e_hostname").hostname
    monkeypatch.setenv("ABM_E2E_HOSTNAME", "worker-b")
    assert hostname() == "worker-b"
    monkeypatch.delenv("ABM_E2E_HOSTNAME")
    assert hostname() == socket.getfqdn()


def test_marked_processes_are_found_at_any_depth(stack: ModuleType) -> None:
    """A grandchild that left the process group is still found through the marker in its environment."""
    marker = os.urandom(8).hex()
    parent, grandchild = _spawn_escaped_grandchild(stack, marker)
    try:
        found = set(stack.marked_pids(marker))
        assert {parent.pid, grandchild} <= found
        assert not set(stack.marked_pids(marker + "x"))
    finally:
        _kill_marked(stack, marker)
        parent.wait(10)
    _assert_none_left(stack, marker)


def test_a_process_caught_in_exec_is_still_found(stack: ModuleType) -> None:
    """A process read mid-``execve`` shows an empty environment; the stray sweep must not miss it.

    The window is short, so the scan runs straight after each fork many times: before the fix about one
    scan in seven missed the grandchild.
    """
    for _ in range(40):
        marker = os.urandom(8).hex()
        parent, grandchild = _spawn_escaped_grandchild(stack, marker)
        try:
            assert grandchild in stack.marked_pids(marker)
        finally:
            _kill_marked(stack, marker)
            parent.wait(10)
        _assert_none_left(stack, marker)


def _spawn_escaped_grandchild(stack: ModuleType, marker: str) -> tuple[subprocess.Popen[str], int]:
    """A shell carrying ``marker`` whose child left its process group (``setsid``); (shell, child pid)."""
    env = {**os.environ, stack.RUN_MARKER: marker}
    parent = subprocess.Popen(
        ["bash", "-c", "setsid sleep 30 & echo $!; wait"], env=env, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    return parent, int(parent.stdout.readline())


def _kill_marked(stack: ModuleType, marker: str) -> None:
    for pid in stack.marked_pids(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


def _assert_none_left(stack: ModuleType, marker: str) -> None:
    # SIGKILL is delivered asynchronously: a busy machine may list the grandchild for a moment more.
    deadline = time.monotonic() + 10
    while stack.marked_pids(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stack.marked_pids(marker) == []


def test_trigger_logs_are_read_by_triggerer_job(e2e: ModuleType, tmp_path: Path) -> None:
    dag_id, task_id = e2e.SENSOR
    folder = tmp_path / "logs" / f"dag_id={dag_id}" / "run_id=r1" / f"task_id={task_id}"
    folder.mkdir(parents=True)
    (folder / "attempt=1.log").write_text(json.dumps({"event": "Pausing task as DEFERRED."}) + "\n")
    events = [
        {"timestamp": "2026-11-22T21:08:44.1Z", "event": "trigger starting"},
        {"timestamp": "2026-11-22T21:09:40.2Z", "event": "Trigger fired event"},
    ]
    (folder / "attempt=1.log.trigger.7.log").write_text("\n".join(map(json.dumps, events)) + "\nnot json\n")
    expected = ["21:08:44 trigger starting", "21:09:40 Trigger fired event"]
    assert e2e.trigger_logs(tmp_path, "r1") == {7: expected}
    assert e2e.trigger_logs(tmp_path, "other") == {}


class _Seen:
    """The emulator's request log, as ``requests_seen`` answers it."""

    def __init__(self, requests: list[dict[str, Any]]) -> None:
        self.requests = requests

    def requests_seen(self) -> list[dict[str, Any]]:
        return self.requests


def test_only_the_watchers_listings_count_as_its_polls() -> None:
    """The watcher lists COMPLETE executions newest first; the load lists them oldest first, and other
    types and origins are not the watcher's either. A listing still being served (logged on arrival,
    no status yet) is not a poll yet: it could still see an execution completed after it."""
    events = load("e2e_events")
    path = "/exports/v1/exportJobs/TACTIC_PERFORMANCE/executions"
    newest_first = "pageSize=100&orderBy=updateTime+desc&filter=status%3DCOMPLETE"
    other = path.replace("TACTIC_PERFORMANCE", "OTHER")
    seen: list[dict[str, Any]] = [
        {"origin": "api", "path": path, "query": newest_first, "status": 200},
        {"origin": "api", "path": path, "query": newest_first.replace("desc", "asc"), "status": 200},
        {"origin": "api", "path": other, "query": newest_first, "status": 200},
        {"origin": "storage", "path": path, "query": newest_first, "status": 200},
        {"origin": "api", "path": path, "query": "orderBy=updateTime%20desc", "status": 503},
        {"origin": "api", "path": path, "query": newest_first, "status": None},
    ]
    assert events.watcher_polls(_Seen(seen)) == 2
