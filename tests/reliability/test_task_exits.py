"""A task whose warehouse connection is killed mid-stream exits promptly, every time.

The load of an execution while it downloads has threads of its own: the download, and on PostgreSQL
the Arrow pre-scan with Arrow's read-ahead thread, each reading a pipe. A reader left blocked on a
pipe nobody writes again keeps the process alive after ``execute()`` (the interpreter waits for
Arrow's I/O threads at exit), which holds a worker slot until something kills it. Before the fix this
happened in 9 runs of 10 after ``pg_terminate_backend`` during the ``COPY``.

The export is served at a remote store's speed (20 MB/s), so the download is still running when the
connection dies. Each child process runs several killed loads, then must exit within 10 s of its last
``execute()``; two children give 2 x 10 repetitions.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from support.warehouses import CRASH, postgres_dsn

from .badinput_support import postgres_target, serve

CHILD = Path(__file__).with_name("killed_connection_child.py")
RATE = 20 * (1 << 20)  # bytes per second: a remote object store's speed
REPETITIONS = 10
EXIT_WITHIN = 10.0


@pytest.fixture
def paced_export(abm: Any) -> Iterator[str]:
    """A 16 MiB TACTIC_PERFORMANCE export from the emulator, served at 20 MB/s; its link."""
    from abm_provider.hooks.abm import AbmHook

    hook = AbmHook("abm_default")
    hook.create_export_job("TACTIC_PERFORMANCE", "0 5 1 1 *")
    fired = abm.fire("TACTIC_PERFORMANCE", outcome="COMPLETE", sizeBytes=16 << 20)
    execution = next(e for e in hook.iter_executions("TACTIC_PERFORMANCE") if e["id"] == fired["id"])
    with serve() as handler:
        handler.body = requests.get(execution["downloadUri"], timeout=60).content
        handler.rate = RATE
        yield handler.url


def _lines(stream: Any, into: queue.Queue[str | None]) -> None:
    for line in stream:
        into.put(line.rstrip("\n"))
    into.put(None)


@pytest.mark.slow
@pytest.mark.parametrize("child", [1, 2])
def test_a_killed_warehouse_connection_mid_stream_never_keeps_the_task_alive(
    child: int, paced_export: str, pg_schemas: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    schema = pg_schemas()
    target = postgres_target(schema, monkeypatch)
    args = {
        "dsn": postgres_dsn(CRASH.database),
        "schema": schema,
        "url": paced_export,
        "conn_id": target.conn_id,
        "table": target.table,
        "folder": str(tmp_path),
        "repetitions": REPETITIONS,
    }
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), json.dumps(args)],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True)
    reader.start()
    outcomes: list[dict[str, Any]] = []
    try:
        while (line := lines.get(timeout=120)) != "ENDED":
            assert line is not None, f"the child died before its last load: {outcomes}"
            if line.startswith("{"):
                outcomes.append(json.loads(line))
        ended = time.monotonic()
        try:
            proc.wait(timeout=EXIT_WITHIN)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the task process was still running {EXIT_WITHIN:g} s after its last execute()")
        exited = time.monotonic() - ended
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(10)

    loads, summary = outcomes[:-1], outcomes[-1]
    assert len(loads) == REPETITIONS
    for load in loads:
        # The load failed on its own (its connection is gone): the task fails at once with that error,
        # for Airflow's retries, and the download it no longer needs is stopped, not retried.
        assert load["ended"] == "raised", load
        assert "terminat" in load["error"].lower(), load
    assert summary["pipes"] == 2 * REPETITIONS and summary["blocked_readers"] == 0, summary
    assert exited < EXIT_WITHIN
    assert not target.exists(), "a killed load committed a table"
    # A download that completed before the load stopped it keeps its (checked) archive; a stopped one
    # leaves nothing half-written behind.
    assert not list(tmp_path.glob(".archive-*.part")), "a stopped download left its temporary file"
