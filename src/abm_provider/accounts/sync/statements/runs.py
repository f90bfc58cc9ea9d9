"""Statements that read a run back: the runs left unfinished, a plan's rows to send, a run's counts, and
the list's membership (:mod:`~abm_provider.accounts.sync.sending` and
:mod:`~abm_provider.accounts.sync.summary` run them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from abm_provider.accounts.sync.statements.binding import Sql, sql, text, values

if TYPE_CHECKING:
    from abm_provider.accounts.sync.statements.tables import StateSql


def unfinished_runs(state: StateSql, list_id: str, sending: str) -> Sql:
    """``(run_id, to_add, to_remove, add_done, remove_done)`` of the list's runs in status ``sending``,
    oldest first."""
    return state.sql(
        "SELECT run_id, to_add, to_remove, add_done, remove_done FROM {runs} "
        "WHERE list_id = {list_id} AND status = {sending} ORDER BY started_at, run_id",
        list_id=list_id,
        sending=sending,
    )


def of_run(list_id: str, run_id: str, *, row: str = "") -> Sql:
    """A condition on a row (named ``row``, as ``p.``, or bare) of a state table: of this run of the list."""
    return sql(
        "{row}list_id = {list_id} AND {row}run_id = {run_id}", row=text(row), list_id=list_id, run_id=run_id
    )


def plan_range(list_id: str, run_id: str, action: Sql | str, first: int, last: int, *, row: str = "") -> Sql:
    """A condition on a plan row (named ``row``, as ``p.``, or bare): of this run's ``action`` (bound, or
    as given when it is SQL), numbered ``first`` to ``last``."""
    return of_run(list_id, run_id, row=row) + sql(
        " AND {row}action = {action} AND {row}seq BETWEEN {first} AND {last}",
        row=text(row),
        action=action,
        first=first,
        last=last,
    )


def plan_rows(state: StateSql, list_id: str, run_id: str, action: str, first: int, last: int) -> Sql:
    """``(account_id, crm_org_id, crm_type, account_name, row_hash)`` of plan rows ``first`` to ``last``
    of ``action``, in plan order."""
    return state.sql(
        "SELECT account_id, crm_org_id, crm_type, account_name, row_hash FROM {plan} WHERE {rows} "
        "ORDER BY seq",
        rows=plan_range(list_id, run_id, action, first, last),
    )


def run_row(state: StateSql, list_id: str, run_id: str, columns: Sequence[str]) -> Sql:
    """The ``columns`` of a run's row."""
    return state.sql(
        "SELECT {columns} FROM {runs} WHERE {run}",
        columns=text(", ".join(columns)),
        run=of_run(list_id, run_id),
    )


def member_counts(state: StateSql, list_ids: Sequence[str]) -> Sql:
    """``(list_id, members)`` of each of ``list_ids`` with members by our record, in one pass."""
    return state.sql(
        "SELECT list_id, COUNT(*) FROM {members} WHERE list_id IN ({lists}) GROUP BY list_id",
        lists=values(list(list_ids)),
    )


def count_rows(rows: Sql) -> Sql:
    """How many rows ``rows`` (a ``FROM ...`` clause) holds."""
    return sql("SELECT COUNT(*) {rows}", rows=rows)
