"""The SQL of the replace step, spelled by the warehouse's :class:`~.dialects.base.Dialect`.

Every warehouse replaces the same way: delete the table's rows whose natural key the stage holds,
insert the stage's rows typed and with the lineage columns, in the transaction that writes the
ledger row. Only the spelling differs (quoting, casts, parameter markers), which the dialect supplies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from abm_provider.warehouse import ledger
from abm_provider.warehouse.schema import EXECUTION_ID_COLUMN, LOADED_AT_COLUMN, STAGE_TABLE

if TYPE_CHECKING:
    from abm_provider.warehouse.checks import ColumnPlan
    from abm_provider.warehouse.dialects.base import Dialect, Staged
    from abm_provider.warehouse.load import LoadRequest


def match_sql(d: Dialect, request: LoadRequest, plan: ColumnPlan, target: str, stage: str) -> str:
    """Equality of the natural key between a ``target`` row and a ``stage`` row (aliases)."""
    return " AND ".join(
        f"{target}.{d.quote(k)} = {d.typed(stage + '.' + d.quote(k), plan.kinds[k])}"
        for k in request.key_columns
    )


def delete_sql(d: Dialect, request: LoadRequest, plan: ColumnPlan, *, keep_newer: bool) -> str:
    """Delete the table's rows whose natural key the stage holds.

    ``keep_newer``: except the rows an execution newer than this one wrote (parameters:
    :func:`~abm_provider.warehouse.ledger.newer_params`).
    """
    target = d.quote(request.table.name)
    match = match_sql(d, request, plan, target, "s")
    sql = (
        f"DELETE FROM {d.table_sql(request.table)} WHERE EXISTS "
        f"(SELECT 1 FROM {STAGE_TABLE} s WHERE s._reason IS NULL AND {match})"
    )
    if not keep_newer:
        return sql
    writer = f"{target}.{d.quote(EXECUTION_ID_COLUMN)}"
    return f"{sql} AND ({writer} IS NULL OR {writer} NOT IN ({ledger.newer_ids_sql(d, request.ledger)}))"


def insert_sql(d: Dialect, request: LoadRequest, plan: ColumnPlan, *, keep_newer: bool) -> str:
    """Insert the staged rows, typed, with the lineage columns (parameters: execution id, loaded at).

    ``keep_newer``: only those whose key is not in the table (after :func:`delete_sql` with
    ``keep_newer``, a key still there is a newer execution's).
    """
    names = ", ".join(d.quote(n) for n in plan.header)
    values = ", ".join(d.typed(d.quote(n), plan.kinds[n]) for n in plan.header)
    target = d.table_sql(request.table)
    free = ""
    if keep_newer:
        match = match_sql(d, request, plan, "h", STAGE_TABLE)
        free = f" AND NOT EXISTS (SELECT 1 FROM {target} h WHERE {match})"
    return (
        f"INSERT INTO {target} ({names}, {d.quote(EXECUTION_ID_COLUMN)}, {d.quote(LOADED_AT_COLUMN)}) "
        f"SELECT {values}, {d.param('TEXT')}, {d.param('TIMESTAMP')} "
        f"FROM {STAGE_TABLE} WHERE _reason IS NULL{free}"
    )


def create_table_sql(d: Dialect, request: LoadRequest, plan: ColumnPlan) -> str:
    columns = [f"{d.quote(n)} {d.column_type(plan.kinds[n])}" for n in plan.header]
    columns += [
        f"{d.quote(EXECUTION_ID_COLUMN)} {d.type_sql('TEXT')}",
        f"{d.quote(LOADED_AT_COLUMN)} {d.type_sql('TIMESTAMP')}",
    ]
    return f"CREATE TABLE IF NOT EXISTS {d.table_sql(request.table)} ({', '.join(columns)})"


def add_column_sql(d: Dialect, request: LoadRequest, plan: ColumnPlan, name: str) -> str:
    column = f"{d.quote(name)} {d.column_type(plan.kinds[name])}"
    return f"ALTER TABLE {d.table_sql(request.table)} ADD COLUMN {column}"


def key_index_sql(d: Dialect, request: LoadRequest) -> str:
    """The unique natural-key index of a table this load created."""
    index = d.quote(f"{request.table.name}_natural_key")
    keys = ", ".join(d.quote(k) for k in request.key_columns)
    return f"CREATE UNIQUE INDEX IF NOT EXISTS {index} ON {d.table_sql(request.table)} ({keys})"


def value_rejects(cur: Any, staged: Staged) -> dict[int, str]:
    """The staged rows a column rule rejected, by record number, with the reason."""
    if staged.rules_checked:
        return {}
    cur.execute(f"SELECT {staged.order_column}, _reason FROM {STAGE_TABLE} WHERE _reason IS NOT NULL")
    rows = cur.fetchall()
    numbers = staged.record_numbers([int(r[0]) for r in rows])
    return {n: str(r[1]) for n, r in zip(numbers, rows, strict=True)}


def duplicate_rejects(dialect: Dialect, cur: Any, keys: Sequence[str], staged: Staged) -> dict[int, str]:
    """All but the last row of each natural key the file repeats (the later row wins)."""
    if staged.keys_unique:
        return {}
    key_sql = ", ".join(dialect.quote(k) for k in keys)
    cur.execute(
        f"SELECT 1 FROM {STAGE_TABLE} WHERE _reason IS NULL GROUP BY {key_sql} HAVING COUNT(*) > 1 LIMIT 1"
    )
    if cur.fetchone() is None:
        return {}
    order = staged.order_column
    cur.execute(
        f"SELECT _o FROM (SELECT {order} AS _o, ROW_NUMBER() OVER (PARTITION BY {key_sql} "
        f"ORDER BY {order} DESC) AS _n FROM {STAGE_TABLE} WHERE _reason IS NULL) d WHERE _n > 1"
    )
    ids = [int(r[0]) for r in cur.fetchall()]
    reason = f"duplicate natural key ({', '.join(keys)}): a later row of the file has the same key"
    mark = dialect.placeholder
    for start in range(0, len(ids), 1000):
        chunk = ids[start : start + 1000]
        marks = ", ".join(mark for _ in chunk)
        cur.execute(f"UPDATE {STAGE_TABLE} SET _reason = {mark} WHERE {order} IN ({marks})", [reason, *chunk])
    return dict.fromkeys(staged.record_numbers(ids), reason)
