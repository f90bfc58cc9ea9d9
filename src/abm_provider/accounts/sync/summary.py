"""What a sync run returns: its counts, read back from its row in the runs table, and the drift check.

The summary is read from the runs table rather than added up in memory, so a run resumed after a
crash or a retry reports the whole run, not only its last try. It holds counts and flags only, never
an account, because it goes to XCom and the log.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.sync.guards import check_plan
from abm_provider.accounts.sync.state import BLOCKED, DRY_RUN
from abm_provider.accounts.sync.statements import runs as statements
from abm_provider.exceptions import AbmApiError

if TYPE_CHECKING:
    from abm_provider.accounts.sync.database import StateDatabase
    from abm_provider.accounts.sync.options import SyncOptions
    from abm_provider.accounts.sync.state import StateTables
    from abm_provider.hooks.abm import AbmHook

#: The keys of the summary a sync returns; every one is a count or a flag, never an account.
SUMMARY_KEYS: tuple[str, ...] = (
    "to_add",
    "to_remove",
    "added",
    "removed",
    "duplicates",
    "not_found",
    "rejected",
    "dry_run",
)
#: The counts of the summary, each a column of the runs table of the same name.
_COUNTS = tuple(key for key in SUMMARY_KEYS if key != "dry_run")


def read_summary(
    db: StateDatabase,
    tables: StateTables,
    options: SyncOptions,
    *,
    count_members: bool = True,
    state_count: int | None = None,
) -> dict[str, Any]:
    """The run's counts from its row in the runs table (cumulative over the run's tries).

    ``held`` counts the rows refused in an earlier run with the same values, so skipped. ``run_id``
    finds the run's rows in the run log. ``guard`` names the guard a dry run's plan would trip (or
    that stopped the run), else ``None``: what an approval step reads. Both it and ``state_count``
    need the list's members: counted here, or given as ``state_count`` by a caller that counted
    several lists at once (:func:`member_counts`); ``count_members=False`` leaves both out (for the
    plan's log line).
    """
    columns = (*_COUNTS, "status", "held", "source_rows")
    row = db.rows(statements.run_row(db.state_sql(tables), options.list_id, options.run_id, columns))
    *counts, status, held, source_rows = row[0]
    summary: dict[str, Any] = {name: int(count) for name, count in zip(_COUNTS, counts, strict=True)}
    summary["dry_run"] = status == DRY_RUN
    summary["held"] = int(held)
    summary["source_rows"] = int(source_rows)
    summary["list_id"] = options.list_id
    summary["mode"] = options.mode
    summary["run_id"] = options.run_id
    if not count_members:
        return summary
    summary["state_count"] = member_count(db, tables, options.list_id) if state_count is None else state_count
    tripped = None
    if status in (DRY_RUN, BLOCKED):
        tripped = check_plan(options, summary["source_rows"], summary["to_remove"], summary["state_count"])
    summary["guard"] = None if tripped is None else tripped.guard
    return summary


def member_count(db: StateDatabase, tables: StateTables, list_id: str) -> int:
    """How many accounts the list holds by our record."""
    return member_counts(db, tables, [list_id])[list_id]


def member_counts(db: StateDatabase, tables: StateTables, list_ids: Sequence[str]) -> dict[str, int]:
    """How many accounts each of ``list_ids`` holds by our record (0 for none), in one statement: a
    programme's summary counts all of its lists with one pass over the members table."""
    found = dict(db.rows(statements.member_counts(db.state_sql(tables), list_ids)))
    return {list_id: int(found.get(list_id) or 0) for list_id in list_ids}


def check_drift(hook: AbmHook, summary: dict[str, Any], list_id: str, log: logging.Logger | Any) -> None:
    """Warn when the service's ``estimatedAccountsCount`` differs from the state's count.

    Adds ``service_count`` to ``summary``. A failed read only skips the check: the sync itself is
    done and recorded by then, and failing the task would have its retry send nothing new.
    """
    check_drifts(hook, [(list_id, summary)], log)


def check_drifts(
    hook: AbmHook, summaries: Sequence[tuple[str, dict[str, Any]]], log: logging.Logger | Any
) -> None:
    """:func:`check_drift` for several lists (``(list id, summary)`` pairs), reading the service's
    listing once for all of them."""
    wanted = {list_id for list_id, _ in summaries}
    counts: dict[str, int] = {}
    try:
        for item in hook.iter_account_lists():
            list_id = str(item.get("id"))
            if list_id in wanted:
                counts[list_id] = int(str(item.get("estimatedAccountsCount", "0")) or 0)
                if len(counts) == len(wanted):
                    break
    except (AbmApiError, ValueError) as err:
        log.warning("Drift check skipped: could not read the list's account count: %s", err)
        return
    for list_id, summary in summaries:
        _compare_counts(summary, counts.get(list_id), list_id, log)


def _compare_counts(
    summary: dict[str, Any], service_count: int | None, list_id: str, log: logging.Logger | Any
) -> None:
    """Set ``service_count`` in ``summary`` and say whether it agrees with the state's count."""
    summary["service_count"] = service_count
    if service_count is None:
        log.warning("Drift check: list %s was not found among the account lists", list_id)
    elif service_count != summary["state_count"]:
        log.warning(
            "Drift: the service estimates %d accounts on list %s, the state records %d. The list may "
            "have been changed outside this sync, or the estimate lags; accounts the state does not "
            "know about are never removed by mirror mode.",
            service_count,
            list_id,
            summary["state_count"],
        )
    else:
        log.info("Drift check: the service and the state agree on %d accounts", service_count)
