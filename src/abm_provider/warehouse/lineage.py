"""OpenLineage for the operators: its classes when installed, and the names of warehouse tables,
shared by the loader (its output) and the list sync (its input)."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from abm_provider.warehouse.dialects import dialect_for
from abm_provider.warehouse.schema import TableName

if TYPE_CHECKING:
    from abm_provider.warehouse.load import LoadResult
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

    ``OperatorLineage``, ``Dataset`` and ``OutputDataset``, and the facet modules ``schema_dataset``,
    ``output_statistics_output_dataset``, ``base_subset_dataset`` and ``lifecycle_state_change_dataset``
    (the last two ``None`` with an OpenLineage client older than the subset facets), as attributes of
    the answer.
    """
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import Dataset, OutputDataset
        from openlineage.client.facet_v2 import output_statistics_output_dataset, schema_dataset
    except ImportError:
        return None
    subset: Any = None
    lifecycle: Any = None
    with suppress(ImportError):
        from openlineage.client.facet_v2 import base_subset_dataset as subset
        from openlineage.client.facet_v2 import lifecycle_state_change_dataset as lifecycle
    return SimpleNamespace(
        OperatorLineage=OperatorLineage,
        Dataset=Dataset,
        OutputDataset=OutputDataset,
        schema_dataset=schema_dataset,
        output_statistics_output_dataset=output_statistics_output_dataset,
        base_subset_dataset=subset,
        lifecycle_state_change_dataset=lifecycle,
    )


def table_input(ol: Any, hook: Any, table: TableName) -> Any:
    """The OpenLineage dataset of a warehouse table, named by :func:`table_dataset`."""
    namespace, name = table_dataset(hook, table)
    return ol.Dataset(namespace=namespace, name=name)


@dataclass(frozen=True)
class LoadLineage:
    """What a task's loads read and wrote: the CSV files in; the table out, with its schema, the rows
    written, and the days replaced (marked as an overwrite of those partitions)."""

    hook: Any
    table: TableName
    schema: ExportSchema
    paths: tuple[str, ...]
    results: tuple[LoadResult, ...]

    def plus(self, path: str, result: LoadResult) -> LoadLineage:
        """The lineage once one more file was loaded into the same table."""
        return replace(self, paths=(*self.paths, path), results=(*self.results, result))

    @property
    def days(self) -> list[str]:
        return sorted({day for result in self.results for day in result.days})

    def facets(self) -> Any:
        """The ``OperatorLineage`` of the loads, or ``None`` when OpenLineage is not installed."""
        ol = openlineage()
        if ol is None:
            return None
        namespace, name = table_dataset(self.hook, self.table)
        fields = [
            ol.schema_dataset.SchemaDatasetFacetFields(name=column, type=kind.sql_type)
            for column, kind in self.schema.columns
        ]
        output_facets: dict[str, Any] = {
            "outputStatistics": ol.output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                rowCount=sum(r.rows_loaded for r in self.results), size=sum(r.bytes for r in self.results)
            )
        }
        facets: dict[str, Any] = {"schema": ol.schema_dataset.SchemaDatasetFacet(fields=fields)}
        column, days = self.schema.day_column, self.days
        if column is not None and days and ol.base_subset_dataset is not None:
            # The days are replaced whole: an overwrite of those partitions, not of the table.
            subset = ol.base_subset_dataset
            partitions = [subset.Partition(dimensions={column: day}, identifier=day) for day in days]
            output_facets["subset"] = subset.OutputSubsetOutputDatasetFacet(
                outputCondition=subset.PartitionSubsetCondition(partitions=partitions)
            )
            lifecycle = ol.lifecycle_state_change_dataset
            facets["lifecycleStateChange"] = lifecycle.LifecycleStateChangeDatasetFacet(
                lifecycleStateChange=lifecycle.LifecycleStateChange.OVERWRITE
            )
        output = ol.OutputDataset(namespace=namespace, name=name, facets=facets, outputFacets=output_facets)
        inputs = [ol.Dataset(namespace="file", name=path) for path in self.paths]
        return ol.OperatorLineage(inputs=inputs, outputs=[output])
