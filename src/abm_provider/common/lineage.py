"""OpenLineage for the operators: its classes when installed, and the names of warehouse tables,
shared by the loader (its output) and the list sync (its input)."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from abm_provider.warehouse.dialects import dialect_for
from abm_provider.warehouse.schema import TableName

if TYPE_CHECKING:
    from abm_provider.warehouse.flow import LoadResult
    from abm_provider.warehouse.schema import ExportSchema


def table_dataset(hook: Any, table: TableName) -> tuple[str, str]:
    """OpenLineage namespace and name of the table, from the hook's own database info when it has any."""
    connection = None
    with suppress(Exception):
        connection = hook.get_connection(hook.get_conn_id())
    info = None
    with suppress(Exception):
        info = hook.get_openlineage_database_info(connection) if connection is not None else None
    dialect = dialect_for(hook)
    schema = table.schema or dialect.lineage_schema
    if schema is None:
        with suppress(Exception):
            schema = hook.get_openlineage_default_schema()
    if info is not None:
        parts = [p for p in (info.database, schema or "public", table.name) if p]
        return f"{info.scheme}://{info.authority}", ".".join(parts)
    name = f"{schema}.{table.name}" if schema else table.name
    namespace = None
    with suppress(Exception):  # a hook without a database to name
        namespace = dialect.lineage_namespace()
    if namespace:
        return namespace, name
    conn_type = str(getattr(hook, "conn_type", "") or "sql")
    host = getattr(connection, "host", None) or getattr(hook, "get_conn_id", lambda: "default")()
    return f"{conn_type}://{host}", name


def openlineage() -> Any:
    """The OpenLineage classes the operators report with, or ``None`` when OpenLineage is not installed.

    ``OperatorLineage``, ``Dataset`` and ``OutputDataset``, and the facet modules ``schema_dataset`` and
    ``output_statistics_output_dataset``, as attributes of the answer.
    """
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import Dataset, OutputDataset
        from openlineage.client.facet_v2 import output_statistics_output_dataset, schema_dataset
    except ImportError:
        return None
    return SimpleNamespace(
        OperatorLineage=OperatorLineage,
        Dataset=Dataset,
        OutputDataset=OutputDataset,
        schema_dataset=schema_dataset,
        output_statistics_output_dataset=output_statistics_output_dataset,
    )


def table_input(ol: Any, hook: Any, table: TableName) -> Any:
    """The OpenLineage dataset of a warehouse table, named by :func:`table_dataset`."""
    namespace, name = table_dataset(hook, table)
    return ol.Dataset(namespace=namespace, name=name)


@dataclass(frozen=True)
class LoadLineage:
    """What a load read and wrote: the CSV file in, the table out with its schema and row count."""

    hook: Any
    path: str
    table: TableName
    schema: ExportSchema
    result: LoadResult

    def facets(self) -> Any:
        """The ``OperatorLineage`` of the load, or ``None`` when OpenLineage is not installed."""
        ol = openlineage()
        if ol is None:
            return None
        namespace, name = table_dataset(self.hook, self.table)
        fields = [
            ol.schema_dataset.SchemaDatasetFacetFields(name=column, type=kind.sql_type)
            for column, kind in self.schema.columns
        ]
        statistics = ol.output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
            rowCount=self.result.rows_loaded, size=self.result.bytes
        )
        output = ol.OutputDataset(
            namespace=namespace,
            name=name,
            facets={"schema": ol.schema_dataset.SchemaDatasetFacet(fields=fields)},
            outputFacets={"outputStatistics": statistics},
        )
        return ol.OperatorLineage(inputs=[ol.Dataset(namespace="file", name=self.path)], outputs=[output])
