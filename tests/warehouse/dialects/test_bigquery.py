"""``abm_provider.warehouse.dialects.bigquery`` on bqemulator, through this provider's BigQuery hook.

Loads run through ``ExecutionCsvToSqlOperator`` as a DAG's task would, on a ``google_cloud_platform``
connection (the Google provider is not installed, so :func:`abm_provider.warehouse.connections.sql_hook` gives
:class:`~abm_provider.warehouse.dialects.bigquery_hook.BigQueryLoadHook`); the tables are read back with
``google-cloud-bigquery``'s own client, never through the code under test. What the emulator cannot show
(a concurrent update aborting a transaction, NUMERIC(18,2) enforced, DDL refused in a transaction) is
said in the dialect's docstring.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
from pathlib import Path
from typing import Any

import pytest

from abm_provider.common.rejects import TooManyRejects, read_rejects
from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator
from abm_provider.warehouse import loader_for
from abm_provider.warehouse.checks import plan_columns
from abm_provider.warehouse.connections import sql_hook
from abm_provider.warehouse.dialects import dialect_for
from abm_provider.warehouse.dialects.bigquery import STAGE_DATASET_PREFIX, BigQueryDialect
from abm_provider.warehouse.dialects.bigquery_hook import BigQueryLoadHook
from abm_provider.warehouse.ledger import LEDGER_COLUMNS
from abm_provider.warehouse.load import LoadRequest
from abm_provider.warehouse.schema import Kind, TableName, export_schema
from abm_provider.warehouse.stream import IncomingFile
from support.cloud_warehouses import BigQueryTarget
from support.export_files import (
    FIRST_EXECUTION,
    NEWER_EXECUTION,
    TACTIC_COLUMNS,
    csv_record,
    download_xcom,
    expected,
    table_contents,
    write_export,
)

TABLE = "tactic_daily"
FIRST, SECOND = FIRST_EXECUTION, NEWER_EXECUTION


class Reader:
    """Reads the test's dataset with the BigQuery client, as a DB-API cursor (``table_contents``)."""

    def __init__(self, target: BigQueryTarget) -> None:
        self.client = target.client()
        self.dataset = target.dataset
        self._rows: list[tuple[Any, ...]] = []

    def execute(self, sql: str) -> None:
        from google.cloud import bigquery

        config = bigquery.QueryJobConfig(default_dataset=f"{self.client.project}.{self.dataset}")
        self._rows = [tuple(row.values()) for row in self.client.query(sql, job_config=config).result()]

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows

    def contents(self) -> dict[tuple[str, ...], tuple[Any, ...]]:
        return table_contents(self, TABLE, "TACTIC_PERFORMANCE")

    def ledger(self) -> list[tuple[Any, ...]]:
        self.execute(
            "SELECT execution_id, rows_loaded, rows_deleted, rows_rejected, method FROM abm_load_ledger "
            "ORDER BY loaded_at"
        )
        return self.fetchall()

    def stage_inserts(self) -> int:
        """How many query jobs the emulator has run that insert into a stage named ``_abm_stage``."""
        return sum(
            "INTO _abm_stage" in (getattr(job, "query", None) or "") for job in self.client.list_jobs()
        )

    def stage_datasets(self) -> list[str]:
        return [
            d.dataset_id for d in self.client.list_datasets() if d.dataset_id.startswith(STAGE_DATASET_PREFIX)
        ]


@pytest.fixture
def bq(bigquery_connection: BigQueryTarget) -> Reader:
    """The test's dataset, created, and a reader of it."""
    bigquery_connection.client().create_dataset(bigquery_connection.dataset)
    return Reader(bigquery_connection)


def load(target: BigQueryTarget, path: Path, execution: str, **kwargs: Any) -> dict[str, Any]:
    operator = ExecutionCsvToSqlOperator(
        task_id=f"load_{execution}",
        sql_conn_id=target.conn_id,
        table=f"{target.dataset}.{TABLE}",
        source=download_xcom(path, execution),
        **kwargs,
    )
    result: dict[str, Any] = operator.execute(context={})
    return result


def test_a_google_cloud_connection_gets_the_bigquery_dialect_without_the_google_provider(
    bigquery_connection: BigQueryTarget,
) -> None:
    hook = sql_hook(bigquery_connection.conn_id, "sql_conn_id")
    assert isinstance(hook, BigQueryLoadHook)
    assert hook.placeholder == "?"
    dialect = dialect_for(hook)
    assert isinstance(dialect, BigQueryDialect)
    assert dialect.placeholder == "?"


def test_a_newer_execution_replaces_the_restated_days_and_a_rerun_changes_nothing(
    bigquery_connection: BigQueryTarget, bq: Reader, tmp_path: Path
) -> None:
    first = load(bigquery_connection, write_export(tmp_path / "first.csv", FIRST), "exec-1")
    assert (first["rows_loaded"], first["rows_replaced"], first["method"]) == (
        len(FIRST),
        0,
        "bigquery_load_job",
    )
    assert first["days"] == ["2026-10-01", "2026-10-02", "2026-10-03"]
    assert bq.contents() == expected("TACTIC_PERFORMANCE", FIRST)

    second = load(bigquery_connection, write_export(tmp_path / "second.csv", SECOND), "exec-2")
    restated = [r for r in FIRST if r["date"] >= "2026-10-02"]
    assert (second["rows_loaded"], second["rows_replaced"]) == (len(SECOND), len(restated))
    want = expected("TACTIC_PERFORMANCE", FIRST, SECOND)
    assert bq.contents() == want  # one row per key: table_contents fails on a repeated one

    again = load(bigquery_connection, tmp_path / "second.csv", "exec-2")
    assert again["skipped"] is True
    assert bq.contents() == want
    assert bq.ledger() == [
        ("exec-1", len(FIRST), 0, 0, "bigquery_load_job"),
        ("exec-2", len(SECOND), len(restated), 0, "bigquery_load_job"),
    ]
    bq.execute(f"SELECT DISTINCT _execution_id FROM {TABLE} WHERE date = '2026-10-01'")
    assert bq.fetchall() == [("exec-1",)]
    assert bq.stage_datasets() == []  # each load's stage went with it


def test_columns_get_bigquery_types_and_text_is_staged_exactly_as_written(
    bigquery_connection: BigQueryTarget, bq: Reader, tmp_path: Path
) -> None:
    """A CSV reader that guesses types would make ``007`` a number and lose its zeros; a quoted empty
    field is an empty text, an unquoted one NULL."""
    row = dict(FIRST[0], campaign_id="007", tactic_name="12.50")
    path = tmp_path / "text.csv"
    path.write_text(
        ",".join(TACTIC_COLUMNS) + "\n" + csv_record(row) + "\n"
        f'{FIRST[1]["date"]},"",,{FIRST[1]["tactic_id"]},x,1,2,3.5\n',
        encoding="utf-8",
    )
    load(bigquery_connection, path, "exec-1")

    table = bq.client.get_table(f"{bq.client.project}.{bq.dataset}.{TABLE}")
    types = {f.name: (f.field_type, f.precision, f.scale) for f in table.schema}
    assert list(types) == [*TACTIC_COLUMNS, "_execution_id", "_loaded_at"]
    assert types["date"][0] == "DATE"
    assert types["impressions"][0] in ("INT64", "INTEGER")
    assert types["campaign_name"][0] == "STRING"
    assert types["spend"][0] == "NUMERIC"
    assert types["_loaded_at"][0] == "TIMESTAMP"
    bq.execute(
        f"SELECT campaign_id, campaign_name, tactic_name, spend, _loaded_at FROM {TABLE} ORDER BY tactic_id"
    )
    (kept, empty) = bq.fetchall()
    assert kept[:3] == ("007", row["campaign_name"], "12.50")
    assert empty[:3] == ("", None, "x") and str(empty[3]) in ("3.5", "3.50")
    loaded_at = kept[4]
    assert abs(loaded_at - dt.datetime.now(dt.UTC)) < dt.timedelta(minutes=5)  # UTC, an instant


def test_bad_values_malformed_records_and_repeated_keys_are_set_aside_with_their_records(
    bigquery_connection: BigQueryTarget, bq: Reader, tmp_path: Path
) -> None:
    good = FIRST[:3]
    lines = [
        *(csv_record(r) for r in good),
        csv_record(FIRST[3], clicks="12x"),  # record 4: a bad integer
        "2026-10-01,c1,short,t1,row,1,2",  # record 5: too few fields
        csv_record(FIRST[4], date="2026-02-30"),  # record 6: no such day
        csv_record(FIRST[5], spend="1.005"),  # record 7: three places
        csv_record(FIRST[6], tactic_id=""),  # record 8: a key missing
        csv_record(FIRST[0], spend="1.00"),  # record 9: repeats record 1's key, and wins
    ]
    path = tmp_path / "bad.csv"
    path.write_text("\n".join([",".join(TACTIC_COLUMNS), *lines]) + "\n", encoding="utf-8")

    out = load(bigquery_connection, path, "exec-1", max_rejected=6)

    rejects = {int(r["record"]): r["reason"] for r in read_rejects(Path(out["rejects_path"]))}
    assert sorted(rejects) == [1, 4, 5, 6, 7, 8]
    assert rejects[1].startswith("duplicate natural key")
    assert rejects[4] == "column clicks: expected an integer, got 12x"
    assert rejects[5].startswith("malformed record")
    assert rejects[6] == "column date: expected a date YYYY-MM-DD, got 2026-02-30"
    assert rejects[7].startswith("column spend: expected a decimal")
    assert rejects[8] == "missing value in key column tactic_id"
    assert (out["rows_loaded"], out["rows_rejected"]) == (3, 6)
    want = expected("TACTIC_PERFORMANCE", good, [dict(FIRST[0], spend="1.00")])
    assert bq.contents() == want
    assert bq.ledger() == [("exec-1", 3, 0, 6, "bigquery_load_job")]


def test_a_load_refused_for_its_rejects_changes_nothing_and_leaves_no_stage(
    bigquery_connection: BigQueryTarget, bq: Reader, tmp_path: Path
) -> None:
    load(bigquery_connection, write_export(tmp_path / "first.csv", FIRST), "exec-1")
    bad = [dict(r, clicks="x") for r in SECOND]
    with pytest.raises(TooManyRejects):
        load(bigquery_connection, write_export(tmp_path / "bad.csv", bad), "exec-2")
    assert bq.contents() == expected("TACTIC_PERFORMANCE", FIRST)
    assert [row[0] for row in bq.ledger()] == ["exec-1"]
    assert bq.stage_datasets() == []


def test_a_load_into_a_dataset_that_does_not_exist_says_so(
    bigquery_connection: BigQueryTarget, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=r"dataset .*\.nowhere does not exist: create it"):
        ExecutionCsvToSqlOperator(
            task_id="load",
            sql_conn_id=bigquery_connection.conn_id,
            table=f"nowhere.{TABLE}",
            source=download_xcom(write_export(tmp_path / "first.csv", FIRST), "exec-1"),
        ).execute(context={})


def test_the_sql_is_spelled_for_bigquery() -> None:
    d = BigQueryDialect(None)
    assert d.table_sql(TableName("ds", "t")) == "`ds`.`t`"
    with pytest.raises(ValueError, match="dataset.table"):
        d.table_sql(TableName(None, "t"))
    assert [d.column_type(k) for k in Kind] == ["DATE", "INT64", "NUMERIC(18,2)", "STRING"]
    assert d.type_sql("TIMESTAMP") == "TIMESTAMP" and d.type_sql("BIGINT") == "INT64"
    assert d.typed("`x`", Kind.DATE) == "SAFE_CAST(`x` AS DATE)"
    assert d.typed("`x`", Kind.TEXT) == "`x`"
    assert d.param("TEXT") == "CAST(? AS STRING)"
    assert d.text_param() == "CAST(? AS STRING)"
    assert d.matches_sql("`c`", "[0-9]+") == "REGEXP_CONTAINS(`c`, r'^([0-9]+)$')"
    assert d.growing_key_sql(["a", "b"]) == ""  # BigQuery's keys are NOT ENFORCED: nothing to declare
    assert d.md5_sql(["a", "b"]) == "TO_HEX(MD5(a || CHR(31) || b))"


def request_for(target: BigQueryTarget, path: Path, execution: str, updated: dt.datetime) -> LoadRequest:
    """A load of ``path`` as the loader API takes it, with the execution's time (naive UTC)."""
    schema = export_schema("TACTIC_PERFORMANCE")
    data = path.read_bytes()
    table = TableName(target.dataset, TABLE)
    return LoadRequest(
        path=path,
        source=str(path),
        table=table,
        export=schema,
        key_columns=schema.natural_key,
        execution_id=execution,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        rejects_path=path.with_suffix(".rejects.csv"),
        ledger=table.sibling("abm_load_ledger"),
        execution_time=updated,
    )


def test_an_older_execution_loaded_last_keeps_the_newer_figures(
    bigquery_connection: BigQueryTarget, bq: Reader, tmp_path: Path
) -> None:
    loader = loader_for(sql_hook(bigquery_connection.conn_id, "sql_conn_id"))
    newer = loader.load(
        request_for(
            bigquery_connection,
            write_export(tmp_path / "second.csv", SECOND),
            "exec-2",
            dt.datetime(2026, 10, 6),
        )
    )
    older = loader.load(
        request_for(
            bigquery_connection,
            write_export(tmp_path / "first.csv", FIRST),
            "exec-1",
            dt.datetime(2026, 10, 4),
        )
    )
    overlap = [r for r in FIRST if r["date"] >= "2026-10-02"]
    assert (newer.rows_loaded, older.rows_stale, older.rows_loaded) == (
        len(SECOND),
        len(overlap),
        len(FIRST) - len(overlap),
    )
    assert older.newer_executions == ["exec-2"]
    assert bq.contents() == expected("TACTIC_PERFORMANCE", FIRST, SECOND)


def test_a_ledger_of_an_older_version_gets_its_missing_column(
    bigquery_connection: BigQueryTarget, bq: Reader, tmp_path: Path
) -> None:
    columns = ", ".join(
        f"{name} {BigQueryDialect(None).type_sql(t.split()[0])}" for name, t in LEDGER_COLUMNS[:-1]
    )
    bq.execute(f"CREATE TABLE abm_load_ledger ({columns})")
    load(bigquery_connection, write_export(tmp_path / "first.csv", FIRST), "exec-1")
    # Read by a query: bqemulator's table metadata does not show a column ALTER TABLE added.
    bq.execute("SELECT execution_id, execution_time FROM abm_load_ledger")
    assert bq.fetchall() == [("exec-1", None)]
    assert bq.contents() == expected("TACTIC_PERFORMANCE", FIRST)


def test_two_loads_at_once_stage_apart_and_each_stage_goes_with_its_load(
    bigquery_connection: BigQueryTarget, bq: Reader, tmp_path: Path
) -> None:
    dialect = BigQueryDialect(sql_hook(bigquery_connection.conn_id, "sql_conn_id"))
    requests = [
        request_for(
            bigquery_connection,
            write_export(tmp_path / f"{n}.csv", rows),
            f"exec-{n}",
            dt.datetime(2026, 10, n),
        )
        for n, rows in ((1, FIRST), (2, SECOND[:5]))
    ]
    conns = [dialect.connect() for _ in requests]
    counts = []
    for conn, request in zip(conns, requests, strict=True):
        plan = plan_columns(request, TACTIC_COLUMNS, None)
        cur = dialect.cursor(conn)
        incoming = IncomingFile(request, 0, dialect.log)
        dialect.stage(cur, request, plan, dialect.reason_sql(plan, request.key_columns), incoming)
    for conn in conns:  # both stages exist at once, each with its own file's rows
        cur = dialect.cursor(conn)
        cur.execute("SELECT COUNT(*) FROM _abm_stage")
        counts.append(cur.fetchone())
    assert counts == [(len(FIRST),), (5,)]
    assert len(set(bq.stage_datasets())) == 2
    for conn in conns:
        dialect.close(conn)
    assert bq.stage_datasets() == []


def test_the_generic_path_loads_through_the_session_in_batches_and_a_rerun_is_skipped(
    bigquery_connection: BigQueryTarget, bq: Reader, tmp_path: Path
) -> None:
    """``method="generic"``: rows staged by ``executemany`` into a session temporary table (a job per
    batch), the replace in one transaction opened by its first change (see ``bigquery_session``)."""
    staged = bq.stage_inserts()
    first = load(bigquery_connection, write_export(tmp_path / "first.csv", FIRST), "exec-1", method="generic")
    assert (first["rows_loaded"], first["method"]) == (len(FIRST), "generic_executemany")
    assert bq.stage_inserts() == staged + 1  # one job for the file's rows, not one per row
    second = load(
        bigquery_connection, write_export(tmp_path / "second.csv", SECOND), "exec-2", method="generic"
    )
    restated = [r for r in FIRST if r["date"] >= "2026-10-02"]
    assert (second["rows_loaded"], second["rows_replaced"]) == (len(SECOND), len(restated))
    want = expected("TACTIC_PERFORMANCE", FIRST, SECOND)
    assert bq.contents() == want

    again = load(bigquery_connection, tmp_path / "second.csv", "exec-2", method="generic")
    assert again["skipped"] is True
    assert bq.contents() == want
    assert bq.ledger() == [
        ("exec-1", len(FIRST), 0, 0, "generic_executemany"),
        ("exec-2", len(SECOND), len(restated), 0, "generic_executemany"),
    ]


def test_the_generic_path_sets_bad_records_aside_before_staging(
    bigquery_connection: BigQueryTarget, bq: Reader, tmp_path: Path
) -> None:
    lines = [csv_record(FIRST[0]), csv_record(FIRST[1], clicks="12x"), csv_record(FIRST[2], spend="")]
    path = tmp_path / "bad.csv"
    path.write_text("\n".join([",".join(TACTIC_COLUMNS), *lines]) + "\n", encoding="utf-8")
    out = load(bigquery_connection, path, "exec-1", method="generic", max_rejected=1)
    rejects = {int(r["record"]): r["reason"] for r in read_rejects(Path(out["rejects_path"]))}
    assert rejects == {2: "column clicks: expected an integer, got 12x"}
    assert bq.contents() == expected("TACTIC_PERFORMANCE", [FIRST[0], dict(FIRST[2], spend="")])


def test_the_generic_path_on_a_bigquery_hook_quotes_and_spells_types_as_bigquery(
    bigquery_connection: BigQueryTarget,
) -> None:
    """BigQuery reads ``"x"`` as a string and has no ``TEXT``: the hook says how it quotes and names."""
    dialect = dialect_for(sql_hook(bigquery_connection.conn_id, "sql_conn_id"), native=False)
    assert dialect.name == "generic"
    assert dialect.table_sql(TableName("ds", "t")) == "`ds`.`t`"
    assert [dialect.column_type(k) for k in Kind] == ["DATE", "BIGINT", "DECIMAL(18,2)", "STRING"]
    assert (dialect.text_sql(), dialect.text_sql(64), dialect.text_param()) == (
        "STRING",
        "STRING(64)",
        "CAST(? AS STRING)",
    )


def test_an_export_of_several_numbered_files_is_staged_whole(
    bigquery_connection: BigQueryTarget, bq: Reader, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file per million records; here per five, so twelve records make three load jobs."""
    from abm_provider.warehouse.dialects import bigquery

    monkeypatch.setattr(
        bigquery, "write_numbered", functools.partial(bigquery.write_numbered, rows_per_file=5)
    )
    out = load(bigquery_connection, write_export(tmp_path / "first.csv", FIRST), "exec-1")
    assert (out["rows_loaded"], out["method"]) == (len(FIRST), "bigquery_load_job")
    assert bq.contents() == expected("TACTIC_PERFORMANCE", FIRST)
