"""``AccountAudienceSyncOperator`` (``abm_provider.operators.audiences``): its argument checks and inlets.

Bad arguments are refused when the DAG is parsed, naming the argument; templated ones when they are
rendered (``_sync_options`` and ``_ordered``, which ``execute`` calls first). Nothing here reaches the
service or a database: what a run does is ``tests/accounts/audiences``'.
"""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException

from abm_provider.assets import warehouse_asset
from abm_provider.operators.account_lists import (
    AccountAudienceSyncOperator,
    AccountListSyncOperator,
    CreateAccountListOperator,
)

AUDIENCES: dict[str, Any] = {
    "tier_1": "list-1",
    "tier_2": {"list_id": "list-2"},
    "tier_3": {"list_name": "T3"},
}
GOOD: dict[str, Any] = {
    "task_id": "audiences",
    "audiences": AUDIENCES,
    "audience_column": "tier",
    "table": "targets",
    "sql_conn_id": "wh",
    "folder_id": "folder-1",
}
AUDIENCE_FIELDS = {"audiences", "audience_column", "exclusions", "exclude_lists", "priority", "folder_id"}


def test_a_good_operator_builds_with_its_audience_arguments_templated_beside_the_list_sync_s() -> None:
    task = AccountAudienceSyncOperator(**GOOD)
    assert task.audiences == AUDIENCES and task.audience_column == "tier"
    assert task.mode == "mirror"
    fields = set(task.template_fields)
    assert fields >= AUDIENCE_FIELDS
    assert fields >= set(AccountListSyncOperator.template_fields) - {"list_id"}
    assert "list_id" not in fields  # the lists are the audiences'


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"audiences": {}}, "audiences must map each audience value to its list"),
        ({"audiences": ["tier_1", "tier_2"]}, "audiences must map each audience value to its list"),
        ({"audiences": "list-1"}, "audiences must map each audience value to its list"),
        (
            {"audiences": {"tier_1": {"list_id": "list-1", "list_name": "T1"}}},
            r"audiences\['tier_1'\] names its list by list_id or list_name, one of them",
        ),
        ({"audiences": {"tier_1": {}}}, r"audiences\['tier_1'\] names its list by list_id or list_name"),
        ({"audiences": {"tier_1": {"name": "T1"}}}, r"audiences\['tier_1'\] names its list by list_id"),
        (
            {"audiences": {"tier_1": {"list_name": "T1", "folder": "f"}}},
            r"audiences\['tier_1'\] names its list by list_id or list_name",
        ),
        ({"audiences": {"tier_1": "../folders"}}, r"audiences\['tier_1'\]"),
        ({"audiences": {"tier_1": 7}}, r"audiences\['tier_1'\] must be a list id or"),
        ({"audience_column": ""}, "audience_column is empty"),
        ({"audience_column": None}, "audience_column must be a string"),
        ({"mode": "add_only"}, "mode 'add_only': an audience sync runs in mirror mode only"),
        ({"mode": "remove_only"}, "mirror mode only"),
        ({"table": None}, "exactly one source"),
        ({"batch_size": 1001}, "batch_size must be between 1 and 1000"),
    ],
)
def test_bad_arguments_fail_at_parse_time_naming_the_argument(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AccountAudienceSyncOperator(**{**GOOD, **changes})


@pytest.mark.parametrize(
    ("exclusion", "message"),
    [
        (
            {"table": "customers", "sql": "SELECT id FROM customers"},
            r"exclusions\[0\] names one source: table, sql or accounts_path; got \['table', 'sql'\]",
        ),
        (
            {"table": "customers", "accounts_path": "/c.csv"},
            r"exclusions\[0\] names one source.*got \['table', 'accounts_path'\]",
        ),
        ({"id_column": "id"}, r"exclusions\[0\] names one source.*got none"),
        (
            {"table": "customers", "id_col": "id"},
            r"exclusions\[0\] has keys \['id_col'\]; an exclusion takes",
        ),
        ("customers", r"exclusions\[0\] must be a mapping"),
    ],
)
def test_a_bad_exclusion_fails_at_parse_time_naming_it(exclusion: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AccountAudienceSyncOperator(**{**GOOD, "exclusions": [exclusion]})


def test_the_second_bad_exclusion_is_named_by_its_place() -> None:
    exclusions = [{"table": "customers"}, {"table": "a", "sql": "SELECT 1"}]
    with pytest.raises(ValueError, match=r"^exclusions\[1\] names one source"):
        AccountAudienceSyncOperator(**{**GOOD, "exclusions": exclusions})


def test_a_literal_exclusion_table_is_an_inlet_beside_the_source_table() -> None:
    """A DAG scheduled on the customers table runs the sync when the customers change."""
    task = AccountAudienceSyncOperator(
        **{**GOOD, "exclusions": [{"table": "customers", "sql_conn_id": "crm", "id_column": "account"}]}
    )
    assert len(task.inlets) == 2
    assert task.inlets == [warehouse_asset("wh", "targets"), warehouse_asset("crm", "customers")]


def test_an_exclusion_table_without_its_own_connection_is_on_the_task_s() -> None:
    task = AccountAudienceSyncOperator(**{**GOOD, "exclusions": [{"table": "customers"}]})
    assert task.inlets == [warehouse_asset("wh", "targets"), warehouse_asset("wh", "customers")]


@pytest.mark.parametrize(
    "exclusion",
    [
        {"sql": "SELECT id FROM customers", "sql_conn_id": "crm"},
        {"accounts_path": "/customers.csv", "file_format": "csv"},
        {"table": "{{ params.customers }}", "sql_conn_id": "crm"},
        {"table": "customers", "sql_conn_id": "{{ params.conn }}"},
    ],
)
def test_an_exclusion_that_is_no_known_table_is_no_inlet(exclusion: dict[str, Any]) -> None:
    task = AccountAudienceSyncOperator(**{**GOOD, "exclusions": [exclusion]})
    assert task.inlets == [warehouse_asset("wh", "targets")]


def test_the_audiences_are_in_the_mapping_s_order_without_priority() -> None:
    task = AccountAudienceSyncOperator(**GOOD)
    assert task._ordered() == [
        ("tier_1", "list-1"),
        ("tier_2", {"list_id": "list-2"}),
        ("tier_3", {"list_name": "T3"}),
    ]


def test_priority_reorders_the_audiences() -> None:
    task = AccountAudienceSyncOperator(**{**GOOD, "priority": ["tier_3", "tier_1", "tier_2"]})
    assert [value for value, _ in task._ordered()] == ["tier_3", "tier_1", "tier_2"]
    assert task._ordered()[0] == ("tier_3", {"list_name": "T3"})


def test_numeric_audience_values_compare_with_priority_as_text() -> None:
    task = AccountAudienceSyncOperator(
        **{**GOOD, "audiences": {1: "list-1", 2: "list-2"}, "priority": [2, 1]}
    )
    assert task._ordered() == [("2", "list-2"), ("1", "list-1")]


@pytest.mark.parametrize(
    "priority",
    [
        ["tier_1", "tier_2"],
        ["tier_1", "tier_2", "tier_3", "tier_4"],
        ["tier_1", "tier_1", "tier_2"],
        ["tier_1", "tier_2", "tier_9"],
        [],
    ],
)
def test_a_priority_that_does_not_name_each_audience_once_is_refused_at_parse(priority: list[str]) -> None:
    with pytest.raises(ValueError, match=r"priority \[.*\] must name each audience of audiences .* once"):
        AccountAudienceSyncOperator(**{**GOOD, "priority": priority})


def test_a_templated_priority_is_checked_once_rendered() -> None:
    task = AccountAudienceSyncOperator(**{**GOOD, "priority": ["{{ params.first }}", "tier_1", "tier_2"]})
    task.priority = ["tier_9", "tier_1", "tier_2"]
    with pytest.raises(ValueError, match=r"priority \[.*\] must name each audience"):
        task._ordered()


def test_templated_audiences_are_checked_once_rendered() -> None:
    task = AccountAudienceSyncOperator(**{**GOOD, "audiences": "{{ params.audiences }}"})
    assert task.audiences == "{{ params.audiences }}"
    task.audiences = {"tier_1": {"list_id": "list-1", "list_name": "T1"}}
    with pytest.raises(ValueError, match=r"audiences\['tier_1'\] names its list by list_id or list_name"):
        task._ordered()
    task.audiences = {}
    with pytest.raises(ValueError, match="audiences must map each audience value to its list"):
        task._ordered()


def test_a_list_from_an_upstream_task_is_checked_once_rendered() -> None:
    with DAG("d", schedule=None):
        ensure = CreateAccountListOperator(task_id="ensure", list_name="T1", folder_id="f")
        output: Any = ensure.output  # an XComArg, indexed as a DAG indexes it
        task = AccountAudienceSyncOperator(**{**GOOD, "audiences": {"tier_1": output["list_id"]}})
    assert task.upstream_task_ids == {"ensure"}
    task.audiences = {"tier_1": "list-1"}
    assert task._ordered() == [("tier_1", "list-1")]


def test_templated_options_are_checked_when_rendered() -> None:
    task = AccountAudienceSyncOperator(**{**GOOD, "mode": "{{ params.mode }}", "dry_run": "{{ params.dry }}"})
    task.mode, task.dry_run = "mirror", "true"
    options = task._sync_options({"run_id": "r"}, "")
    assert (options.mode, options.dry_run, options.run_id) == ("mirror", True, "r")
    task.dry_run = "nope"
    with pytest.raises(AirflowFailException, match="dry_run must be True or False"):
        task._sync_options({"run_id": "r"}, "")
    task.dry_run, task.mode = "false", "sync"
    with pytest.raises(AirflowFailException, match="mode must be one of"):
        task._sync_options({"run_id": "r"}, "")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"audiences": {"tier_1": {"list_id": "../folders"}}}, r"audiences\['tier_1'\]\['list_id'\]"),
        ({"audiences": {"tier_1": {"list_name": ""}}}, r"audiences\['tier_1'\]\['list_name'\]"),
        ({"audiences": {"tier_1": {"list_name": 7}}}, r"audiences\['tier_1'\]\['list_name'\]"),
        ({"folder_id": None}, r"lists \['T3'\] are given by name: set folder_id"),
        (
            {"audiences": {"tier_1": "list-1", "tier_2": {"list_id": "list-1"}}},
            "names the list .* more than once",
        ),
        ({"exclude_lists": ["list-2"]}, r"lists \['list-2'\] are both kept by this programme and excluded"),
        ({"exclude_lists": "list-9"}, "exclude_lists must be a list of list ids"),
        ({"exclude_lists": ["../folders"]}, r"exclude_lists\[0\]"),
        (
            {"exclusions": [{"table": "customers", "parameters": [1]}]},
            r"exclusions\[0\]: parameters are only",
        ),
        ({"exclusions": [{"accounts_path": "/c.json"}]}, r"exclusions\[0\]: Cannot tell the format"),
        (
            {"exclusions": [{"accounts_path": "/c.csv", "file_format": "xml"}]},
            r"exclusions\[0\]: file_format",
        ),
        (
            {"exclusions": [{"sql": "SELECT 1", "file_format": "csv"}]},
            r"exclusions\[0\]: file_format is only",
        ),
        ({"audiences": {1: "list-1", "1": "list-2"}}, r"names the audience values \['1'\] more than once"),
    ],
    ids=[
        "list-id-not-a-path-segment",
        "list-name-empty",
        "list-name-not-text",
        "list-name-without-folder",
        "same-list-twice",
        "list-kept-and-excluded",
        "exclude-lists-one-string",
        "exclude-lists-bad-id",
        "exclusion-parameters-without-sql",
        "exclusion-file-of-unknown-format",
        "exclusion-unknown-file-format",
        "exclusion-file-format-without-file",
        "audience-values-equal-as-text",
    ],
)
def test_a_bad_literal_argument_is_refused_at_parse_naming_it(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AccountAudienceSyncOperator(**{**GOOD, **changes})


def test_an_exclusion_known_only_at_run_time_is_not_checked_at_parse() -> None:
    with DAG("d", schedule=None):
        upstream = CreateAccountListOperator(task_id="upstream", list_name="T1", folder_id="f")
        task = AccountAudienceSyncOperator(
            **{**GOOD, "exclusions": [upstream.output, "{{ params.customers }}", {"table": "customers"}]}
        )
    assert task.upstream_task_ids == {"upstream"}


def test_lists_known_only_at_run_time_are_not_checked_together_at_parse() -> None:
    AccountAudienceSyncOperator(
        **{
            **GOOD,
            "audiences": {"tier_1": "{{ params.list }}", "tier_2": "list-2"},
            "exclude_lists": ["list-1"],
        }
    )
    AccountAudienceSyncOperator(
        **{**GOOD, "exclude_lists": ["{{ params.excluded }}"], "folder_id": "{{ params.f }}"}
    )


def test_the_audience_arguments_render_nested_templates() -> None:
    with DAG("d", schedule=None):
        task = AccountAudienceSyncOperator(
            task_id="a",
            audiences={"tier_1": "{{ params.l1 }}", "tier_2": {"list_name": "{{ params.n2 }}"}},
            audience_column="{{ params.col }}",
            priority=["{{ params.p1 }}", "tier_1"],
            folder_id="{{ params.folder }}",
            exclusions=[{"table": "{{ params.cust }}", "id_column": "{{ params.idc }}"}],
            exclude_lists=["{{ params.ex }}"],
            table="targets",
            sql_conn_id="wh",
            max_removals="{{ params.mr }}",
            lock_timeout="{{ params.lt }}",
        )
    params = {
        "l1": "list-1",
        "n2": "Tier 2",
        "col": "tier",
        "p1": "tier_2",
        "folder": "f-1",
        "cust": "customers",
        "idc": "account_id",
        "ex": "list-x",
        "mr": "None",
        "lt": "5",
    }
    task.render_template_fields({"params": params})  # type: ignore[arg-type]
    assert task.audiences == {"tier_1": "list-1", "tier_2": {"list_name": "Tier 2"}}
    assert (task.audience_column, task.priority, task.folder_id) == ("tier", ["tier_2", "tier_1"], "f-1")
    assert task.exclusions == [{"table": "customers", "id_column": "account_id"}]
    assert task.exclude_lists == ["list-x"]
    assert task._ordered() == [("tier_2", {"list_name": "Tier 2"}), ("tier_1", "list-1")]
    options = task._sync_options({"run_id": "r"}, "")  # type: ignore[arg-type]
    assert (options.max_removals, options.lock_timeout) == (None, 5)
