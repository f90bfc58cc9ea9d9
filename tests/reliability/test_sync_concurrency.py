"""Two syncs of one account list at once: the second waits or fails clearly, never on a constraint.

Each sync of a list holds the list's lock in its state database for the whole run (an advisory lock
on PostgreSQL, the file between processes and an in-process lock on DuckDB). The first sync is held
at a known point (it has taken the lock and planned, and sends nothing yet) by a patched
``ListSync._send_run``; the tests wait on events, never on time. The second run is refused with
``SyncAlreadyRunning`` naming the first, or, given ``lock_timeout``, waits and then runs; syncs of
different lists do not wait for each other. The list and the state are read from the emulator and
with the database's own driver once every sync has ended.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from abm_provider.accounts.sync import SyncAlreadyRunning, database
from abm_provider.accounts.sync.engine import ListSync
from abm_provider.accounts.sync.sending import PlannedRun as _Run
from accounts.sync.sync_support import (
    COLUMNS,
    account_id,
    clear_requests,
    context,
    make_list,
    member_ids,
    membership_requests,
    open_sync_warehouse,
    operator,
    rows_for,
    state_ids,
    sync,
)
from support.warehouses import Warehouse

_WAIT = 120  # seconds an event may take before the test fails instead of hanging


class Background:
    """A call run in a thread; ``join`` returns its result or raises its error."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self._call = call
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.result = self._call()
        except BaseException as err:
            self.error = err

    def join(self) -> Any:
        self._thread.join(_WAIT)
        assert not self._thread.is_alive(), "the background sync never ended"
        if self.error is not None:
            raise self.error
        return self.result


class Gate:
    """Holds the sync of ``run_id`` where it starts sending: after it took the lock and planned."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, run_id: str, then: Callable[[], None] = lambda: None):
        self.reached = threading.Event()
        self.go = threading.Event()
        original = ListSync._send_run

        def held(sync: ListSync, run: _Run) -> None:
            if sync.options.run_id == run_id and not self.reached.is_set():
                self.reached.set()
                assert self.go.wait(_WAIT), "the test never let the held sync go on"
                then()
            original(sync, run)

        monkeypatch.setattr(ListSync, "_send_run", held)

    def wait_reached(self) -> None:
        assert self.reached.wait(_WAIT), "the first sync never reached the point where it is held"


def _refusal(list_id: str, holder_run: str) -> str:
    return rf"another sync of list {re.escape(list_id)} is running \(run id {re.escape(holder_run)}, started "


def test_a_second_sync_of_the_same_list_fails_at_once_naming_the_running_one(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(300)))
    gate = Gate(monkeypatch, "run_a")
    first = Background(lambda: sync(warehouse, list_id, "run_a", batch_size=100))
    gate.wait_reached()
    clear_requests(abm)

    with pytest.raises(SyncAlreadyRunning, match=_refusal(list_id, "run_a")) as refused:
        sync(warehouse, list_id, "run_b", batch_size=100)
    assert "duplicate key" not in str(refused.value)
    assert "read, sent and recorded nothing" in str(refused.value)
    assert membership_requests(abm) == {"add": 0, "remove": 0}

    gate.go.set()
    result = first.join()
    assert (result["to_add"], result["added"]) == (300, 300)
    expected = {account_id(n) for n in range(300)}
    assert member_ids(abm, list_id) == state_ids(warehouse, list_id) == expected
    runs = warehouse.query(
        f"SELECT run_id FROM {warehouse.name('abm_sync_runs')} WHERE list_id = %s", [list_id]
    )
    assert runs == [("run_a",)]  # the refused run left no trace


def test_a_second_sync_with_lock_timeout_waits_for_the_first_then_runs(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(300)))
    warehouse.replace_table("targets_later", COLUMNS, rows_for(range(100, 450)))
    gate = Gate(monkeypatch, "run_a")
    waiting, first_done = threading.Event(), threading.Event()

    def pause(seconds: float) -> None:  # the waiting sync's pause between tries of the lock
        waiting.set()
        assert first_done.wait(_WAIT), "the first sync never ended"

    monkeypatch.setattr(database, "_pause", pause)
    first = Background(lambda: sync(warehouse, list_id, "run_a", batch_size=100))
    gate.wait_reached()
    second = Background(
        lambda: sync(
            warehouse,
            list_id,
            "run_b",
            batch_size=100,
            table=warehouse.name("targets_later"),
            lock_timeout="60",
            max_removals=None,  # 100 of the 300 recorded go
        )
    )
    assert waiting.wait(_WAIT), "the second sync never found the list busy"
    assert not second.result and second.error is None  # it is waiting, not done

    gate.go.set()
    assert first.join()["added"] == 300
    first_done.set()
    later = second.join()
    # It planned after the first had recorded everything: only the change since.
    assert (later["to_add"], later["to_remove"], later["added"], later["removed"]) == (150, 100, 150, 100)
    expected = {account_id(n) for n in range(100, 450)}
    assert member_ids(abm, list_id) == state_ids(warehouse, list_id) == expected


def test_syncs_of_different_lists_run_at_once_and_only_the_same_list_is_refused(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    list_a, list_b = make_list("Targets A"), make_list("Targets B")
    warehouse.replace_table("targets", COLUMNS, rows_for(range(200)))
    gate = Gate(monkeypatch, "run_a")
    first = Background(lambda: sync(warehouse, list_a, "run_a", batch_size=100))
    gate.wait_reached()

    other = sync(warehouse, list_b, "run_b", batch_size=100)  # while list A's sync holds its lock
    assert (other["to_add"], other["added"]) == (200, 200)
    with pytest.raises(SyncAlreadyRunning, match=_refusal(list_a, "run_a")):
        sync(warehouse, list_a, "run_c", batch_size=100)

    gate.go.set()
    assert first.join()["added"] == 200
    expected = {account_id(n) for n in range(200)}
    for list_id in (list_a, list_b):
        assert member_ids(abm, list_id) == state_ids(warehouse, list_id) == expected


def test_the_lock_is_held_until_a_failed_sync_ends_then_a_later_sync_completes_its_plan(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(250)))
    refusals: list[BaseException] = []

    def try_another_then_fail() -> None:
        try:
            sync(warehouse, list_id, "run_b", batch_size=100)
        except SyncAlreadyRunning as err:
            refusals.append(err)
        raise RuntimeError("the first sync fails before sending")

    gate = Gate(monkeypatch, "run_a", then=try_another_then_fail)
    gate.go.set()  # the first sync goes straight on to the failure
    with pytest.raises(RuntimeError, match="fails before sending"):
        sync(warehouse, list_id, "run_a", batch_size=100)
    assert len(refusals) == 1, "a sync of the list was not refused while the failing one held it"
    assert re.search(_refusal(list_id, "run_a"), str(refusals[0]))

    clear_requests(abm)
    later = sync(warehouse, list_id, "run_c", batch_size=100)  # takes the released lock
    assert (later["to_add"], later["added"]) == (0, 0)  # its own plan is empty...
    assert membership_requests(abm) == {"add": 3, "remove": 0}  # ...it completed the failed run's
    expected = {account_id(n) for n in range(250)}
    assert member_ids(abm, list_id) == state_ids(warehouse, list_id) == expected


@pytest.fixture
def duckdb_warehouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Warehouse]:
    with open_sync_warehouse("duckdb", tmp_path, monkeypatch) as found:
        yield found


class FileHolder:
    """Another process with the DuckDB file open, as a sync running in another worker has it."""

    def __init__(self, path: str) -> None:
        script = (
            "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('open', flush=True); sys.stdin.read()"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "open"

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(_WAIT) == 0
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def test_a_duckdb_file_open_in_another_process_fails_the_sync_clearly_then_is_waited_for(
    abm: Any, duckdb_warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    list_id = make_list()
    duckdb_warehouse.replace_table("targets", COLUMNS, rows_for(range(150)))
    holder = FileHolder(duckdb_warehouse.location)
    try:
        with pytest.raises(SyncAlreadyRunning) as refused:
            sync(duckdb_warehouse, list_id, "run_a", batch_size=100)
        message = str(refused.value)
        assert f"cannot sync list {list_id}: the state database file " in message
        assert f"is locked by another process (PID {holder.proc.pid})" in message
        assert "Could not set lock" not in message

        waiting = threading.Event()

        def pause(seconds: float) -> None:  # between tries to open the file: let the other process go
            if not waiting.is_set():
                waiting.set()
                holder.close()

        monkeypatch.setattr(database, "_pause", pause)
        result = sync(duckdb_warehouse, list_id, "run_a", batch_size=100, lock_timeout=30)
        assert waiting.is_set(), "the sync did not wait for the file"
    finally:
        if holder.proc.poll() is None:
            holder.close()
    assert (result["to_add"], result["added"]) == (150, 150)
    expected = {account_id(n) for n in range(150)}
    assert member_ids(abm, list_id) == state_ids(duckdb_warehouse, list_id) == expected


@pytest.mark.parametrize("value", [-1, "soon", float("nan"), float("inf"), True])
def test_a_bad_lock_timeout_is_refused_when_the_dag_is_parsed(value: Any) -> None:
    with pytest.raises(ValueError, match=r"lock_timeout must be a number of seconds >= 0"):
        operator(Warehouse("duckdb", "unused", "unused.duckdb"), "list-1", lock_timeout=value)


def test_a_bad_rendered_lock_timeout_fails_the_task_without_retries(duckdb_warehouse: Warehouse) -> None:
    task = operator(duckdb_warehouse, "list-1", lock_timeout="{{ params.wait }}")
    assert "lock_timeout" in task.template_fields
    task.lock_timeout = "-5"  # as rendered
    with pytest.raises(AirflowFailException, match="lock_timeout must be a number of seconds >= 0"):
        task.execute(context("run_a"))
