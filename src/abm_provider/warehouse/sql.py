"""The SQL of the replace step, spelled by the warehouse's :class:`~.dialects.base.Dialect`.

Every warehouse replaces the same way: delete the table's rows whose natural key the stage holds,
insert the stage's rows typed and with the lineage columns, in the transaction that writes the
ledger row. Only the spelling differs (quoting, casts, parameter markers), which the dialect supplies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from abm_provider.warehouse import ledger
from abm_provider.warehouse.schema import EXECUTION_ID_COLUMN, LOADED_AT_COLUMN

if TYPE_CHECKING:
    from abm_provider.warehouse.checks import ColumnPlan
    from abm_provider.warehouse.dialects.base import Dialect
    from abm_provider.warehouse.load import LoadRequest

#: The temporary table a file is staged in, one per connection.
STAGE_TABLE = "_abm_stage"


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


def repeated_key_sql(d: Dialect, table_sql: str, keys: tuple[str, ...]) -> str:
    """One row when some natural key occurs twice in ``table_sql``, else none."""
    key_sql = ", ".join(d.quote(k) for k in keys)
    return f"SELECT 1 FROM {table_sql} GROUP BY {key_sql} HAVING COUNT(*) > 1 LIMIT 1"
