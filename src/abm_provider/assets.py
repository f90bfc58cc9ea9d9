"""The ``abm-warehouse`` Asset URI scheme: a table that an ABM load writes or a list sync reads.

``abm-warehouse://<sql_conn_id>/<table>`` names a table by the Airflow connection that reaches it and
its (optionally schema-qualified) name, so a DAG can be scheduled on a load without knowing where the
warehouse lives. The scheme is registered in the provider info (``asset-uris``): Airflow normalises
every such URI with :func:`sanitize_uri`, and :func:`warehouse_asset` builds one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk import Asset

from abm_provider.warehouse.schema import TableName

if TYPE_CHECKING:
    from urllib.parse import SplitResult

SCHEME = "abm-warehouse"


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
