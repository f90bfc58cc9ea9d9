"""Loads that end in commit order, not data order: an older execution never replaces a newer one's rows.

Two loads of one table (a backfill, a manual run, ``max_active_runs > 1``) take turns on the table's
lock, so the older execution may commit last. Under the lock, :meth:`.flow.WarehouseLoader._replace`
asks :func:`newer_execution` whether the ledger knows a newer execution of the table (one small
query; usually none, and the load goes on as it always did). When it does, the loader deletes only
the restated rows no newer execution wrote, finds here the rows it must keep (:func:`stale_rows`),
inserts only the file's rows whose key is then free, and :func:`report_older` says what was kept
(``LoadResult.rows_stale``, ``newer_executions``) in a warning. This module reads and reports; the
loader writes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from abm_provider.warehouse import ledger
from abm_provider.warehouse.schema import EXECUTION_ID_COLUMN, STAGE_TABLE
from abm_provider.warehouse.sql import match_sql

if TYPE_CHECKING:
    from abm_provider.warehouse.checks import ColumnPlan
    from abm_provider.warehouse.dialects.base import Dialect
    from abm_provider.warehouse.load import LoadRequest, LoadResult


def newer_execution(
    d: Dialect, cur: Any, request: LoadRequest, params: Sequence[Any]
) -> tuple[str, Any] | None:
    """The newest execution in the table newer than this one (id, time), or ``None``.

    Called under the lock, after the ledger has its ``execution_time`` column, with the ledger's
    newer-execution parameters (``WarehouseLoader.newer_params``). A load that does not know its
    execution's time asks nothing and replaces, as before.
    """
    if request.execution_time is None:
        return None
    cur.execute(ledger.newer_sql(d, request.ledger), list(params))
    row = cur.fetchone()
    return (str(row[0]), row[1]) if row is not None else None


def report_older(
    log: logging.Logger,
    request: LoadRequest,
    result: LoadResult,
    newer: tuple[str, Any],
    kept: dict[str, int],
    days: str,
) -> None:
    """Note in ``result`` and the log the rows kept for newer executions (:func:`stale_rows`)."""
    result.rows_stale = sum(kept.values())
    if not result.rows_stale:
        log.info(
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
    log.warning(
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


def stale_rows(d: Dialect, cur: Any, request: LoadRequest, plan: ColumnPlan) -> tuple[dict[str, int], str]:
    """Per newer execution, the table's rows whose key the file holds (the loader's delete with
    ``keep_newer`` left only those), and the days they cover for the warning (when ``date`` is a key
    column)."""
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
