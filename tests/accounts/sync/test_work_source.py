"""``StateQuerySource``: rows of a work table on the state connection, read in place with the record
numbers they had in the user's source; on DuckDB, PostgreSQL and MariaDB."""

from __future__ import annotations

from contextlib import closing

from sync_support import CONN_ID

from abm_provider.accounts.sync.database import StateDatabase
from abm_provider.accounts.sync.statements.staging import RECORD
from abm_provider.accounts.sync.work_source import StateQuerySource
from abm_provider.warehouse.connections import sql_hook
from support.warehouses import Warehouse


def test_rows_are_read_page_by_page_on_the_state_connection_with_their_record_numbers(
    warehouse: Warehouse,
) -> None:
    with closing(StateDatabase(sql_hook(CONN_ID, "state_conn_id"))) as db:
        dialect = db.dialect
        kind = "TEMPORARY TABLE" if dialect.capabilities.temporary_tables else "TABLE"
        db.execute(f"CREATE {kind} rows_w ({RECORD} BIGINT, c1 {dialect.text_sql(255)})")
        # Records 3, 5, ... 21 of a source: every other row went to another list.
        db.stage("rows_w", [RECORD, "c1"], [(n, f"a{n}") for n in range(3, 23, 2)])
        named = dialect.quote("Account Id")
        relation = f"SELECT {RECORD}, c1 AS {named} FROM rows_w WHERE {RECORD} > 4"
        source = StateQuerySource(db, relation, ["Account Id"], page=3, rows=9)

        query = source.query_on("any", dialect)
        assert query is not None and query.numbered and query.is_table and query.text == relation
        assert query.rows == 9  # counted by the caller: the stager does not count again
        with source.open() as opened:
            assert opened.columns == ["Account Id"]
            rows = list(opened.rows)
    assert [r.row_number for r in rows] == list(range(5, 23, 2))
    assert [r.data for r in rows] == [{"Account Id": f"a{n}"} for n in range(5, 23, 2)]
