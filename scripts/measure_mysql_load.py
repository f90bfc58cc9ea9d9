"""Measure the MySQL/MariaDB bulk path against the Python-staged path it falls back to.

Renders a TACTIC_PERFORMANCE export with the emulator's generator, then loads it into a fresh
database with ``ExecutionCsvToSqlOperator``'s loader twice per run (a new table, then a reload that
replaces every row): once through ``LOAD DATA LOCAL INFILE`` with the Arrow pre-scan beside it, once
staged through Python and ``executemany`` (what runs when the fast path steps back). Prints the
median seconds and MB/s of each; figures go to docs/performance.md with this command.

    python scripts/measure_mysql_load.py --size-mib 50 --repeat 3
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time
import uuid
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from abm_emulator.csvgen import write_export
from abm_provider.warehouse import LoadRequest, loader_for
from abm_provider.warehouse.dialects import mysql
from abm_provider.warehouse.schema import TableName, export_schema

SERVER = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": ""}


def _load(hook: Any, csv: Path, database: str, execution: str, digest: str) -> float:
    schema = export_schema("TACTIC_PERFORMANCE")
    table = TableName(database, "bench_mysql")
    request = LoadRequest(
        path=csv,
        source=str(csv),
        table=table,
        export=schema,
        key_columns=schema.natural_key,
        execution_id=execution,
        sha256=digest,
        size=csv.stat().st_size,
        rejects_path=csv.with_suffix(".rejects.csv"),
        ledger=table.sibling("abm_load_ledger"),
    )
    started = time.perf_counter()
    result = loader_for(hook).load(request)
    assert result.rows_loaded > 0 and not result.rows_rejected, result
    return time.perf_counter() - started


def main() -> None:
    import MySQLdb
    from airflow.providers.mysql.hooks.mysql import MySqlHook
    from airflow.sdk import Connection

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    python_staged = mysql.MySQLDialect._load_data
    with tempfile.TemporaryDirectory() as scratch:
        csv = Path(scratch) / "export.csv"
        write_export(
            csv,
            "TACTIC_PERFORMANCE",
            seed=1,
            account="measure",
            generated_at=datetime(2026, 11, 1, tzinfo=UTC),
            size_bytes=args.size_mib << 20,
        )
        digest = hashlib.sha256(csv.read_bytes()).hexdigest()
        size_mb = csv.stat().st_size / 1e6
        times: dict[str, list[float]] = {}
        for _ in range(args.repeat):
            for path in ("load_data", "python"):
                mysql.MySQLDialect._load_data = (  # type: ignore[method-assign]
                    python_staged if path == "load_data" else (lambda self, *a: None)
                )
                database = f"abm_measure_{uuid.uuid4().hex[:8]}"
                with closing(MySQLdb.connect(**SERVER)) as admin:
                    admin.cursor().execute(f"CREATE DATABASE `{database}`")
                try:
                    hook = MySqlHook(
                        connection=Connection(
                            conn_id="measure", conn_type="mysql", host="127.0.0.1", port=3306, login="root",
                            schema=database,
                        )
                    )  # fmt: skip
                    times.setdefault(f"{path} new table", []).append(_load(hook, csv, database, "e1", digest))
                    times.setdefault(f"{path} replace", []).append(_load(hook, csv, database, "e2", digest))
                finally:
                    with closing(MySQLdb.connect(**SERVER)) as admin:
                        admin.cursor().execute(f"DROP DATABASE `{database}`")
        print(f"{size_mb:.0f} MB export, median of {args.repeat}:")
        for case, seconds in times.items():
            median = statistics.median(seconds)
            print(f"  {case:24s} {median:6.1f} s  {size_mb / median:6.1f} MB/s")


if __name__ == "__main__":
    main()
