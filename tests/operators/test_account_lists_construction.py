"""Construction-time checks of the account-list operators: mistakes fail at DAG parse, not mid-run."""

from __future__ import annotations

import datetime

import pytest
from airflow.sdk.exceptions import AirflowFailException

from abm_provider.hooks.endpoints import folder_resource, list_resource
from abm_provider.operators.account_lists import (
    AddAccountsToListOperator,
    CreateAccountListFolderOperator,
    CreateAccountListOperator,
    RemoveAccountsFromListOperator,
)


@pytest.mark.parametrize("operator", [AddAccountsToListOperator, RemoveAccountsFromListOperator])
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of accounts, accounts_path or sql .*got none"),
        ({"accounts": [], "accounts_path": "/a.csv"}, "got \\['accounts', 'accounts_path'\\]"),
        ({"accounts_path": "/a.csv", "sql": "select 1", "sql_conn_id": "x"}, "exactly one"),
        ({"sql": "select 1"}, "sql needs sql_conn_id"),
        ({"accounts": [], "sql_conn_id": "x"}, "sql_conn_id is only used with sql"),
        ({"accounts": {"id": "001"}}, "not a dict"),
        ({"accounts": "001"}, "not a str"),
        ({"accounts": [], "batch_size": 1001}, "batch_size must be between 1 and 1000"),
        ({"accounts": [], "batch_size": 0}, "batch_size must be between 1 and 1000"),
        ({"accounts": [], "column_map": {"account_id": "x"}}, "unknown keys"),
        ({"accounts": [], "default_crm_type": "HUBSPOT"}, "default_crm_type"),
        ({"accounts": [], "max_rejected": -1}, "max_rejected must not be negative"),
        ({"accounts": [], "max_rejected": 1.0}, "max_rejected as a fraction must be in \\[0, 1\\)"),
        ({"accounts": [], "max_not_found": True}, "max_not_found must be an int \\(count\\) or a float"),
        ({"accounts_path": "/data/accounts.json"}, "set file_format"),
        ({"accounts_path": "{{ params.path }}", "file_format": "xlsx"}, "file_format must be 'csv' or"),
        ({"accounts": [], "rejects_path": "/a.csv", "rejects_base": "/b"}, "not both"),
    ],
)
def test_membership_operator_refuses_bad_arguments(operator, kwargs, message):
    with pytest.raises(ValueError, match=message):
        operator(task_id="t", list_id="l", **kwargs)


def test_templated_path_is_not_format_checked_until_rendered():
    op = AddAccountsToListOperator(task_id="t", list_id="l", accounts_path="{{ params.path }}")
    assert op.accounts_path == "{{ params.path }}"


def test_a_rendered_path_of_no_known_format_fails_without_retries():
    op = AddAccountsToListOperator(task_id="t", list_id="l", accounts_path="{{ params.path }}")
    op.accounts_path = "/data/accounts.json"  # as rendered
    with pytest.raises(AirflowFailException, match="set file_format"):
        op.build_source({})


@pytest.mark.parametrize("operator", [CreateAccountListFolderOperator, CreateAccountListOperator])
def test_create_operators_refuse_unknown_if_exists(operator):
    kwargs = (
        {"folder_name": "f"}
        if operator is CreateAccountListFolderOperator
        else {"list_name": "l", "folder_id": "f"}
    )
    with pytest.raises(ValueError, match="if_exists must be one of"):
        operator(task_id="t", if_exists="replace", **kwargs)


def test_template_fields_cover_what_dag_authors_template_but_not_account_data():
    add_fields = set(AddAccountsToListOperator.template_fields)
    assert {"list_id", "accounts_path", "sql", "column_map", "rejects_path", "rejects_base"} <= add_fields
    assert "accounts" not in add_fields
    assert set(RemoveAccountsFromListOperator.template_fields) == add_fields
    assert set(CreateAccountListFolderOperator.template_fields) == {"folder_name", "folder_access"}
    assert set(CreateAccountListOperator.template_fields) == {"list_name", "folder_id"}


def test_xcom_sources_become_upstream_dependencies():
    from airflow.sdk import DAG, task

    with DAG("xcom_deps", schedule=None, start_date=datetime.datetime(2026, 1, 1)) as dag:

        @task
        def accounts():
            return [{"id": "001000000000001"}]

        folder = CreateAccountListFolderOperator(task_id="folder", folder_name="f")
        lst = CreateAccountListOperator(task_id="list", list_name="l", folder_id=folder.output["folderId"])
        produced = accounts()
        add = AddAccountsToListOperator(task_id="add", list_id=lst.output["listId"], accounts=produced)
    assert dag.get_task("list").upstream_task_ids == {"folder"}
    assert add.upstream_task_ids == {"list", "accounts"}


def test_list_endpoint_shapes_are_normalised_to_create_shapes():
    listed_folder = {
        "uuid": "f1",
        "name": "Q4",
        "orgUuid": "o",
        "folderAccess": "PUBLIC",
        "createdMomentUtc": "t",
    }
    assert folder_resource(listed_folder) == {"folderId": "f1", "displayName": "Q4", "folderAccess": "PUBLIC"}
    created_folder = {"folderId": "f1", "displayName": "Q4", "folderAccess": "PUBLIC"}
    assert folder_resource(created_folder) == created_folder
    listed_list = {
        "id": "l1",
        "displayName": "Top",
        "createTime": "t",
        "estimatedAccountsCount": "3",
        "folderId": "f1",
    }
    assert list_resource(listed_list) == {"listId": "l1", "listName": "Top", "folderId": "f1"}
    created_list = {"listId": "l1", "listName": "Top", "folderId": "f1"}
    assert list_resource(created_list) == created_list
    assert list_resource({"id": "l1", "displayName": "Top"}, "f9")["folderId"] == "f9"
