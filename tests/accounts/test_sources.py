"""``abm_provider.accounts.sources``: where accounts come from, read in bounded chunks.

No emulator here: these pin the behaviour the operators build on, so a failure points at the piece.
"""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from abm_provider.accounts.sources import (
    CsvSource,
    IterableSource,
    ParquetSource,
    SqlSource,
    TableSource,
    detect_file_format,
    is_table,
    open_file_source,
)
from abm_provider.accounts.validation import AccountValidator, SourceRow
from abm_provider.warehouse.schema import TableName
from support.warehouses import duckdb_conn_env


def test_iterable_source_refuses_a_single_mapping():
    with pytest.raises(TypeError, match="wrap one account in a list"):
        IterableSource({"id": "001000000000001"})


# --- files -----------------------------------------------------------------------------------------


def test_csv_source_keeps_strings_quotes_newlines_and_reports_lines(tmp_path):
    path = tmp_path / "accounts.csv"
    path.write_bytes(
        "\ufeffid,name,crmOrgId\n"
        '00123,"Acme, ""Inc""",org\n'
        '001000000000002,"two\nlines",\n'
        "\n"
        "bad,row\n"
        "001000000000004,Zoë,o\n".encode()
    )
    with CsvSource(path).open() as opened:
        assert opened.columns == ["id", "name", "crmOrgId"]
        rows = list(opened.rows)
    assert [(r.row_number, r.line) for r in rows] == [(1, 2), (2, 3), (3, 6), (4, 7)]
    assert rows[0].data == {"id": "00123", "name": 'Acme, "Inc"', "crmOrgId": "org"}
    assert rows[1].data["name"] == "two\nlines"
    assert rows[3].data["name"] == "Zoë"
    account, reason = AccountValidator().validate(rows[2].data)
    assert account is None and reason == "malformed CSV record: expected 3 fields, got 2"


def test_csv_source_reads_gzip_and_rejects_empty_or_duplicate_headers(tmp_path):
    gz = tmp_path / "a.csv.gz"
    with gzip.open(gz, "wt", encoding="utf-8", newline="") as fh:
        fh.write("id\n" + "".join(f"001{n:012d}\n" for n in range(5)))
    source = open_file_source(gz)
    assert isinstance(source, CsvSource)
    with source.open() as opened:
        assert [r.data["id"] for r in opened.rows][-1] == "001000000000004"
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match="needs a header row"), CsvSource(empty).open():
        pass
    dup = tmp_path / "dup.csv"
    dup.write_text("id,id\n1,2\n")
    with pytest.raises(ValueError, match="duplicate column names \\['id'\\]"), CsvSource(dup).open():
        pass


def test_parquet_source_streams_batches_and_keeps_types(tmp_path):
    path = tmp_path / "accounts.parquet"
    table = pa.table({"id": [f"001{n:012d}" for n in range(2500)], "n": list(range(2500))})
    pq.write_table(table, path, row_group_size=1000)
    source = open_file_source(str(path), read_batch_size=300)
    assert isinstance(source, ParquetSource)
    with source.open() as opened:
        assert opened.columns == ["id", "n"]
        rows = list(opened.rows)
    assert len(rows) == 2500 and rows[-1].row_number == 2500
    assert rows[7].data == {"id": "001000000000007", "n": 7}
    ints = tmp_path / "ints.parquet"
    pq.write_table(pa.table({"id": [1, 2]}), ints)
    with ParquetSource(ints).open() as opened:
        reasons = [AccountValidator().validate(r.data)[1] for r in opened.rows]
    assert reasons == ["id must be a string, got int 1", "id must be a string, got int 2"]


def test_table_source_reads_a_dataframe_in_batches_with_missing_values_as_none():
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame(
        {"id": ["001", None, "003", "004", "005"], "n": [1.0, np.nan, 3.0, 4.0, 5.0]},
        index=[10, 20, 30, 40, 50],
    )
    source = TableSource(frame, read_batch_size=2)
    assert [len(batch) for batch in source._batches()] == [2, 2, 1]
    with source.open() as opened:
        assert opened.columns == ["id", "n"]
        rows = list(opened.rows)
    assert [r.row_number for r in rows] == [1, 2, 3, 4, 5]
    assert rows[1].data == {"id": None, "n": None}
    assert rows[4].data == {"id": "005", "n": 5.0}


def test_table_source_reads_arrow_tables_and_readers_as_zero_copy_slices():
    table = pa.table({"id": [f"00{i}" for i in range(7)]})
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=4))
    for value in (table, reader):
        source = TableSource(value, read_batch_size=3)
        with source.open() as opened:
            assert opened.columns == ["id"]
            assert [r.data["id"] for r in opened.rows] == [f"00{i}" for i in range(7)]
    batches = list(TableSource(table, read_batch_size=3)._batches())
    assert [b.num_rows for b in batches] == [3, 3, 1]
    # A slice shares the table's buffers: no copy of the data.
    assert batches[1].column(0).buffers()[2].address == table.column(0).chunks[0].buffers()[2].address


def test_is_table_tells_tables_from_iterables():
    import pandas as pd

    assert is_table(pd.DataFrame({"id": ["1"]})) and is_table(pa.table({"id": ["1"]}))
    assert not is_table([{"id": "1"}]) and not is_table({"id": "1"}) and not is_table(pd.Series(["1"]))
    with pytest.raises(TypeError, match="pyarrow Table or a pandas DataFrame"):
        TableSource([{"id": "1"}])


def test_detect_file_format():
    assert detect_file_format("s3://b/k/accounts.CSV") == "csv"
    assert detect_file_format("/x/a.csv.gz") == "csv"
    assert detect_file_format("/x/a.parquet") == "parquet"
    assert detect_file_format("/x/a.data", "parquet") == "parquet"
    with pytest.raises(ValueError, match="set file_format"):
        detect_file_format("/x/a.json")
    with pytest.raises(ValueError, match="'csv' or 'parquet'"):
        detect_file_format("/x/a.csv", "xlsx")


# --- SQL -------------------------------------------------------------------------------------------


def test_sql_source_streams_a_duckdb_query(tmp_path, monkeypatch):
    import duckdb

    db = tmp_path / "crm.duckdb"
    with duckdb.connect(str(db)) as conn:
        conn.execute(
            "CREATE TABLE accounts AS SELECT printf('001%012d', i) AS account_id, 'n' || i AS account_name "
            "FROM range(2500) t(i)"
        )
    monkeypatch.setenv("AIRFLOW_CONN_CRM_DUCKDB", duckdb_conn_env(db))
    source = SqlSource(
        "SELECT account_id, account_name FROM accounts WHERE account_id >= ? ORDER BY account_id",
        "crm_duckdb",
        parameters=["001000000000500"],
        fetch_size=400,
    )
    with source.open() as opened:
        assert opened.columns == ["account_id", "account_name"]
        rows = list(opened.rows)
    assert len(rows) == 2000
    assert rows[0] == SourceRow(1, None, {"account_id": "001000000000500", "account_name": "n500"})


def test_sql_source_refuses_a_non_sql_connection(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_NOT_SQL",
        json.dumps({"conn_type": "abm", "host": "https://example.com", "password": "k"}),
    )
    with (
        pytest.raises(TypeError, match="not a common-sql DbApiHook"),
        SqlSource("SELECT 1", "not_sql").open(),
    ):
        pass


def test_sql_source_reads_a_whole_table_quoted_as_its_dialect_quotes(tmp_path, monkeypatch):
    """A ``table`` source is read with the table's name quoted by its connection's dialect."""
    import duckdb

    db = tmp_path / "warehouse.duckdb"
    with duckdb.connect(str(db)) as conn:
        conn.execute("CREATE SCHEMA crm")
        conn.execute("CREATE TABLE crm.accounts AS SELECT printf('001%012d', i) AS id FROM range(3) t(i)")
    monkeypatch.setenv("AIRFLOW_CONN_CRM_DUCKDB", duckdb_conn_env(db))
    source = SqlSource(None, "crm_duckdb", table=TableName("crm", "accounts"))
    with source.open() as opened:
        assert opened.columns == ["id"]
        assert [row.data["id"] for row in opened.rows] == [f"001{i:012d}" for i in range(3)]


@pytest.mark.parametrize("sql", [None, "SELECT 1"])
def test_sql_source_takes_a_query_or_a_table(sql):
    table = TableName(None, "accounts") if sql else None
    with pytest.raises(ValueError, match="a query .sql. or a table, not both and not neither"):
        SqlSource(sql, "crm", table=table)
