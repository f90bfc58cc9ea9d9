"""Unit tests for the pure parts of the account-list operators: sources, validation, batching.

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
from abm_provider.accounts.validation import AccountValidator, SourceRow, iter_batches, normalise_column_map

GOOD = "001000000000001"

# --- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "reason_start"),
    [
        ({"name": "x"}, "missing id (no column 'id')"),
        ({"id": None}, "missing id (null)"),
        ({"id": 1234}, "id must be a string, got int"),
        ({"id": ""}, "empty id"),
        ({"id": "   "}, "empty id"),
        ({"id": "0" * 256}, "id is 256 characters"),
        ({"id": "001 000"}, "id contains whitespace"),
        ({"id": "001\x00abc"}, "id contains whitespace or control"),
        ({"id": "001\u00a0abc"}, "id contains whitespace or control"),
        ({"id": "001-\u2028x"}, "id contains whitespace or control"),
        ({"id": GOOD, "name": 5}, "name must be a string, got int"),
        ({"id": GOOD, "crmOrgId": ["a"]}, "crmOrgId must be a string, got list"),
        ({"id": GOOD, "name": "a\x01b"}, "name contains control characters"),
        ({"id": GOOD, "name": "Zoë \x7f"}, "name contains control characters"),
        ({"id": GOOD, "crmType": "HUBSPOT"}, "unknown crmType 'HUBSPOT'"),
        ({"id": GOOD, "crmType": "salesforce"}, "unknown crmType 'salesforce'"),
        ({"id": GOOD, "crmType": 3}, "crmType must be a string, got int"),
        (["001", "x"], "row is not a mapping"),
    ],
)
def test_validator_rejects_with_reason(row, reason_start):
    account, reason = AccountValidator(default_crm_org_id="00D1").validate(row)
    assert account is None
    assert reason is not None and reason.startswith(reason_start), reason


@pytest.mark.parametrize("account_id", ["001-abc_X.1", "Ünïcode-ID", "a/b:c"])
@pytest.mark.parametrize("name", ["Acme\tInc", "Café\nLyon", "Zoë – “Tier 1”"])
def test_validator_accepts_ids_and_names_the_fast_checks_pass_to_the_pattern(account_id, name):
    """Not alphanumeric, or not printable, is not yet wrong: tabs and newlines are allowed in names."""
    account, reason = AccountValidator(default_crm_org_id="00D1").validate({"id": account_id, "name": name})
    assert reason is None and account is not None
    assert (account["id"], account["name"]) == (account_id, name)


def test_validator_needs_only_an_id_and_trims():
    """The service fills a missing crmOrgId (the customer's org) and crmType (SALESFORCE) itself."""
    validator = AccountValidator()
    assert validator.default_crm_type is None and validator.default_crm_org_id is None
    assert validator.validate({"id": GOOD}) == ({"id": GOOD}, None)
    row = {"id": f"  {GOOD} ", "name": " Acme, Inc ", "crmOrgId": "", "crmType": " ", "x": 1}
    assert validator.validate(row) == ({"id": GOOD, "name": "Acme, Inc"}, None)
    account, _ = validator.validate({"id": GOOD, "crmType": "SALESFORCE", "crmOrgId": " 00D1 "})
    assert account == {"id": GOOD, "crmOrgId": "00D1", "crmType": "SALESFORCE"}


def test_validator_defaults_fill_only_what_a_row_lacks():
    validator = AccountValidator(default_crm_org_id=" 00D9 ", default_crm_type="SALESFORCE")
    row = {"id": f"  {GOOD} ", "name": " Acme, Inc ", "crmOrgId": "", "x": 1}
    account, reason = validator.validate(row)
    assert reason is None
    assert account == {"id": GOOD, "name": "Acme, Inc", "crmOrgId": "00D9", "crmType": "SALESFORCE"}
    account, _ = validator.validate({"id": GOOD, "crmOrgId": "00D1"})
    assert account == {"id": GOOD, "crmOrgId": "00D1", "crmType": "SALESFORCE"}
    # the org default is not sent where the request has no crmOrgId field
    remove = AccountValidator(fields=("id", "crmType"), default_crm_org_id="00D9")
    assert remove.validate({"id": GOOD}) == ({"id": GOOD}, None)
    with pytest.raises(ValueError, match="default_crm_type 'HUBSPOT' is not a known crmType"):
        AccountValidator(default_crm_type="HUBSPOT")


def test_validator_column_map_and_remove_fields():
    validator = AccountValidator(
        {"id": "account_id", "name": "account_name"}, fields=("id", "crmOrgId", "crmType")
    )
    account, reason = validator.validate({"account_id": GOOD, "account_name": 7, "crmOrgId": "org"})
    # name is not part of a remove request, so a bad name does not stop the removal
    assert reason is None
    assert account == {"id": GOOD, "crmOrgId": "org"}
    assert validator.validate({"id": GOOD})[1] == "missing id (no column 'account_id')"


def test_column_map_rejects_unknown_fields_and_reports_missing_columns():
    with pytest.raises(ValueError, match="unknown keys \\['crmorgid'\\]"):
        normalise_column_map({"crmorgid": "org"})
    with pytest.raises(ValueError, match="non-empty column name"):
        normalise_column_map({"id": ""})
    validator = AccountValidator({"id": "acct", "name": "nm"})
    assert validator.missing_columns(["acct", "nm"]) == []
    assert validator.missing_columns(["id", "name"]) == ["acct", "nm"]
    # default columns that are absent are fine: only id is required
    assert AccountValidator().missing_columns(["id"]) == []


# --- batching --------------------------------------------------------------------------------------


def test_iter_batches_splits_and_routes_invalid_rows_in_order():
    rows = []
    for n in range(1, 2351):
        data = {"id": f"001{n:012d}"} if n % 500 else {"id": None}
        rows.append(SourceRow(n, None, data))
    invalid = []
    batches = list(iter_batches(rows, AccountValidator(default_crm_org_id="00D1"), 1000, invalid.append))
    assert [len(b) for b in batches] == [1000, 1000, 346]
    assert [i.row.row_number for i in invalid] == [500, 1000, 1500, 2000]
    assert all(i.reason == "missing id (null)" for i in invalid)
    # each account keeps the row it came from
    account, row = batches[1][0]
    assert account["id"] == f"001{row.row_number:012d}"
    with pytest.raises(ValueError, match="between 1 and 1000"):
        list(iter_batches(rows, AccountValidator(), 1001, invalid.append))


def test_iter_batches_reads_lazily_one_batch_ahead_at_most():
    consumed = 0

    def endless():
        nonlocal consumed
        n = 0
        while True:
            n += 1
            consumed += 1
            yield {"id": f"001{n:012d}"}

    with IterableSource(endless()).open() as opened:
        batches = iter_batches(opened.rows, AccountValidator(default_crm_org_id="00D1"), 250, lambda _: None)
        first = next(batches)
        assert len(first) == 250
        assert consumed == 250
        next(batches)
        assert consumed == 500


def test_iterable_source_refuses_a_single_mapping():
    with pytest.raises(TypeError, match="wrap one account in a list"):
        IterableSource({"id": GOOD})


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
    monkeypatch.setenv("AIRFLOW_CONN_CRM_DUCKDB", json.dumps({"conn_type": "duckdb", "host": str(db)}))
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
