"""``abm_provider.warehouse.connections.sql_hook``: a connection id becomes its common-sql hook, a
``google_cloud_platform`` connection without the Google provider this provider's BigQuery hook, and
anything else an error that names the argument."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from airflow.providers.duckdb.hooks.duckdb import DuckDBHook

from abm_provider.warehouse.connections import sql_hook
from abm_provider.warehouse.dialects.bigquery_hook import BigQueryLoadHook


def test_a_connection_gets_its_own_providers_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_WH", json.dumps({"conn_type": "duckdb", "host": str(tmp_path / "wh.duckdb")})
    )
    assert isinstance(sql_hook("wh", "sql_conn_id"), DuckDBHook)


def test_a_google_cloud_connection_without_the_google_provider_gets_the_bigquery_hook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extra = {"project": "p", "is_anonymous": True}
    monkeypatch.setenv("AIRFLOW_CONN_GCP", json.dumps({"conn_type": "google_cloud_platform", "extra": extra}))
    hook = sql_hook("gcp", "sql_conn_id", {"location": "EU"})
    assert isinstance(hook, BigQueryLoadHook)
    assert hook.location == "EU"


def test_a_connection_whose_hook_is_no_sql_hook_names_the_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_API", json.dumps({"conn_type": "abm", "password": "key"}))
    with pytest.raises(TypeError, match=r"state_conn_id 'api' resolves to AbmHook, which is not a common"):
        sql_hook("api", "state_conn_id")


def test_a_connection_type_no_provider_knows_fails_as_airflow_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_ODD", json.dumps({"conn_type": "no_such_type"}))
    with pytest.raises(Exception, match="no_such_type"):
        sql_hook("odd", "sql_conn_id")
