"""The one way a connection id becomes a common-sql hook, for account sources, loads and list syncs."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.providers.common.sql.hooks.sql import DbApiHook


#: Hooks of this provider for connection types whose own provider may be absent, by class path
#: (imported only when needed: each needs its extra): a ``google_cloud_platform`` connection without
#: the Google provider gets the BigQuery loads' hook.
FALLBACK_HOOKS: dict[str, str] = {
    "google_cloud_platform": "abm_provider.warehouse.dialects.bigquery_hook.BigQueryLoadHook",
}


def sql_hook(conn_id: str, what: str, hook_params: Mapping[str, Any] | None = None) -> DbApiHook:
    """The connection's own hook (DuckDBHook, PostgresHook...), as common-sql operators resolve it.

    A connection type of :data:`FALLBACK_HOOKS` whose own provider gives no ``DbApiHook`` (it is not
    installed) gets this provider's hook for it.

    :param what: the argument that named the connection, so a connection of another kind fails
        with a message naming the setting to fix.
    """
    from airflow.providers.common.sql.hooks.sql import DbApiHook
    from airflow.sdk import BaseHook

    connection = BaseHook.get_connection(conn_id)
    params = dict(hook_params or {})
    fallback = FALLBACK_HOOKS.get(str(connection.conn_type or ""))
    try:
        hook = connection.get_hook(hook_params=params)
    except Exception:  # its provider is not installed: Airflow knows no hook for the type
        if fallback is None:
            raise
        hook = None
    if fallback is not None and not isinstance(hook, DbApiHook):
        module, _, name = fallback.rpartition(".")
        hook = getattr(importlib.import_module(module), name)(conn_id, **params)
    if not isinstance(hook, DbApiHook):
        raise TypeError(
            f"{what} {conn_id!r} resolves to {type(hook).__name__}, which is not a common-sql DbApiHook"
        )
    return hook
