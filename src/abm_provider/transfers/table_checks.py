"""The checks an export table passes after every load: rows, no NULL key, no key twice.

Three common-sql check tasks, the same after every DAG that loads an export (the daily one, the
event-driven one, yours), so that the warehouse team can rely on them whichever DAG wrote the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from abm_provider.warehouse.schema import TableName, check_identifier, export_schema

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator


def export_table_checks(
    conn_id: str, table: str, export_type: str, key_columns: Sequence[str] | None = None
) -> list[BaseOperator]:
    """``check_row_count``, ``check_keys_not_null`` and ``check_no_duplicate_keys`` on ``table``.

    Made inside a DAG, they join it. ``key_columns``: the natural key the load replaced by (the
    export type's when not given). The common-sql operators are imported here, by the DAG that uses
    them, not by ``import abm_provider``.
    """
    from airflow.providers.common.sql.operators.sql import (
        SQLCheckOperator,
        SQLColumnCheckOperator,
        SQLTableCheckOperator,
    )

    TableName.parse(table)
    given = key_columns or export_schema(export_type).natural_key
    keys = [check_identifier(k, "key column") for k in given]
    key_list = ", ".join(keys)
    return [
        SQLTableCheckOperator(
            task_id="check_row_count",
            conn_id=conn_id,
            table=table,
            checks={"has_rows": {"check_statement": "COUNT(*) > 0"}},
        ),
        SQLColumnCheckOperator(
            task_id="check_keys_not_null",
            conn_id=conn_id,
            table=table,
            column_mapping={column: {"null_check": {"equal_to": 0}} for column in keys},
        ),
        SQLCheckOperator(
            task_id="check_no_duplicate_keys",
            conn_id=conn_id,
            sql=(
                f"SELECT COUNT(*) = 0 FROM (SELECT {key_list} FROM {table} "
                f"GROUP BY {key_list} HAVING COUNT(*) > 1) AS duplicate_keys"
            ),
        ),
    ]
