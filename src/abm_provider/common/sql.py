"""The one way a connection id becomes a common-sql hook, for account sources, loads and list syncs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.providers.common.sql.hooks.sql import DbApiHook


def sql_hook(conn_id: str, what: str, hook_params: Mapping[str, Any] | None = None) -> DbApiHook:
    """The connection's own hook (DuckDBHook, PostgresHook...), as common-sql operators resolve it.

    :param what: the argument that named the connection, so a connection of another kind fails
        with a message naming the setting to fix.
    """
    from airflow.providers.common.sql.hooks.sql import DbApiHook
    from airflow.sdk import BaseHook

    hook = BaseHook.get_connection(conn_id).get_hook(hook_params=dict(hook_params or {}))
    if not isinstance(hook, DbApiHook):
        raise TypeError(
            f"{what} {conn_id!r} resolves to {type(hook).__name__}, which is not a common-sql DbApiHook"
        )
    return hook
