"""Where the DuckDB load's time goes, statement by statement, beside DuckDB's own ``read_csv``.

Renders one TACTIC_PERFORMANCE export with ``abm_emulator.csvgen`` (or takes ``--file``), then times,
each in a fresh database file under the same ``memory_limit``:

1. ``ceiling``: ``CREATE TABLE AS SELECT * FROM read_csv(file)`` with types sniffed, as ``make bench``;
2. ``typed``: the loader's one-pass ``INSERT ... SELECT`` into a new table with its casts, no rules;
3. ``typed + rules``: the same with the column rules evaluated on the text (what the loader runs);
4. ``key check``: the ``GROUP BY`` that looks for a repeated natural key after 3.

The SQL is built by :mod:`abm_provider.warehouse.dialects.duckdb` itself, so it is the statement the loader
runs. Prints each median; a benchmark, not a test: nothing is asserted.

    .venv/bin/python scripts/measure_duckdb_load.py [--size-mib 1024] [--repeat 3] [--memory-limit 256MB]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from abm_emulator.csvgen import write_export
from abm_provider.warehouse.checks import ColumnPlan
from abm_provider.warehouse.dialects.duckdb import DuckDBDialect, direct_insert_sql
from abm_provider.warehouse.schema import EXECUTION_ID_COLUMN, LOADED_AT_COLUMN, export_schema, quote

EXPORT_TYPE = "TACTIC_PERFORMANCE"


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=1024, help="export size to render (default 1024)")
    parser.add_argument("--file", type=Path, default=None, help="an existing TACTIC_PERFORMANCE CSV instead")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each variant (default 3)")
    parser.add_argument("--memory-limit", default="256MB", help="DuckDB memory_limit (default 256MB)")
    return parser.parse_args()


Statement = tuple[str, list[Any]]


def _statements(plan: ColumnPlan, keys: tuple[str, ...], csv: Path) -> dict[str, list[Statement]]:
    rules = DuckDBDialect(None).reason_sql(plan, keys)
    lineage: list[Any] = ["measure", datetime.now(UTC).replace(tzinfo=None), str(csv)]
    typed = (direct_insert_sql("t", plan, "CAST(NULL AS TEXT)"), lineage)  # no rule can stop it
    checked = (direct_insert_sql("t", plan, rules), lineage)
    key_sql = ", ".join(quote(k) for k in keys)
    return {
        "ceiling": [("CREATE TABLE c AS SELECT * FROM read_csv(?, header = true)", [str(csv)])],
        "typed": [typed],
        "typed + rules": [checked],
        "typed + rules + key check": [
            checked,
            (f"SELECT 1 FROM t GROUP BY {key_sql} HAVING COUNT(*) > 1 LIMIT 1", []),
        ],
    }


def _create_table(plan: ColumnPlan) -> str:
    columns = ", ".join(f"{quote(n)} {plan.kinds[n].sql_type}" for n in plan.header)
    lineage = f"{quote(EXECUTION_ID_COLUMN)} TEXT, {quote(LOADED_AT_COLUMN)} TIMESTAMP"
    return f"CREATE TABLE t ({columns}, {lineage})"


def _timed(
    db: Path, memory_limit: str, setup: str, statements: list[Statement], *, ordered: bool
) -> list[float]:
    db.unlink(missing_ok=True)
    seconds: list[float] = []
    with duckdb.connect(str(db)) as con:
        con.execute(f"SET memory_limit = '{memory_limit}'")
        if not ordered:
            con.execute("SET preserve_insertion_order = false")  # as the loader's one-pass insert
        con.execute(setup)
        for sql, parameters in statements:
            started = time.perf_counter()
            con.execute(sql, parameters).fetchall()
            seconds.append(time.perf_counter() - started)
    db.unlink(missing_ok=True)
    return seconds


def main() -> int:
    args = _parse()
    schema = export_schema(EXPORT_TYPE)
    plan = ColumnPlan(header=schema.column_names, kinds=schema.kinds(), to_add=(), table_exists=False)
    with tempfile.TemporaryDirectory(prefix="abm-duckdb-load-") as work:
        csv = args.file
        if csv is None:
            csv = Path(work) / "export.csv"
            started = time.perf_counter()
            write_export(
                csv,
                EXPORT_TYPE,
                seed=1,
                account="measure",
                generated_at=datetime(2026, 11, 1, tzinfo=UTC),
                size_bytes=args.size_mib << 20,
            )
            print(f"rendered {csv.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - started:.1f} s")
        size = csv.stat().st_size
        db = Path(work) / "measure.duckdb"
        variants = _statements(plan, schema.natural_key, csv)
        results: dict[str, list[list[float]]] = {name: [] for name in variants}
        for number in range(1, args.repeat + 1):
            for name, statements in variants.items():
                setup = "SELECT 1" if name == "ceiling" else _create_table(plan)
                ordered = name == "ceiling"  # DuckDB's defaults, as make bench's ceiling
                results[name].append(_timed(db, args.memory_limit, setup, statements, ordered=ordered))
                print(f"run {number}: {name:<26} {' + '.join(f'{s:.2f}' for s in results[name][-1])} s")
        print(f"\nmedians of {args.repeat}, {size / 1e6:.0f} MB, memory_limit {args.memory_limit}:")
        for name, runs in results.items():
            parts = [statistics.median(r[i] for r in runs) for i in range(len(runs[0]))]
            total = sum(parts)
            detail = f" ({' + '.join(f'{p:.2f}' for p in parts)})" if len(parts) > 1 else ""
            print(f"  {name:<26} {total:6.2f} s{detail}  {size / 1e6 / total:6.1f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
