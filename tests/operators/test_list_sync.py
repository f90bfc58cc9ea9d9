"""``AccountListSyncOperator`` (``abm_provider.operators.list_sync``): its argument checks, inlets, lineage.

Bad arguments are refused when the DAG is parsed, naming the argument; templated ones when they are
rendered. The lineage test runs a sync against the emulator, with the state on DuckDB and PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException

from abm_provider.assets import warehouse_asset
from abm_provider.operators.account_lists import AccountListSyncOperator, CreateAccountListOperator
from accounts.sync.sync_support import COLUMNS, context, make_list, operator, rows_for, warehouse
from support.warehouses import Warehouse

__all__ = ["warehouse"]  # the list-sync tests' fixture

GOOD: dict[str, Any] = {"task_id": "sync", "list_id": "list-1", "table": "targets", "sql_conn_id": "wh"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"table": None}, "exactly one source"),
        ({"sql": "SELECT 1"}, "exactly one source"),
        ({"sql_conn_id": None}, "table needs sql_conn_id"),
        ({"table": None, "accounts_path": "a.csv", "sql_conn_id": None}, "accounts_path needs state_conn_id"),
        ({"table": "a.b.c"}, "table 'a.b.c'"),
        ({"mode": "sync"}, r"mode must be one of \['mirror', 'add_only', 'remove_only'\]"),
        ({"max_removals": 1.5}, "max_removals as a fraction"),
        ({"max_removals": "lots"}, r"max_removals must be an int \(count\) or a float \(fraction\), or None"),
        ({"allow_empty_source": "maybe"}, "allow_empty_source must be True or False"),
        ({"retry_not_found_after": -1}, "retry_not_found_after must be a number of seconds >= 0"),
        ({"log_retention_days": 0}, "log_retention_days must be a number of days"),
        ({"mode": "remove_only", "full_resync": True}, "full_resync sends the source again"),
        ({"dry_run": "maybe"}, "dry_run must be True or False"),
        ({"max_rejected": 1.5}, "max_rejected as a fraction"),
        ({"max_rejected": -1}, "max_rejected must not be negative"),
        ({"state_table_prefix": "abm sync"}, "state_table_prefix"),
        ({"state_schema": "bad-schema"}, "state_schema"),
        ({"column_map": {"idd": "x"}}, "column_map has unknown keys"),
        ({"batch_size": 1001}, "batch_size must be between 1 and 1000"),
        ({"max_in_flight": 9}, "max_in_flight must be between 1 and 8"),
        ({"list_id": "../folders"}, "list_id"),
        ({"default_crm_type": "HUBSPOT"}, "default_crm_type"),
    ],
)
def test_bad_arguments_fail_at_parse_time(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AccountListSyncOperator(**{**GOOD, **changes})


def test_templates_and_xcom_args_are_checked_when_rendered() -> None:
    with DAG("d", schedule=None):
        ensure = CreateAccountListOperator(task_id="ensure", list_name="L", folder_id="f")
        task = AccountListSyncOperator(
            **{**GOOD, "list_id": ensure.output["list_id"], "mode": "{{ params.m }}", "dry_run": "{{ x }}"}
        )
    assert task.upstream_task_ids == {"ensure"}
    task.mode, task.dry_run, task.list_id = "mirror", "nope", "list-1"
    with pytest.raises(AirflowFailException, match="dry_run must be True or False"):
        task._options({"run_id": "r"})


def test_a_table_source_is_the_task_s_inlet_so_dags_can_schedule_on_it() -> None:
    task = AccountListSyncOperator(**GOOD)
    assert task.inlets == [warehouse_asset("wh", "targets")]


# The lineage of a table source (the OpenLineage names of MySQL tables are not asserted yet).
@pytest.mark.parametrize("warehouse", ["duckdb", "postgres"], indirect=True)
def test_lineage_names_the_source_table_in_and_the_list_out(abm: Any, warehouse: Warehouse) -> None:
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(2)))
    task = operator(warehouse, list_id)
    task.execute(context("run_1"))
    lineage = task.get_openlineage_facets_on_complete(None)
    assert [d.name for d in lineage.inputs] == [
        f"{warehouse.schema or 'main'}.targets"
        if warehouse.kind == "duckdb"
        else f"abm_synctest.{warehouse.name('targets')}"
    ]
    assert [d.name for d in lineage.outputs] == [f"accountLists/{list_id}"]
    assert lineage.outputs[0].namespace.startswith("abm://127.0.0.1:")
