"""``abm_provider.warehouse.newest``: loads into one table that end in the wrong order; the newest
execution's figures win.

Exports re-send recent days with corrected figures, so two executions overlap. Two DAG runs (a
backfill, a manual run, ``max_active_runs > 1``) can load an older and a newer execution into one
table at once, and the older may commit last. The table must end up with the newer figures for the
days both cover, and the older execution's figures only for days the newer does not cover, in
either commit order; the older load says how many of its rows it kept out.

The interleaving is forced with events around the loader's ``lock`` step, never with sleeps: both
loads stage their file, then the one chosen to go first takes the table's lock and the other waits
on that same lock until the first commits.

The warehouse fixtures and the export helpers are the shared ones of ``tests/support``.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from abm_provider.warehouse.dialects.duckdb import DuckDBDialect
from abm_provider.warehouse.dialects.postgres import PostgresDialect
from support.export_files import TACTIC_COLUMNS, days, download_xcom, expected, tactic_rows, write_csv

# The fixtures this module uses.
from support.warehouses import native_warehouse, warehouse

__all__ = ["native_warehouse", "warehouse"]

TP = "TACTIC_PERFORMANCE"
START = dt.date(2026, 10, 1)
TACTICS = 5
#: The executions' updateTime: the base export, the older restatement A, the newer restatement B.
T0, T1, T2 = "2026-10-04T06:00:00Z", "2026-10-09T06:00:00Z", "2026-10-12T06:30:00.123Z"
#: How long a load waits for the other at a rendezvous before the test fails (not a sleep).
WAIT = 60


class Exports:
    """Base (days 1-10, T0), older A (days 5-10, T1), newer B (days 8-12, T2), each with its own figures."""

    def __init__(self, tmp_path: Path) -> None:
        self.base = tactic_rows(days(START, 10), TACTICS, version=1)
        self.older = tactic_rows(days(START + dt.timedelta(days=4), 6), TACTICS, version=2)
        self.newer = tactic_rows(days(START + dt.timedelta(days=7), 5), TACTICS, version=3)
        self.tmp_path = tmp_path

    def source(self, name: str, rows: list[dict[str, str]], update_time: str | None) -> dict[str, Any]:
        xcom = download_xcom(write_csv(self.tmp_path / f"{name}.csv", TACTIC_COLUMNS, rows), name)
        if update_time is not None:
            xcom["update_time"] = update_time
        return xcom

    def newest_wins(self) -> dict[tuple[str, ...], tuple[Any, ...]]:
        """Days 1-4 from the base, 5-7 from A, 8-12 from B: computed without the loader."""
        return expected(TP, self.base, self.older, self.newer)


def _ledger_times(warehouse: Any) -> dict[str, Any]:
    rows = warehouse.query(f"SELECT execution_id, execution_time FROM {warehouse.ledger} ORDER BY loaded_at")
    return {str(r[0]): r[1] for r in rows}


def _as_time(value: Any) -> str:
    """A ledger time as text (SQLite returns the text it was given)."""
    return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else str(value)


class Turns:
    """Both loads stage their file, then ``first`` takes the table's lock and ``second`` waits on it.

    Wraps the loaders' ``lock`` step. Threads are told apart by name; a load in another thread is
    left alone.
    """

    def __init__(self, first: str, second: str) -> None:
        self.first, self.second = first, second
        self.staged = {first: threading.Event(), second: threading.Event()}
        self.first_locked = threading.Event()

    def wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """The lock step, in turns; what it returns (a lock of this process) goes back to the load."""

        def lock(loader: Any, cur: Any, table: Any) -> Any:
            me = threading.current_thread().name
            if me not in self.staged:
                return original(loader, cur, table)
            self.staged[me].set()
            if me == self.first:
                assert self.staged[self.second].wait(WAIT), "the other load never finished staging"
                taken = original(loader, cur, table)
                self.first_locked.set()
                return taken
            assert self.first_locked.wait(WAIT), "the first load never took the lock"
            return original(loader, cur, table)  # blocks until the first load has committed

        return lock


def _run_at_once(ops: dict[str, Any]) -> dict[str, dict[str, Any]]:
    results: dict[str, Any] = {}

    def run(name: str) -> None:
        try:
            results[name] = ops[name].execute(context={})
        except BaseException as exc:
            results[name] = exc

    threads = [threading.Thread(target=run, args=(name,), name=name) for name in ops]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 3)
        assert not thread.is_alive(), f"load {thread.name} did not finish"
    for name, outcome in results.items():
        if isinstance(outcome, BaseException):
            raise AssertionError(f"load {name} failed: {outcome!r}") from outcome
    return results


@pytest.mark.parametrize("first", ["newer", "older"], ids=["newer_commits_first", "older_commits_first"])
def test_two_loads_at_once_keep_the_newer_figures_in_either_commit_order(
    native_warehouse, tmp_path, monkeypatch, first
):
    exports = Exports(tmp_path)
    native_warehouse.operator(source=exports.source("exec-0", exports.base, T0)).execute(context={})
    ops = {
        "older": native_warehouse.operator(source=exports.source("exec-A", exports.older, T1)),
        "newer": native_warehouse.operator(source=exports.source("exec-B", exports.newer, T2)),
    }
    turns = Turns(first, "older" if first == "newer" else "newer")
    for cls in (DuckDBDialect, PostgresDialect):
        monkeypatch.setattr(cls, "lock", turns.wrap(cls.lock))

    out = _run_at_once(ops)

    assert native_warehouse.contents() == exports.newest_wins()
    lineage = native_warehouse.query(
        f"SELECT date, _execution_id FROM {native_warehouse.table} WHERE tactic_id = 't0' ORDER BY date"
    )
    writers = [str(r[1]) for r in lineage]
    assert writers == ["exec-0"] * 4 + ["exec-A"] * 3 + ["exec-B"] * 5
    older, newer = out["older"], out["newer"]
    if first == "newer":
        # A commits last: it replaces the base's days 5-7 and keeps B's days 8-10 out (3 days x 5 tactics).
        assert (older["rows_loaded"], older["rows_replaced"], older["rows_stale"]) == (15, 15, 15)
        assert older["newer_executions"] == ["exec-B"]
        assert (newer["rows_loaded"], newer["rows_replaced"], newer["rows_stale"]) == (25, 15, 0)
    else:
        # A commits first and replaces days 5-10; B then replaces A's days 8-10, as always.
        assert (older["rows_loaded"], older["rows_replaced"], older["rows_stale"]) == (30, 30, 0)
        assert (newer["rows_loaded"], newer["rows_replaced"], newer["rows_stale"]) == (25, 15, 0)
        assert older["newer_executions"] == [] and newer["newer_executions"] == []
    times = _ledger_times(native_warehouse)
    assert {k: _as_time(v) for k, v in times.items()} == {
        "exec-0": "2026-10-04 06:00:00",
        "exec-A": "2026-10-09 06:00:00",
        "exec-B": "2026-10-12 06:30:00.123000",
    }


def test_an_older_execution_loaded_late_fills_only_the_days_the_newer_does_not_cover(
    native_warehouse, tmp_path, capsys
):
    exports = Exports(tmp_path)
    # Only B and A here: B is the first load, one pass into a new table, and must record its time.
    newer = native_warehouse.operator(source=exports.source("exec-B", exports.newer, T2)).execute(context={})
    assert newer["rows_loaded"] == 25 and _as_time(_ledger_times(native_warehouse)["exec-B"]).startswith(
        "2026-10-12 06:30:00.123"
    )
    capsys.readouterr()

    late = exports.source("exec-A", exports.older, T1)
    older = native_warehouse.operator(source=late).execute(context={})

    assert native_warehouse.contents() == expected(TP, exports.older, exports.newer)
    assert (older["rows_loaded"], older["rows_replaced"], older["rows_stale"]) == (15, 0, 15)
    assert older["newer_executions"] == ["exec-B"] and older["skipped"] is False
    said = capsys.readouterr().out
    assert "exec-A" in said and "older than execution(s) exec-B" in said
    assert "15 row(s) over 3 day(s) (2026-10-08 to 2026-10-10)" in said

    # The same execution again is a no-op; forced, it still leaves the newer figures alone.
    again = native_warehouse.operator(source=late).execute(context={})
    assert again["skipped"] is True and again["rows_stale"] == 0
    forced = native_warehouse.operator(source=late, force=True).execute(context={})
    assert (forced["rows_loaded"], forced["rows_replaced"], forced["rows_stale"]) == (15, 15, 15)
    assert native_warehouse.contents() == expected(TP, exports.older, exports.newer)


OLD_LEDGER_COLUMNS = (
    "target_table TEXT NOT NULL, execution_id TEXT, export_type TEXT NOT NULL, sha256 TEXT NOT NULL, "
    "source TEXT, bytes BIGINT, rows_loaded BIGINT, rows_deleted BIGINT, rows_rejected BIGINT, "
    "loaded_at TIMESTAMP NOT NULL, method TEXT"
)


def test_a_ledger_without_execution_times_is_migrated_and_loads_still_order(warehouse, tmp_path):
    """A ledger an older version created: the first load adds the column; its old rows count as older."""
    exports = Exports(tmp_path)
    base = exports.source("exec-0", exports.base, T0)
    warehouse.execute(f"CREATE TABLE {warehouse.ledger} ({OLD_LEDGER_COLUMNS})")
    warehouse.execute(
        f"INSERT INTO {warehouse.ledger} VALUES ('elsewhere', 'exec-old', '{TP}', 'abc', 'x.csv', "
        "1, 1, 0, 0, '2026-01-01 00:00:00', 'old')"
    )

    first = warehouse.operator(source=base).execute(context={})
    assert first["rows_loaded"] == 50
    assert warehouse.columns(warehouse.ledger).count("execution_time") == 1

    warehouse.operator(source=exports.source("exec-B", exports.newer, T2)).execute(context={})
    older = warehouse.operator(source=exports.source("exec-A", exports.older, T1)).execute(context={})

    assert warehouse.contents() == exports.newest_wins()
    assert (older["rows_loaded"], older["rows_replaced"], older["rows_stale"]) == (15, 15, 15)
    assert warehouse.columns(warehouse.ledger).count("execution_time") == 1
    times = {k: (None if v is None else _as_time(v)) for k, v in _ledger_times(warehouse).items()}
    assert times["exec-old"] is None and times["exec-0"].startswith("2026-10-04 06:00:00")


def test_a_load_without_a_time_replaces_as_before_and_counts_as_older(native_warehouse, tmp_path):
    """No ``update_time`` (a bare file): it replaces what it restates, even a newer execution's rows,
    and a later older execution with a time may replace its rows, but not the newer one's."""
    exports = Exports(tmp_path)
    bare_rows = tactic_rows(days(START + dt.timedelta(days=9), 2), TACTICS, version=4)  # days 10-11
    native_warehouse.operator(source=exports.source("exec-B", exports.newer, T2)).execute(context={})

    bare = native_warehouse.operator(source=exports.source("exec-X", bare_rows, None)).execute(context={})
    assert (bare["rows_loaded"], bare["rows_replaced"], bare["rows_stale"]) == (10, 10, 0)
    assert native_warehouse.contents() == expected(TP, exports.newer, bare_rows)
    assert _ledger_times(native_warehouse)["exec-X"] is None

    older = native_warehouse.operator(source=exports.source("exec-A", exports.older, T1)).execute(context={})

    # A (days 5-10) replaces X's day 10 and fills days 5-7; B keeps days 8-9; X keeps day 11.
    kept_out = {d.isoformat() for d in days(START + dt.timedelta(days=7), 2)}
    loaded = [row for row in exports.older if row["date"] not in kept_out]
    assert native_warehouse.contents() == expected(TP, exports.newer, bare_rows, loaded)
    assert (older["rows_loaded"], older["rows_replaced"], older["rows_stale"]) == (20, 5, 10)
    assert older["newer_executions"] == ["exec-B"]
