"""A Parquet file converted from an export holds what a warehouse load stores: the same column types
(one table, ``abm_provider.warehouse.schema.COLUMN_TYPES``, gives both) and the same values.

The SQL side is read back from a real DuckDB table loaded by the provider, as Arrow, so the test
compares the Parquet schema with what the database made of the SQL types, not with the table itself.
The converter streams a CSV into typed columns, and a value its column refuses fails the conversion.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from abm_provider.exports.parquet import CsvToParquet
from abm_provider.warehouse import LoadRequest, loader_for
from abm_provider.warehouse.schema import COLUMN_TYPES, EXPORT_SCHEMAS, Kind, TableName, export_schema
from support.export_files import COLUMNS, account_rows, days, tactic_rows, write_csv
from support.warehouses import duckdb_conn_env


def _to_parquet(csv_path: Path, parquet_path: Path) -> pa.Table:
    with parquet_path.open("wb") as out:
        converter = CsvToParquet(out)
        converter.write(csv_path.read_bytes())
        converter.close()
    return pq.read_table(parquet_path)


def _rows(export_type: str) -> list[dict[str, str]]:
    dates = days(dt.date(2026, 10, 1), 3)
    if export_type == "TACTIC_PERFORMANCE":
        return tactic_rows(dates, 4, version=1)
    return account_rows(dates, 2, 3, version=1)


def _loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, export_type: str, path: Path) -> pa.Table:
    """The file loaded into DuckDB by the provider, read back as Arrow in the file's column order."""
    from airflow.providers.duckdb.hooks.duckdb import DuckDBHook

    monkeypatch.setenv("AIRFLOW_CONN_WH_PARQUET", duckdb_conn_env(tmp_path / "wh.duckdb"))
    hook = DuckDBHook(duckdb_conn_id="wh_parquet")
    schema = export_schema(export_type)
    loader_for(hook).load(
        LoadRequest(
            path=path,
            source=str(path),
            table=TableName.parse("loaded"),
            export=schema,
            key_columns=schema.natural_key,
            execution_id="exec-1",
            sha256="0" * 64,
            size=path.stat().st_size,
            rejects_path=path.with_suffix(".rejects.csv"),
            ledger=TableName.parse("abm_load_ledger"),
        )
    )
    conn = hook.get_conn()
    try:
        names = ", ".join(f'"{name}"' for name in schema.column_names)
        key = ", ".join(f'"{name}"' for name in schema.natural_key)
        return conn.sql(f"SELECT {names} FROM loaded ORDER BY {key}").to_arrow_table()
    finally:
        conn.close()


@pytest.mark.parametrize("export_type", sorted(EXPORT_SCHEMAS))
def test_the_parquet_schema_is_the_sql_schema(
    export_type: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_csv(tmp_path / "export.csv", COLUMNS[export_type], _rows(export_type))
    parquet = _to_parquet(path, tmp_path / "export.parquet")
    loaded = _loaded(tmp_path, monkeypatch, export_type, path)

    assert parquet.schema.names == loaded.schema.names == list(export_schema(export_type).column_names)
    for name in parquet.schema.names:
        assert parquet.schema.field(name).type == loaded.schema.field(name).type, name
    keys = [(name, "ascending") for name in export_schema(export_type).natural_key]
    assert parquet.sort_by(keys).to_pylist() == loaded.to_pylist()


@pytest.mark.parametrize("kind", list(Kind))
def test_each_kind_has_one_type_for_sql_and_arrow(kind: Kind) -> None:
    """DuckDB's Arrow type for the SQL spelling is the Arrow type the Parquet file gets."""
    import duckdb

    with duckdb.connect() as con:
        found: Any = con.sql(f"SELECT CAST(NULL AS {kind.sql_type}) AS v").to_arrow_table()
    assert found.schema.field("v").type == kind.arrow_type()
    assert kind.sql_type == COLUMN_TYPES[kind].sql


def test_money_with_more_places_than_the_warehouse_keeps_fails_the_conversion(tmp_path: Path) -> None:
    """As a load rejects ``1.005`` (DECIMAL(18,2)), the conversion refuses to round it."""
    path = tmp_path / "x.csv"
    path.write_bytes(b"date,spend\n2026-01-01,1.25\n2026-01-02,1.005\n")
    with pytest.raises(ValueError, match="Converting the CSV to Parquet failed"):
        _to_parquet(path, tmp_path / "x.parquet")


def test_csv_to_parquet_streams_with_types(tmp_path: Path) -> None:
    header = "date,campaign_id,campaign_name,tactic_id,tactic_name,impressions,clicks,spend\n"
    rows = [
        f'2026-01-{1 + i % 28:02d},0012,"Camp, ""quoted"" é",{i:05d},"multi\nline",{i * 10},{i},{i}.25\n'
        for i in range(20_000)
    ]
    data = (header + "".join(rows)).encode()
    out_path = tmp_path / "x.parquet"
    with open(out_path, "wb") as out:
        converter = CsvToParquet(out, block_size=64 << 10)
        for start in range(0, len(data), 7777):  # chunk edges fall inside rows and quoted values
            converter.write(data[start : start + 7777])
        assert converter.close() == 20_000
    table = pq.read_table(out_path)
    assert table.num_rows == 20_000
    assert table.schema.field("date").type == pa.date32()
    assert table.schema.field("campaign_id").type == pa.string()  # ids keep leading zeros
    assert table.schema.field("impressions").type == pa.int64()
    assert pa.types.is_decimal(table.schema.field("spend").type)
    first = table.slice(0, 1).to_pylist()[0]
    assert first["campaign_id"] == "0012" and first["campaign_name"] == 'Camp, "quoted" é'
    assert first["tactic_name"] == "multi\nline"
    assert str(table.column("spend")[3].as_py()) == "3.25"  # DECIMAL(18,2), as the warehouse stores it


def test_csv_to_parquet_reports_bad_value(tmp_path: Path) -> None:
    data = b"date,impressions\n2026-01-01,5\n2026-01-02,lots\n"
    with open(tmp_path / "x.parquet", "wb") as out:
        converter = CsvToParquet(out)
        converter.write(data)
        with pytest.raises(ValueError, match="Converting the CSV to Parquet failed"):
            converter.close()
