"""``abm_provider.warehouse.lineage``: the OpenLineage namespace and name of a warehouse table.

The loader names its output table with it and the list sync its input table, so the same table
gets the same name from both. The rules: the hook's own database info when it has any
(``scheme://authority`` and ``database.schema.table``); DuckDB, which has none, is named by its
database file with ``main`` as the default schema; any other hook by its connection type and host
(or connection id), with the hook's default schema when it knows one.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from abm_provider.warehouse.lineage import table_dataset
from abm_provider.warehouse.schema import TableName
from support.export_files import TACTIC_COLUMNS, days, download_xcom, tactic_rows, write_csv
from support.warehouses import Warehouse, duckdb_conn_env, postgres_conn_env, require_postgres


class StubHook:
    """A common-sql hook of a dialect this package does not know, as far as lineage asks it anything."""

    conn_type = "mssql"

    def __init__(
        self,
        *,
        host: str | None = "db.example",
        default_schema: str | None = None,
        info: Any = None,
        connection: bool = True,
    ) -> None:
        self.host, self.default_schema, self.info, self.connection = host, default_schema, info, connection

    def get_conn_id(self) -> str:
        return "wh_other"

    def get_connection(self, conn_id: str) -> Any:
        if not self.connection:
            raise LookupError(f"The conn_id `{conn_id}` isn't defined")
        return SimpleNamespace(conn_id=conn_id, host=self.host)

    def get_openlineage_database_info(self, connection: Any) -> Any:
        return self.info

    def get_openlineage_default_schema(self) -> str:
        if self.default_schema is None:
            raise NotImplementedError("no default schema")
        return self.default_schema


def names(hook: Any, *tables: str) -> list[tuple[str, str]]:
    return [table_dataset(hook, TableName.parse(table)) for table in tables]


def test_the_hooks_database_info_names_database_schema_and_table() -> None:
    info = SimpleNamespace(scheme="mssql", authority="db.example:1433", database="sales")
    hook = StubHook(info=info, default_schema="dbo")
    assert names(hook, "tactic", "reports.tactic") == [
        ("mssql://db.example:1433", "sales.dbo.tactic"),
        ("mssql://db.example:1433", "sales.reports.tactic"),
    ]


def test_without_database_info_the_connection_type_and_host_name_the_namespace() -> None:
    assert names(StubHook(default_schema="dbo"), "tactic", "reports.tactic") == [
        ("mssql://db.example", "dbo.tactic"),
        ("mssql://db.example", "reports.tactic"),
    ]


def test_a_hook_with_no_default_schema_names_an_unqualified_table_alone() -> None:
    assert names(StubHook(), "tactic", "reports.tactic") == [
        ("mssql://db.example", "tactic"),
        ("mssql://db.example", "reports.tactic"),
    ]


@pytest.mark.parametrize(
    "stub", [StubHook(host=None), StubHook(connection=False)], ids=["no_host", "no_connection"]
)
def test_without_a_host_the_connection_id_names_the_namespace(stub: StubHook) -> None:
    assert names(stub, "tactic") == [("mssql://wh_other", "tactic")]


def test_duckdb_is_named_by_its_database_file_with_main_as_the_default_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.providers.duckdb.hooks.duckdb import DuckDBHook

    database = tmp_path / "wh.duckdb"
    monkeypatch.setenv("AIRFLOW_CONN_WH_DUCKDB", duckdb_conn_env(database))
    hook = DuckDBHook(duckdb_conn_id="wh_duckdb")
    assert names(hook, "tactic", "reports.tactic") == [
        (f"duckdb://{database}", "main.tactic"),
        (f"duckdb://{database}", "reports.tactic"),
    ]


def test_postgres_is_named_by_its_server_and_database(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    require_postgres()
    monkeypatch.setenv("AIRFLOW_CONN_WH_PG", postgres_conn_env("test"))
    hook = PostgresHook(postgres_conn_id="wh_pg")
    assert names(hook, "tactic", "reports.tactic") == [
        ("postgres://127.0.0.1:5432", "test.public.tactic"),
        ("postgres://127.0.0.1:5432", "test.reports.tactic"),
    ]


def test_the_loaders_output_is_the_table_so_named_with_its_schema_and_row_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ExecutionCsvToSqlOperator`` reports the file it read and the table it wrote, named as above."""
    from airflow.providers.duckdb.hooks.duckdb import DuckDBHook

    warehouse = Warehouse("duckdb", "wh_duckdb", tmp_path / "wh.duckdb").use(monkeypatch)
    rows = tactic_rows(days(dt.date(2026, 10, 1), 2), 3, version=1)
    source = download_xcom(write_csv(tmp_path / "e1.csv", TACTIC_COLUMNS, rows), "e1")
    operator = warehouse.operator(source=source)
    assert operator.get_openlineage_facets_on_complete(None) is None, "no lineage before the load"

    operator.execute(context={})
    lineage = operator.get_openlineage_facets_on_complete(None)

    (read,) = lineage.inputs
    assert (read.namespace, read.name) == ("file", source["path"])
    (written,) = lineage.outputs
    assert (written.namespace, written.name) == table_dataset(
        DuckDBHook(duckdb_conn_id="wh_duckdb"), TableName.parse("tactic_perf")
    )
    assert [f.name for f in written.facets["schema"].fields] == TACTIC_COLUMNS
    statistics = written.outputFacets["outputStatistics"]
    assert (statistics.rowCount, statistics.size) == (len(rows), source["bytes"])
    # The days the file holds are replaced whole: an overwrite of those partitions of the table.
    loaded_days = [day.isoformat() for day in days(dt.date(2026, 10, 1), 2)]
    subset = written.outputFacets["subset"].outputCondition
    assert [(p.identifier, p.dimensions) for p in subset.partitions] == [
        (day, {"date": day}) for day in loaded_days
    ]
    assert written.facets["lifecycleStateChange"].lifecycleStateChange.value == "OVERWRITE"
