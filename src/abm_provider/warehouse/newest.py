"""Loads that end in commit order, not data order: an older execution never replaces a newer one's rows.

Two loads of one table (a backfill, a manual run, ``max_active_runs > 1``) take turns on the table's
lock, so the older execution may commit last. Under the lock, :meth:`.flow.WarehouseLoader._replace`
asks :func:`newer_execution` whether the ledger knows a newer execution of the table (one small
query; usually none, and the load goes on as it always did). When it does, :func:`replace_older`
deletes only the restated rows no newer execution wrote, inserts only the file's rows whose key is
then free, and reports the rest (``LoadResult.rows_stale``, ``newer_executions``) in a warning.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from abm_provider.warehouse import ledger
from abm_provider.warehouse.schema import EXECUTION_ID_COLUMN
from abm_provider.warehouse.sql import STAGE_TABLE, match_sql

if TYPE_CHECKING:
    from abm_provider.warehouse.checks import ColumnPlan
    from abm_provider.warehouse.flow import WarehouseLoader
from abm_provider.warehouse.load import LoadRequest, LoadResult


def newer_execution(loader: WarehouseLoader, cur: Any, request: LoadRequest) -> tuple[str, Any] | None:
    """The newest execution in the table newer than this one (id, time), or ``None``.

    Called under the lock, after the ledger has its ``execution_time`` column. A load that does
    not know its execution's time asks nothing and replaces, as before.
    """
    if request.execution_time is None:
        return None
    cur.execute(ledger.newer_sql(loader.dialect, request.ledger), loader.newer_params(request))
    row = cur.fetchone()
    return (str(row[0]), row[1]) if row is not None else None


def replace_older(
    loader: WarehouseLoader,
    cur: Any,
    request: LoadRequest,
    plan: ColumnPlan,
    loaded_at: dt.datetime,
    result: LoadResult,
    newer: tuple[str, Any],
) -> None:
    """The replace step of an execution older than one in the table: the newer figures stay.

    It deletes only the restated rows no newer execution wrote, then inserts only the staged
    rows whose key is free: after that delete, a key still in the table is a newer execution's.
    """
    result.rows_deleted = loader.delete_replaced(cur, request, plan, keep_newer=True)
    kept, days = _stale_rows(loader, cur, request, plan)
    result.rows_loaded = loader.insert_new(cur, request, plan, loaded_at, keep_newer=True)
    result.rows_stale = sum(kept.values())
    if not result.rows_stale:
        loader.log.info(
            "Execution %s is older than execution %s (updated %s), which is in %s, but restates none "
            "of its keys; loaded as usual",
            request.execution_id,
            newer[0],
            newer[1],
            request.table,
        )
        return
    ranked = sorted(kept, key=lambda e: (-kept[e], e))
    result.newer_executions = ranked[: ledger.NEWER_SHOWN]
    more = f" and {len(ranked) - ledger.NEWER_SHOWN} more" if len(ranked) > ledger.NEWER_SHOWN else ""
    loader.log.warning(
        "Execution %s (updated %s) is older than execution(s) %s%s already in %s (newest updated %s): "
        "kept their figures for %d row(s)%s of %s and did not load them; loaded %d row(s) for keys no "
        "newer execution covers.",
        request.execution_id,
        request.execution_time,
        ", ".join(result.newer_executions),
        more,
        request.table,
        newer[1],
        result.rows_stale,
        days,
        request.path.name,
        result.rows_loaded,
    )


def _stale_rows(
    loader: WarehouseLoader, cur: Any, request: LoadRequest, plan: ColumnPlan
) -> tuple[dict[str, int], str]:
    """Per newer execution, the table's rows whose key the file holds (``delete_replaced`` left
    only those), and the days they cover for the warning (when ``date`` is a key column)."""
    d = loader.dialect
    day = d.quote("date") if "date" in request.key_columns else None
    match = match_sql(d, request, plan, "h", "s")
    writer = f"h.{d.quote(EXECUTION_ID_COLUMN)}"
    group = f"{writer}, h.{day}" if day else writer
    cur.execute(
        f"SELECT {group}, COUNT(*) FROM {d.table_sql(request.table)} h WHERE EXISTS "
        f"(SELECT 1 FROM {STAGE_TABLE} s WHERE s._reason IS NULL AND {match}) GROUP BY {group}"
    )
    rows = cur.fetchall()
    kept: dict[str, int] = {}
    for row in rows:
        kept[str(row[0])] = kept.get(str(row[0]), 0) + int(row[-1])
    if not (day and rows):
        return kept, ""
    dates = sorted({str(row[1]) for row in rows})
    span = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    return kept, f" over {len(dates)} day(s) ({span})"
