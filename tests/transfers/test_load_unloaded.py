"""``source="unloaded"``: every completed execution the ledger lacks, oldest first, each committed.

A DAG scheduled on an export Asset may get several executions' events folded into one run, or miss
one to a triggerer crash; loading "what the ledger lacks" loads each exactly once either way. Every
test compares the table with loading the same executions one by one, oldest first.
"""

from __future__ import annotations

from typing import Any

import pytest

from abm_provider.compat import AirflowFailException
from abm_provider.transfers.csv_to_sql import UNLOADED

EXPORT_TYPE = "TACTIC_PERFORMANCE"


def complete(abm: Any, count: int) -> list[str]:
    """``count`` COMPLETE executions, a minute apart (each restates days the one before loaded)."""
    fired = []
    for _ in range(count):
        fired.append(abm.fire(EXPORT_TYPE, outcome="COMPLETE", sizeBytes=40_000)["id"])
        abm.advance(60)
    return fired


def executions(ids: list[str]) -> list[dict[str, Any]]:
    from abm_provider.hooks.abm import AbmHook

    listed = {e["id"]: e for e in AbmHook("abm_default").iter_executions(EXPORT_TYPE)}
    return [listed[i] for i in ids]


def one_by_one(target: Any, ids: list[str]) -> dict[Any, Any]:
    """The table that loading each execution in turn, oldest first, gives (in a table of its own)."""
    clean = target.with_table(f"{target.table.rpartition('.')[2]}_one_by_one")
    for execution in executions(ids):
        clean.operator(source=execution).execute(context={})
    return clean.contents()


def downloads(abm: Any) -> int:
    return sum(1 for r in abm.requests_seen() if r.get("origin") == "storage" and r.get("status") == 200)


def loaded(out: dict[str, Any]) -> list[str]:
    return [r["execution_id"] for r in out["executions"] if not r["skipped"]]


def test_one_run_loads_every_completed_execution_the_ledger_lacks_oldest_first(abm: Any, target: Any) -> None:
    ids = complete(abm, 3)
    operator = target.operator(source=UNLOADED, export_type=EXPORT_TYPE)
    out = operator.execute(context={})
    assert loaded(out) == ids and out["left"] == 0
    # Each load names the days it replaced; the task's lineage reads every file it loaded.
    assert all(r["days"] == sorted(r["days"]) and r["days"] for r in out["executions"])
    assert [d.name for d in operator.get_openlineage_facets_on_complete(None).inputs] == [
        r["archive"] for r in out["executions"]
    ]
    assert [row[0] for row in target.ledger_rows()] == ids
    assert target.contents() == one_by_one(target, ids)

    # Nothing new: the next run downloads nothing and loads nothing.
    abm.admin("DELETE", "/_admin/requests")
    again = target.operator(source=UNLOADED, export_type=EXPORT_TYPE).execute(context={})
    assert again["executions"] == [] and again["left"] == 0
    assert downloads(abm) == 0


def test_a_run_loads_at_most_max_executions_and_the_next_run_goes_on(abm: Any, target: Any) -> None:
    ids = complete(abm, 3)
    first = target.operator(source=UNLOADED, export_type=EXPORT_TYPE, max_executions=2).execute(context={})
    assert loaded(first) == ids[:2] and first["left"] == 1
    later = complete(abm, 1)  # one more completes between the runs
    second = target.operator(source=UNLOADED, export_type=EXPORT_TYPE, max_executions=2).execute(context={})
    assert loaded(second) == [ids[2], *later] and second["left"] == 0
    assert target.contents() == one_by_one(target, [*ids, *later])


def test_an_execution_loaded_by_another_run_is_not_loaded_again(abm: Any, target: Any) -> None:
    """The ledger, not the events, says what is loaded: an execution a daily DAG loaded is skipped."""
    ids = complete(abm, 2)
    target.operator(source=executions(ids[:1])[0]).execute(context={})
    out = target.operator(source=UNLOADED, export_type=EXPORT_TYPE).execute(context={})
    assert loaded(out) == ids[1:]
    assert target.contents() == one_by_one(target, ids)


def test_unloaded_without_an_export_type_fails_naming_the_argument(abm: Any, target: Any) -> None:
    with pytest.raises(AirflowFailException, match="export_type"):
        target.operator(source=UNLOADED).execute(context={})


def test_max_executions_must_be_a_whole_number_from_one() -> None:
    from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator

    with pytest.raises(ValueError, match="max_executions must be a whole number >= 1, got 0"):
        ExecutionCsvToSqlOperator(
            task_id="t",
            source=UNLOADED,
            sql_conn_id="wh",
            table="t",
            export_type=EXPORT_TYPE,
            max_executions=0,
        )
