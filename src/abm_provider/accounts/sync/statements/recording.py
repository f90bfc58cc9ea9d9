"""Statements that record what the service answered (:mod:`~abm_provider.accounts.sync.recording` runs them):
members added and removed from the plan's rows, rejects, the run log, the run's progress, and the
log's trimming.

Most rows of a group of batches share their outcome, so they are written from the plan table by
``INSERT ... SELECT`` over a range of plan numbers (``p.seq``), less the few ``exceptions`` whose
outcome differs; those few are bound row by row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from abm_provider.accounts.sync.state import DONE, LOG_COLUMNS, REJECTS_COLUMNS, RUN_COUNTS, check_run_counts
from abm_provider.accounts.sync.statements.binding import (
    Sql,
    join,
    row_values,
    sql,
    text,
    text_value,
    values,
)
from abm_provider.accounts.sync.statements.runs import of_run, plan_range
from abm_provider.common.arguments import check_choice

if TYPE_CHECKING:
    from datetime import datetime

    from abm_provider.accounts.sync.statements.tables import StateSql

#: The rejects table's columns a reject of the service's answer is written with, in order: it has no
#: source record or line.
REJECT_COLUMNS = tuple(c for c in REJECTS_COLUMNS if c not in ("record", "line"))


def other_than(seqs: Iterable[int]) -> Sql:
    """A condition on plan row ``p`` (starting with ``AND``) leaving out the rows numbered ``seqs``."""
    listed = sorted(seqs)
    return text(f" AND p.seq NOT IN ({', '.join(str(int(seq)) for seq in listed)})") if listed else Sql()


def _checked(action: str) -> str:
    """A plan's action, checked before it is written into the text."""
    return check_choice(action, "action", ("add", "remove"))


def _literal(action: str) -> Sql:
    """A plan action written into the text, so the planner knows which rows a statement picks."""
    return text(f"'{_checked(action)}'")


def _plan_rows(list_id: str, run_id: str, action: str, first: int, last: int, *, bound: bool = False) -> Sql:
    """A condition on plan row ``p``: of this run's ``action``, numbered ``first`` to ``last``.

    The action is written as a literal (the planner then knows which rows it picks), or ``bound``.
    """
    return plan_range(list_id, run_id, action if bound else _literal(action), first, last, row="p.")


def delete_replaced_not_found(
    state: StateSql, list_id: str, run_id: str, not_found: str, first: int, last: int
) -> Sql:
    """Delete the not-found rejects of earlier runs for the values of plan additions ``first`` to
    ``last``: those accounts were just sent again."""
    return state.sql(
        "DELETE FROM {rejects} WHERE list_id = {list_id} AND action = {not_found} AND run_id <> {run_id} "
        "AND row_hash IN (SELECT p.row_hash FROM {plan} p WHERE {rows})",
        list_id=list_id,
        not_found=not_found,
        run_id=run_id,
        rows=_plan_rows(list_id, run_id, "add", first, last),
    )


def _insert_each_row(table: Sql, columns: Sequence[str]) -> Sql:
    """One row of ``table``, run for each row of the values of ``columns``."""
    return sql(
        "INSERT INTO {table} ({columns}) VALUES ({values})",
        table=table,
        columns=text(", ".join(columns)),
        values=row_values(len(columns)),
    )


def insert_reject(state: StateSql) -> Sql:
    """One reject, run for each row of :data:`REJECT_COLUMNS`' values."""
    return _insert_each_row(state.rejects, REJECT_COLUMNS)


def insert_members(
    state: StateSql,
    list_id: str,
    run_id: str,
    first: int,
    last: int,
    synced_at: datetime,
    except_these: Sql,
    *,
    new_only: bool,
) -> Sql:
    """Record plan additions ``first`` to ``last`` as members, less ``except_these``; with ``new_only``,
    less those already members (a full resync plans members too)."""
    insert = state.sql(
        "INSERT INTO {members} (list_id, account_id, crm_org_id, crm_type, account_name, row_hash, run_id, "
        "synced_at) SELECT p.list_id, p.account_id, p.crm_org_id, p.crm_type, p.account_name, p.row_hash, "
        "p.run_id, {synced_at} FROM {plan} p WHERE {rows}",
        synced_at=synced_at,
        rows=_plan_rows(list_id, run_id, "add", first, last),
    )
    if new_only:
        insert += state.sql(
            " AND NOT EXISTS (SELECT 1 FROM {members} m WHERE m.list_id = p.list_id "
            "AND m.account_id = p.account_id AND m.crm_org_id = p.crm_org_id)"
        )
    return insert + except_these


def delete_members(
    state: StateSql, list_id: str, run_id: str, action: str, first: int, last: int, also: Sql
) -> Sql:
    """Delete the list's members that plan rows ``first`` to ``last`` of ``action`` name and that pass
    ``also`` (a condition on plan row ``p`` starting with ``AND``).

    By a join with the plan where the dialect declares ``delete_using_join`` (the server starts from
    the few plan rows), else by ``EXISTS``.
    """
    # The members table goes by an alias: BigQuery names a column by its table's last part, never by
    # its dataset-qualified name.
    listed = sql("m.list_id = {list_id}", list_id=list_id)
    match = (
        sql(
            "p.list_id = m.list_id AND p.run_id = {run_id} AND p.action = {action} "
            "AND p.seq BETWEEN {first} AND {last} AND p.account_id = m.account_id "
            "AND p.crm_org_id = m.crm_org_id",
            run_id=run_id,
            action=_literal(action),
            first=first,
            last=last,
        )
        + also
    )
    if state.dialect.capabilities.delete_using_join:
        form = "DELETE m FROM {members} m JOIN {plan} p ON {listed} AND {match}"
    else:
        form = "DELETE FROM {members} AS m WHERE {listed} AND EXISTS (SELECT 1 FROM {plan} p WHERE {match})"
    return state.sql(form, listed=listed, match=match)


def rejected_in_run(state: StateSql) -> Sql:
    """A condition on plan row ``p`` (starting with ``AND``): its values were refused in its own run."""
    return state.sql(
        " AND EXISTS (SELECT 1 FROM {rejects} r WHERE r.list_id = p.list_id AND r.run_id = p.run_id "
        "AND r.row_hash = p.row_hash)"
    )


def log_from_plan(
    state: StateSql,
    list_id: str,
    run_id: str,
    action: str,
    first: int,
    last: int,
    except_these: Sql,
    outcome: str,
    reason: str | None,
    logged_at: datetime,
) -> Sql:
    """Log plan rows ``first`` to ``last`` of ``action`` with one outcome, less ``except_these``."""
    return (
        state.sql(
            "INSERT INTO {log} ({columns}) SELECT p.list_id, p.run_id, p.action, {outcome}, p.account_id, "
            "p.crm_org_id, {reason}, {logged_at} FROM {plan} p WHERE {rows}",
            columns=text(", ".join(c for c in LOG_COLUMNS if c != "record")),
            outcome=text_value(state.dialect, outcome),
            reason=text_value(state.dialect, reason),
            logged_at=logged_at,
            rows=_plan_rows(list_id, run_id, action, first, last, bound=True),
        )
        + except_these
    )


def insert_log_row(state: StateSql) -> Sql:
    """One run-log row, run for each row of :data:`~abm_provider.accounts.sync.state.LOG_COLUMNS`' values."""
    return _insert_each_row(state.log, LOG_COLUMNS)


def delete_plan_rows(state: StateSql, list_id: str, run_id: str, action: str, first: int, last: int) -> Sql:
    """Delete plan rows ``first`` to ``last`` of ``action``."""
    rows = plan_range(list_id, run_id, action, first, last)
    return state.sql("DELETE FROM {plan} WHERE {rows}", rows=rows)


def advance_run(
    state: StateSql, list_id: str, run_id: str, action: str, done: int, counts: Mapping[str, int]
) -> Sql:
    """Move a run's ``action`` on to plan row ``done``, adding what the service answered to its
    ``counts`` (by column, of :data:`~abm_provider.accounts.sync.state.RUN_COUNTS`, set in that order)."""
    check_run_counts(counts)
    added = join(", ", (sql(f"{c} = {c} + {{count}}", count=counts[c]) for c in RUN_COUNTS if c in counts))
    return state.sql(
        "UPDATE {runs} SET {done_column} = {done}, {added} WHERE {run}",
        done_column=text(f"{_checked(action)}_done"),
        done=done,
        added=added,
        run=of_run(list_id, run_id),
    )


def has_old_not_found(state: StateSql, list_id: str, run_id: str, not_found: str) -> Sql:
    """One row when the list has not-found rejects of runs other than ``run_id``, else none."""
    return state.sql(
        "SELECT 1 FROM {rejects} WHERE list_id = {list_id} AND action = {not_found} AND run_id <> {run_id} "
        "LIMIT 1",
        list_id=list_id,
        not_found=not_found,
        run_id=run_id,
    )


def mark_done(state: StateSql, list_id: str, run_id: str, finished_at: datetime) -> Sql:
    """Mark a run done."""
    return state.sql(
        "UPDATE {runs} SET status = {done}, finished_at = {finished_at} WHERE {run}",
        done=DONE,
        finished_at=finished_at,
        run=of_run(list_id, run_id),
    )


def runs_started_before(state: StateSql, list_id: str, before: datetime) -> Sql:
    """The list's runs started before ``before``."""
    return state.sql(
        "SELECT run_id FROM {runs} WHERE list_id = {list_id} AND started_at < {before}",
        list_id=list_id,
        before=before,
    )


def old_log_rows(state: StateSql, list_id: str, before: datetime, run_ids: list[str]) -> Sql:
    """``FROM ...`` the list's run-log rows of ``run_ids`` logged before ``before`` (found by the log's run
    index)."""
    return state.sql(
        "FROM {log} WHERE list_id = {list_id} AND logged_at < {before} AND run_id IN ({run_ids})",
        list_id=list_id,
        before=before,
        run_ids=values(run_ids),
    )


def delete_rows(rows: Sql) -> Sql:
    """Delete ``rows`` (a ``FROM ...`` clause of one table)."""
    return sql("DELETE {rows}", rows=rows)
