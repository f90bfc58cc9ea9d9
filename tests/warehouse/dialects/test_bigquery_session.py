"""``abm_provider.warehouse.dialects.bigquery_session`` on bqemulator: one BigQuery session as a DB-API
connection, whose transaction spans query jobs; read back with the client, outside the session."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from google.cloud import bigquery

from abm_provider.warehouse.dialects import bigquery_session
from abm_provider.warehouse.dialects.bigquery_session import SessionConnection, is_ddl, query_parameter
from support.cloud_warehouses import BigQueryTarget


@pytest.fixture
def session(bigquery_connection: BigQueryTarget) -> Iterator[SessionConnection]:
    """A session connection on the emulator, with the test's dataset created and as default dataset."""
    client = bigquery_connection.client()
    client.create_dataset(bigquery_connection.dataset)
    conn = SessionConnection(bigquery_connection.client())
    conn.default_dataset = f"{client.project}.{bigquery_connection.dataset}"
    cur = conn.cursor()
    cur.execute("CREATE TABLE t (name STRING, n INT64)")
    yield conn
    conn.close()


def outside(target: BigQueryTarget, sql: str) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` run by a client of its own, outside the session."""
    client = target.client()
    config = bigquery.QueryJobConfig(default_dataset=f"{client.project}.{target.dataset}")
    return [tuple(row.values()) for row in client.query(sql, job_config=config).result()]


def test_a_transaction_spans_jobs_of_the_session_and_commits_once(
    session: SessionConnection, bigquery_connection: BigQueryTarget
) -> None:
    cur = session.cursor()
    cur.execute("BEGIN TRANSACTION")
    cur.execute("INSERT INTO t (name, n) VALUES (?, ?), (?, ?)", ["a", 1, "b", 2])
    assert cur.rowcount == 2
    cur.execute("UPDATE t SET n = n + 10 WHERE name = ?", ["b"])
    assert cur.rowcount == 1
    session.commit()
    assert sorted(outside(bigquery_connection, "SELECT name, n FROM t")) == [("a", 1), ("b", 12)]
    assert session.session_id is not None


def test_a_rollback_undoes_every_job_of_the_transaction(
    session: SessionConnection, bigquery_connection: BigQueryTarget
) -> None:
    cur = session.cursor()
    cur.execute("INSERT INTO t (name, n) VALUES ('kept', 1)")  # outside a transaction: committed alone
    session.begin()
    cur.execute("DELETE FROM t WHERE TRUE")
    cur.execute("INSERT INTO t (name, n) VALUES ('gone', 2)")
    session.rollback()
    assert outside(bigquery_connection, "SELECT name FROM t") == [("kept",)]
    session.rollback()  # nothing open: nothing to do


def test_ddl_in_a_transaction_commits_what_came_before_and_opens_a_new_one(
    session: SessionConnection, bigquery_connection: BigQueryTarget
) -> None:
    cur = session.cursor()
    session.begin()
    cur.execute("INSERT INTO t (name, n) VALUES ('before', 1)")
    cur.execute("ALTER TABLE t ADD COLUMN note STRING")
    assert session.in_transaction
    cur.execute("INSERT INTO t (name, n, note) VALUES ('after', 2, 'x')")
    session.rollback()
    assert outside(bigquery_connection, "SELECT name, note FROM t") == [("before", None)]


def test_values_are_bound_with_their_types_and_rows_read_back(session: SessionConnection) -> None:
    cur = session.cursor()
    at = dt.datetime(2026, 11, 1, 12, 30, 5, 123456)  # naive: UTC
    cur.execute(
        "SELECT ? AS s, ? AS i, ? AS d, ? AS day, ? AS at, CAST(? AS DATE) IS NULL AS nothing",
        ["x", 7, Decimal("12.50"), dt.date(2026, 11, 1), at, None],
    )
    assert [column[:2] for column in cur.description or ()] == [
        ("s", "STRING"),
        ("i", "INTEGER"),
        ("d", "NUMERIC"),
        ("day", "DATE"),
        ("at", "TIMESTAMP"),
        ("nothing", "BOOLEAN"),
    ]
    row = cur.fetchone()
    assert row is not None
    assert row[:4] == ("x", 7, Decimal("12.50"), dt.date(2026, 11, 1))
    assert row[4] == at.replace(tzinfo=dt.UTC) and row[5] is True
    assert cur.fetchone() is None


def test_a_closed_connection_refuses_statements(bigquery_connection: BigQueryTarget) -> None:
    conn = SessionConnection(bigquery_connection.client())
    conn.cursor().execute("SELECT 1")
    conn.close()
    conn.close()  # twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        conn.cursor().execute("SELECT 1")


def test_ddl_is_told_from_other_statements() -> None:
    assert is_ddl("CREATE TABLE IF NOT EXISTS `d`.`t` (a STRING)")
    assert is_ddl("  -- why\n alter table t add column c STRING")
    assert is_ddl("/* x */ DROP TABLE t")
    assert not is_ddl("CREATE TEMP TABLE s AS SELECT 1 AS a")
    assert not is_ddl("CREATE OR REPLACE TEMPORARY TABLE s (a INT64)")
    assert not is_ddl("INSERT INTO created (a) VALUES (1)")
    assert not is_ddl("SELECT 'CREATE TABLE'")


def test_each_python_value_binds_as_its_bigquery_type() -> None:
    types: dict[str, list[Any]] = {
        "STRING": ["x", None],
        "INT64": [3],
        "BOOL": [True],
        "NUMERIC": [Decimal("1.5")],
        "DATE": [dt.date(2026, 1, 1)],
        "TIMESTAMP": [dt.datetime(2026, 1, 1), dt.datetime(2026, 1, 1, tzinfo=dt.UTC)],
    }
    for wanted, values in types.items():
        for value in values:
            parameter = query_parameter(value)
            assert (parameter.name, parameter.type_, parameter.value) == (None, wanted, value)
    typed = bigquery.ScalarQueryParameter(None, "DATE", None)
    assert query_parameter(typed) is typed
    with pytest.raises(TypeError, match="no BigQuery parameter type for object"):
        query_parameter(object())


def sent_queries(conn: SessionConnection, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The text of every query job ``conn`` sends from now on, in order."""
    sent: list[str] = []
    query = conn.client.query

    def counting(sql: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(sql)
        return query(sql, *args, **kwargs)

    monkeypatch.setattr(conn.client, "query", counting)
    return sent


def test_executemany_inserts_a_batch_of_rows_per_job_with_nulls_typed_as_their_columns(
    session: SessionConnection, bigquery_connection: BigQueryTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    cur = session.cursor()
    rows: list[list[Any]] = [[f"r{i}", None if i % 7 == 0 else i] for i in range(2500)]
    sent = sent_queries(session, monkeypatch)
    cur.executemany("INSERT INTO t (name, n) VALUES (?, ?)", rows)
    assert cur.rowcount == 2500
    # One query for the columns' types, one for the rows: not one per row.
    assert len(sent) == 2 and "UNNEST(?)" in sent[1]
    got = outside(bigquery_connection, "SELECT name, n FROM t")
    assert sorted(got, key=lambda r: int(r[0][1:])) == [tuple(r) for r in rows]


def test_executemany_splits_rows_that_would_pass_a_job_s_limits(
    session: SessionConnection, bigquery_connection: BigQueryTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    cur = session.cursor()
    monkeypatch.setattr(bigquery_session, "BATCH_BYTES", 10 * (2 * bigquery_session._VALUE_OVERHEAD + 3))
    sent = sent_queries(session, monkeypatch)
    cur.executemany("INSERT INTO t (name, n) VALUES (?, ?)", [[f"{i:02}", i] for i in range(25)])
    assert (cur.rowcount, len(sent)) == (25, 1 + 3)  # the types, then 10 + 10 + 5 rows
    # Markers inside expressions: a VALUES list, of at most MAX_QUERY_PARAMETERS markers per job.
    monkeypatch.setattr(bigquery_session, "MAX_QUERY_PARAMETERS", 10)
    sent.clear()
    cur.executemany("INSERT INTO t (name, n) VALUES (CONCAT('x', ?), ?)", [[f"{i:02}", i] for i in range(12)])
    assert (cur.rowcount, len(sent)) == (12, 3)  # 5 + 5 + 2 rows
    assert sent[0].count("(CONCAT('x', ?), ?)") == 5
    assert outside(bigquery_connection, "SELECT COUNT(*), COUNT(DISTINCT name) FROM t") == [(37, 37)]


def test_executemany_of_another_statement_runs_it_once_per_row(
    session: SessionConnection, bigquery_connection: BigQueryTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    cur = session.cursor()
    cur.execute("INSERT INTO t (name, n) VALUES ('a', 1), ('b', 2)")
    sent = sent_queries(session, monkeypatch)
    cur.executemany("UPDATE t SET n = n + ? WHERE name = ?", [[10, "a"], [20, "b"]])
    assert (cur.rowcount, len(sent)) == (2, 2)
    cur.executemany("INSERT INTO t (name, n) VALUES (?, ?)", [])
    assert (cur.rowcount, len(sent)) == (0, 2)  # nothing to insert: no job
    assert sorted(outside(bigquery_connection, "SELECT name, n FROM t")) == [("a", 11), ("b", 22)]


def test_a_db_api_connection_opens_a_transaction_at_its_first_change_to_a_table(
    bigquery_connection: BigQueryTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Probes and rows into the session's temporary tables run outside it: a failed statement rolls a
    BigQuery transaction back whole. What BigQuery has no form of is refused without a job."""
    client = bigquery_connection.client()
    client.create_dataset(bigquery_connection.dataset)
    dataset = f"{client.project}.{bigquery_connection.dataset}"
    conn = SessionConnection(bigquery_connection.client(), implicit_transactions=True)
    cur = conn.cursor()
    cur.execute(f"CREATE TABLE `{dataset}.t` (name STRING)")
    cur.execute(f"CREATE TEMP TABLE _s{bigquery_connection.dataset} (name STRING)")
    cur.execute(f"INSERT INTO _s{bigquery_connection.dataset} (name) VALUES ('staged')")
    with pytest.raises(Exception, match="nowhere"):
        cur.execute(f"SELECT * FROM `{dataset}.nowhere`")
    assert not conn.in_transaction
    sent = sent_queries(conn, monkeypatch)
    for statement in (
        "SAVEPOINT p",
        "RELEASE SAVEPOINT p",
        "ROLLBACK TO SAVEPOINT p",
        "CREATE UNIQUE INDEX i ON t (a)",
    ):
        with pytest.raises(bigquery_session.NotSupportedError):
            cur.execute(statement)
    assert sent == []
    cur.execute(f"INSERT INTO `{dataset}`.t (name) SELECT name FROM _s{bigquery_connection.dataset}")
    assert conn.in_transaction and sent[0] == "BEGIN TRANSACTION"
    conn.rollback()
    cur.execute(f"INSERT INTO `{dataset}.t` (name) VALUES ('kept')")
    conn.commit()
    conn.close()
    assert outside(bigquery_connection, "SELECT name FROM t") == [("kept",)]


def test_rows_are_batched_by_count_and_by_the_size_of_their_values() -> None:
    overhead = bigquery_session._VALUE_OVERHEAD
    rows: list[list[Any]] = [["x" * 10, 1]] * 7
    assert [len(b) for b in bigquery_session._batches(rows, 3, 10**9)] == [3, 3, 1]
    per_row = 2 * overhead + 11
    assert [len(b) for b in bigquery_session._batches(rows, 100, 2 * per_row)] == [2, 2, 2, 1]
    assert [len(b) for b in bigquery_session._batches([["y" * 100]], 100, 1)] == [1]  # one row at least
