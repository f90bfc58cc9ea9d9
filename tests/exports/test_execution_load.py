"""``ExecutionLoad``, the export-load engine, driven without an operator: files in, lineage kept,
settings the warehouse refuses failing the task for good."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Any

import pytest

from abm_provider.compat import AirflowFailException
from abm_provider.exports.execution_load import ExecutionLoad, LoadSettings
from abm_provider.warehouse.schema import TableName
from support.export_files import TACTIC_COLUMNS, days, download_xcom, tactic_rows, write_csv
from support.warehouses import SqliteTestHook, Warehouse

TABLE = TableName.parse("tactic_perf")


class _NoApi:
    """An ABM hook a file load must never use."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a file load used the ABM hook's {name}")


def _engine(tmp_path: Path, **settings: Any) -> ExecutionLoad:
    hook = SqliteTestHook(tmp_path / "wh.sqlite")
    return ExecutionLoad(
        LoadSettings(
            table=TABLE,
            ledger=TABLE.sibling("abm_load_ledger"),
            copy_rejects_path=tmp_path / "copies.rejects.csv",
            **settings,
        ),
        abm_hook=_NoApi(),  # type: ignore[arg-type]
        warehouse_hook=lambda: hook,
        context={},
        log=logging.getLogger("test_execution_load"),
    )


def test_files_load_in_turn_and_the_lineage_holds_each(tmp_path: Path) -> None:
    first = tactic_rows(days(dt.date(2026, 10, 1), 2), tactics=2, version=1)
    second = tactic_rows(days(dt.date(2026, 10, 2), 2), tactics=2, version=2)
    one = write_csv(tmp_path / "exec-1.csv", TACTIC_COLUMNS, first)
    two = write_csv(tmp_path / "exec-2.csv", TACTIC_COLUMNS, second)
    load = _engine(tmp_path)
    assert load.lineage is None

    outs = [load.file(download_xcom(one, "exec-1")), load.file(download_xcom(two, "exec-2"))]

    assert [o["execution_id"] for o in outs] == ["exec-1", "exec-2"]
    assert load.lineage is not None
    assert load.lineage.paths == (str(one), str(two))
    assert load.lineage.days == ["2026-10-01", "2026-10-02", "2026-10-03"]
    # three days of two tactics, the second file restating the 2nd
    assert Warehouse("sqlite", "wh_sqlite", tmp_path / "wh.sqlite").count("tactic_perf") == 6


def test_an_option_the_warehouse_lacks_fails_for_good_naming_it(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "exec-1.csv", TACTIC_COLUMNS, tactic_rows(days(dt.date(2026, 10, 1), 1), 1, version=1)
    )
    load = _engine(tmp_path, dialect_options={"memory_limit": "1GB"})
    with pytest.raises(AirflowFailException, match="'memory_limit' is not an option of the generic dialect"):
        load.file(download_xcom(path, "exec-1"))
    assert load.lineage is None
