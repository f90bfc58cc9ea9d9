"""The provider's Asset URI schemes, and the Assets DAGs schedule on.

- ``abm-warehouse://<sql_conn_id>/<table>`` names a table that an ABM load writes or a list sync
  reads, by the Airflow connection that reaches it and its (optionally schema-qualified) name, so a
  DAG can be scheduled on a load without knowing where the warehouse lives
  (:func:`warehouse_asset`).
- ``abm-export://<abm_conn_id>/<EXPORT_TYPE>`` names the completed executions of one export job, as
  the service behind a connection runs them; :func:`export_asset` returns it watched, so a DAG runs
  once per execution that completes.

Both schemes are registered in the provider info (``asset-uris``): Airflow normalises every such URI
with :func:`sanitize_uri` or :func:`sanitize_export_uri`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetWatcher

from abm_provider.warehouse.schema import TableName

if TYPE_CHECKING:
    from urllib.parse import SplitResult

SCHEME = "abm-warehouse"
EXPORT_SCHEME = "abm-export"
#: An export type as the service names them: capitals, digits and underscores.
_EXPORT_TYPE = re.compile(r"[A-Z][A-Z0-9_]*")


def warehouse_asset(sql_conn_id: str, table: str) -> Asset:
    """The Asset for ``table`` over ``sql_conn_id``; DAGs schedule on the same one a load updates."""
    return Asset(name=f"abm_warehouse/{sql_conn_id}/{table}", uri=f"{SCHEME}://{sql_conn_id}/{table}")


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Check an ``abm-warehouse://`` URI (Airflow has already dropped fragments and trailing slashes).

    A connection id and one table name are required, so two spellings of one table cannot become two
    Assets that never trigger each other's consumers.
    """
    if not uri.netloc:
        raise ValueError(f"URI format {SCHEME}:// must name a connection: {SCHEME}://<sql_conn_id>/<table>")
    table = uri.path.lstrip("/")
    if not table or "/" in table:
        raise ValueError(f"URI format {SCHEME}:// must name one table: {SCHEME}://<sql_conn_id>/<table>")
    TableName.parse(table)
    return uri


def sanitize_export_uri(uri: SplitResult) -> SplitResult:
    """Check an ``abm-export://<abm_conn_id>/<EXPORT_TYPE>`` URI: one connection, one export type."""
    usage = f"{EXPORT_SCHEME}://<abm_conn_id>/<EXPORT_TYPE>"
    if not uri.netloc:
        raise ValueError(f"URI format {EXPORT_SCHEME}:// must name a connection: {usage}")
    export_type = uri.path.lstrip("/")
    if not _EXPORT_TYPE.fullmatch(export_type):
        raise ValueError(
            f"URI format {EXPORT_SCHEME}:// must name one export type, like TACTIC_PERFORMANCE: {usage}"
        )
    return uri


def export_asset(
    export_type: str, abm_conn_id: str = "abm_default", poll_interval: float = 60.0, **trigger_args: Any
) -> Asset:
    """The Asset of ``export_type``'s completed executions, watched: ready for ``schedule=[...]``.

    Its watcher (:class:`~abm_provider.triggers.exports.ExecutionCompletedEventTrigger`) fires once
    per execution that completes after it starts, polling every ``poll_interval`` seconds. Several
    events may be folded into one DAG run, so the DAG should load with ``source="unloaded"`` rather
    than read "the" event. ``trigger_args`` go to the trigger: ``start_after``,
    ``max_consecutive_failures`` and the request settings (``max_attempts``, ``retry_max_wait``,
    ``request_timeout``, ``hook_params``).
    """
    from abm_provider.triggers.exports import ExecutionCompletedEventTrigger

    name = f"abm_export/{abm_conn_id}/{export_type}"
    trigger = ExecutionCompletedEventTrigger(
        abm_conn_id=abm_conn_id,
        export_type=export_type,
        asset_name=name,
        poll_interval=poll_interval,
        **trigger_args,
    )
    return Asset(
        name=name,
        uri=f"{EXPORT_SCHEME}://{abm_conn_id}/{export_type}",
        watchers=[AssetWatcher(name=f"{name}/completed", trigger=trigger)],
    )
