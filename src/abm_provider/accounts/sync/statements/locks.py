"""Statements of the lock rows: a sync's one run per list where the database has no session lock.

A run takes its list's lock by writing a row of ``<prefix>locks`` in a transaction that first deletes
the list's row if it is stale or its own (a retry of the same run), then inserts its row unless
another is there. A second run's transaction on the same table waits for the first to commit
(Snowflake) or is aborted (BigQuery), so of two runs at once one finds the other's row. The row names
its run; the holder refreshes ``heartbeat_at`` as it goes, and a row not refreshed for
:data:`~abm_provider.accounts.sync.database.LOCK_ROW_STALE_AFTER` is a run that died, which the next
run takes over. Every value is bound; the table's name is the dialect's quoted SQL.
"""

from __future__ import annotations

from datetime import datetime

from abm_provider.accounts.sync.statements.binding import Sql, sql, text


def _at(timestamp_type: str, when: datetime) -> Sql:
    return sql("CAST({when} AS {type})", when=when, type=text(timestamp_type))


def clear(table: str, key: str, run_id: str, stale_before: datetime, timestamp_type: str) -> Sql:
    """Delete the list's row when it is stale, or this run's own from an earlier try."""
    return sql(
        "DELETE FROM {table} WHERE lock_key = {key} AND (heartbeat_at < {stale} OR run_id = {run_id})",
        table=text(table),
        key=key,
        stale=_at(timestamp_type, stale_before),
        run_id=run_id,
    )


def take(table: str, key: str, run_id: str, now: datetime, timestamp_type: str) -> Sql:
    """Insert this run's row unless the list has one (a derived table: BigQuery has no ``WHERE``
    without ``FROM``)."""
    return sql(
        "INSERT INTO {table} (lock_key, run_id, taken_at, heartbeat_at) "
        "SELECT n.lock_key, n.run_id, n.at, n.at FROM (SELECT {key} AS lock_key, {run_id} AS run_id, "
        "{now} AS at) n WHERE NOT EXISTS (SELECT 1 FROM {table} h WHERE h.lock_key = {key})",
        table=text(table),
        key=key,
        run_id=run_id,
        now=_at(timestamp_type, now),
    )


def holders(table: str, key: str) -> Sql:
    """``(run_id, taken_at)`` of the list's rows, oldest first (one, unless the database let two in)."""
    return sql(
        "SELECT run_id, taken_at FROM {table} WHERE lock_key = {key} ORDER BY taken_at, run_id",
        table=text(table),
        key=key,
    )


def beat(table: str, key: str, run_id: str, now: datetime, timestamp_type: str) -> Sql:
    """Refresh this run's row: it is alive."""
    return sql(
        "UPDATE {table} SET heartbeat_at = {now} WHERE lock_key = {key} AND run_id = {run_id}",
        table=text(table),
        now=_at(timestamp_type, now),
        key=key,
        run_id=run_id,
    )


def release(table: str, key: str, run_id: str) -> Sql:
    """Delete this run's row."""
    return sql(
        "DELETE FROM {table} WHERE lock_key = {key} AND run_id = {run_id}",
        table=text(table),
        key=key,
        run_id=run_id,
    )
