"""The checks an export table passes after every load: rows, no NULL key, no key twice.

Three common-sql check tasks, the same after every DAG that loads an export (the daily one, the
event-driven one, yours), so that the warehouse team can rely on them whichever DAG wrote the table.
Each reaches its connection as the load did (:func:`~abm_provider.warehouse.connections.sql_hook`), so a
``google_cloud_platform`` connection without the Google provider is checked through the same BigQuery
hook that loaded it. This module is imported by the DAGs that call :func:`export_table_checks`, not by
``import abm_provider``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.sql.operators.sql import (
    SQLCheckOperator,
    SQLColumnCheckOperator,
    SQLTableCheckOperator,
)

from abm_provider.warehouse.connections import sql_hook
from abm_provider.warehouse.schema import TableName, check_identifier, export_schema

if TYPE_CHECKING:
    from airflow.providers.common.sql.hooks.sql import DbApiHook
    from airflow.sdk import BaseOperator


class _LoadsHook:
    """A check's hook, resolved as the loads resolve theirs."""

    conn_id: str | None
    hook_params: dict[str, Any]

    @cached_property
    def _load_hook(self) -> DbApiHook:
        if not self.conn_id:
            raise ValueError("conn_id is required: the connection of the table the check reads")
        return sql_hook(self.conn_id, "conn_id", self.hook_params)

    def get_db_hook(self) -> DbApiHook:
        return self._load_hook


class ExportTableCheckOperator(_LoadsHook, SQLTableCheckOperator):
    """``SQLTableCheckOperator`` on the loads' hook."""


class ExportColumnCheckOperator(_LoadsHook, SQLColumnCheckOperator):
    """``SQLColumnCheckOperator`` on the loads' hook."""


class ExportCheckOperator(_LoadsHook, SQLCheckOperator):
    """``SQLCheckOperator`` on the loads' hook."""


def export_table_checks(
    conn_id: str, table: str, export_type: str, key_columns: Sequence[str] | None = None
) -> list[BaseOperator]:
    """``check_row_count``, ``check_keys_not_null`` and ``check_no_duplicate_keys`` on ``table``.

    Made inside a DAG, they join it. ``key_columns``: the natural key the load replaced by (the
    export type's when not given).
    """
    TableName.parse(table)
    given = key_columns or export_schema(export_type).natural_key
    keys = [check_identifier(k, "key column") for k in given]
    key_list = ", ".join(keys)
    return [
        ExportTableCheckOperator(
            task_id="check_row_count",
            conn_id=conn_id,
            table=table,
            checks={"has_rows": {"check_statement": "COUNT(*) > 0"}},
        ),
        ExportColumnCheckOperator(
            task_id="check_keys_not_null",
            conn_id=conn_id,
            table=table,
            column_mapping={column: {"null_check": {"equal_to": 0}} for column in keys},
        ),
        ExportCheckOperator(
            task_id="check_no_duplicate_keys",
            conn_id=conn_id,
            sql=(
                f"SELECT COUNT(*) = 0 FROM (SELECT {key_list} FROM {table} "
                f"GROUP BY {key_list} HAVING COUNT(*) > 1) AS duplicate_keys"
            ),
        ),
    ]
