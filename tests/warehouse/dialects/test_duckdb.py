"""``abm_provider.warehouse.dialects.duckdb``: a DuckDB load of a file larger than DuckDB's memory limit
completes: the limit bounds the work.

Found by ``make bench``: telling ``read_csv`` to accept 64 MiB lines made it allocate a read buffer
of 16 times that, capped by the file size, so a 1 GiB export under the default 256 MB benchmark
limit failed with "could not allocate block". Long fields are handled by the Python path instead.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from abm_emulator.csvgen import write_export
from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator
from support.export_files import download_xcom
from support.warehouses import Warehouse

SIZE = 160 * 1024 * 1024
LIMIT = "100MB"


def test_a_file_larger_than_the_memory_limit_loads(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "export.csv"
    info = write_export(
        path,
        "TACTIC_PERFORMANCE",
        seed=3,
        account="acct",
        generated_at=datetime(2026, 11, 1, tzinfo=UTC),
        size_bytes=SIZE,
    )
    assert path.stat().st_size > 150 * 1024 * 1024
    warehouse = Warehouse("duckdb", "warehouse", tmp_path / "wh.duckdb").use(monkeypatch)

    out = ExecutionCsvToSqlOperator(
        task_id="load",
        source=download_xcom(path, "big-1"),
        sql_conn_id="warehouse",
        table="tactic_performance",
        dialect_options={"memory_limit": LIMIT},
    ).execute(context={})

    assert out["method"] == "duckdb_read_csv" and out["rows_rejected"] == 0
    assert warehouse.count("tactic_performance") == out["rows_loaded"] == info.rows
