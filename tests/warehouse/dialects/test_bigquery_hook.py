"""``abm_provider.warehouse.dialects.bigquery_hook``: a ``google_cloud_platform`` connection's credentials
read the way the Google provider reads them, with no network (a made-up service account key, and
``google.auth.default`` replaced)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth.credentials import AnonymousCredentials
from google.oauth2 import service_account

from abm_provider.warehouse.dialects.bigquery_hook import (
    DEFAULT_SCOPES,
    BigQueryLoadHook,
    bigquery_client,
    credentials_and_project,
    extra_field,
)
from abm_provider.warehouse.dialects.bigquery_session import SessionConnection


@pytest.fixture(scope="module")
def key_info() -> dict[str, str]:
    """A service account key as Google issues it, with a new private key (never sent anywhere)."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return {
        "type": "service_account",
        "project_id": "key-project",
        "private_key_id": "abc123",
        "private_key": pem,
        "client_email": "loader@key-project.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token",
    }


def test_an_anonymous_connection_names_its_project() -> None:
    credentials, project = credentials_and_project({"is_anonymous": True, "project": "p"})
    assert isinstance(credentials, AnonymousCredentials) and project == "p"
    credentials, _ = credentials_and_project({"is_anonymous": "true", "project": "p"})
    assert isinstance(credentials, AnonymousCredentials)


def test_a_key_as_a_json_object_or_as_text_gives_its_service_account(key_info: dict[str, str]) -> None:
    for keyfile in (key_info, json.dumps(key_info)):
        credentials, project = credentials_and_project({"keyfile_dict": keyfile})
        assert isinstance(credentials, service_account.Credentials)
        assert credentials.service_account_email == key_info["client_email"]
        assert project == "key-project"
        assert tuple(credentials.scopes) == DEFAULT_SCOPES


def test_a_key_file_with_the_providers_prefixed_extras_and_scopes(
    key_info: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "key.json"
    path.write_text(json.dumps(key_info), encoding="utf-8")
    credentials, project = credentials_and_project(
        {
            "extra__google_cloud_platform__key_path": str(path),
            "extra__google_cloud_platform__project": "other-project",
            "extra__google_cloud_platform__scope": "https://a.example/x, https://a.example/y",
        }
    )
    assert isinstance(credentials, service_account.Credentials)
    assert project == "other-project"  # the connection's project wins over the key's
    assert list(credentials.scopes) == ["https://a.example/x", "https://a.example/y"]


def test_without_a_key_the_environment_s_credentials_are_used(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Any] = []
    found = object()

    def default(scopes: Any = None) -> tuple[object, str]:
        asked.append(scopes)
        return found, "env-project"

    monkeypatch.setattr("google.auth.default", default)
    assert credentials_and_project({}) == (found, "env-project")
    assert credentials_and_project({"project": "mine", "key_path": ""}) == (found, "mine")
    assert asked == [list(DEFAULT_SCOPES)] * 2


def test_settings_that_exclude_each_other_or_a_p12_key_are_refused(key_info: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="key_path, is_anonymous are exclusive"):
        credentials_and_project({"key_path": "/k.json", "is_anonymous": True})
    with pytest.raises(ValueError, match="not a legacy P12 key"):
        credentials_and_project({"key_path": "/k.p12"})
    with pytest.raises(ValueError, match="extra 'project'"):
        bigquery_client(AnonymousCredentials(), None)


def test_a_plain_extra_wins_over_its_prefixed_form_and_empty_text_is_unset() -> None:
    extras = {"project": "", "extra__google_cloud_platform__project": "prefixed", "scope": "s"}
    assert extra_field(extras, "project") == "prefixed"
    assert extra_field({**extras, "project": "plain"}, "project") == "plain"
    assert extra_field(extras, "key_path") is None


def test_the_hook_gives_a_session_connection_with_the_connection_s_project(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_BQ_TEST",
        json.dumps(
            {
                "conn_type": "google_cloud_platform",
                "extra": {"is_anonymous": True, "project": "p", "location": "EU"},
            }
        ),
    )
    hook = BigQueryLoadHook(gcp_conn_id="bq_test")
    assert (hook.conn_type, hook.placeholder, hook.get_conn_id()) == ("google_cloud_platform", "?", "bq_test")
    conn = hook.get_conn()  # no request: the session starts with the first statement
    assert isinstance(conn, SessionConnection)
    assert (conn.project, conn.location, conn.session_id) == ("p", "EU", None)
    conn.client.close()


def test_the_uri_is_sqlalchemy_bigquerys_and_needs_the_project(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_BQ", json.dumps({"conn_type": "google_cloud_platform", "extra": {"project": "p1"}})
    )
    monkeypatch.setenv("AIRFLOW_CONN_BQ_NONE", json.dumps({"conn_type": "google_cloud_platform"}))
    assert BigQueryLoadHook("bq").get_uri() == "bigquery://p1"
    with pytest.raises(ValueError, match="'bq_none' names no project: set its extra 'project'"):
        BigQueryLoadHook("bq_none").get_uri()
