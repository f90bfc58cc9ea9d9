"""A load process SIGKILLed halfway leaves the table and the ledger as they were; the re-run completes.

The load runs in a subprocess that is killed for real (no exception handler, no rollback call): the
warehouse itself must discard the uncommitted transaction. Where the kill lands is made
deterministic by a patch that, at the chosen point, announces itself in a marker file and waits
(``support.processes.run_until_killed``).
"""

from __future__ import annotations

import datetime as dt

import pytest

from support.export_files import TACTIC_COLUMNS, days, download_xcom, expected, tactic_rows, write_csv
from support.processes import run_until_killed

KILL_POINTS = {
    # After the DELETE and the INSERT ran inside the transaction, before the ledger row and commit.
    "after_insert": """
        from abm_provider.warehouse.flow import WarehouseLoader
        original = WarehouseLoader.insert_new
        def insert_new(self, *args, **kwargs):
            rows = original(self, *args, **kwargs)
            wait_to_be_killed()
        WarehouseLoader.insert_new = insert_new
    """,
    # In the middle of streaming the file to COPY (PostgreSQL).
    "mid_copy": """
        from abm_provider.warehouse.dialects import postgres
        original = postgres._progress
        def _progress(*args, **kwargs):
            for number, chunk in enumerate(original(*args, **kwargs)):
                if number == 2:
                    wait_to_be_killed()
                yield chunk
        postgres._progress = _progress
    """,
}

#: The task the kill lands in: a load of ``kwargs`` (a child process of its own, see ``run_until_killed``).
LOAD = """
from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator
ExecutionCsvToSqlOperator(task_id="killed", **kwargs).execute(context={})
"""


@pytest.mark.parametrize(
    "point", ["after_insert", pytest.param("mid_copy", id="mid_copy")], ids=["after_insert", "mid_copy"]
)
def test_a_killed_load_changes_nothing_and_the_rerun_completes(native_warehouse, tmp_path, point):
    if point == "mid_copy" and native_warehouse.kind != "postgres":
        pytest.skip("COPY streaming is the PostgreSQL path; DuckDB reads the file in one statement")
    first = tactic_rows(days(dt.date(2026, 9, 1), 10), 20, version=1)
    # Large enough that COPY takes several 1 MiB chunks: ~60 days x 500 tactics.
    second = tactic_rows(days(dt.date(2026, 9, 9), 60), 500, version=2)
    n = download_xcom(write_csv(tmp_path / "n.csv", TACTIC_COLUMNS, first), "exec-1")
    n1 = download_xcom(write_csv(tmp_path / "n1.csv", TACTIC_COLUMNS, second), "exec-2")
    native_warehouse.operator(source=n).execute(context={})
    before = native_warehouse.contents()
    ledger_before = native_warehouse.ledger_rows()
    kwargs = {"source": n1, "sql_conn_id": native_warehouse.conn_id, "table": native_warehouse.table}

    run_until_killed(tmp_path, KILL_POINTS[point], LOAD, kwargs)

    assert native_warehouse.contents() == before
    assert native_warehouse.ledger_rows() == ledger_before
    out = native_warehouse.operator(source=n1).execute(context={})
    assert out["skipped"] is False and out["rows_loaded"] == len(second)
    assert native_warehouse.contents() == expected("TACTIC_PERFORMANCE", first, second)
    assert [r[0] for r in native_warehouse.ledger_rows()] == ["exec-1", "exec-2"]
