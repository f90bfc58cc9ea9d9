"""The API key never leaves for anywhere but the API: not logs, not errors, not the storage origin."""

from __future__ import annotations

import base64
import io
import json
import logging
from typing import Any

import pytest
import requests

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks._policy import AbmSettings
from abm_provider.hooks._transport import OriginBoundAuth
from abm_provider.hooks.abm import AbmHook

from .emulator_log import header, seen

TYPE = "TACTIC_PERFORMANCE"


def _forms(key: str) -> list[str]:
    """The key as sent: raw, and inside a Basic token."""
    return [key, base64.b64encode(f"{key}:".encode()).decode()]


def test_key_is_absent_from_logs_errors_and_storage_requests(
    abm: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.DEBUG)
    hook = AbmHook(max_wait=3)
    errors: list[str] = []

    assert hook.test_connection()[0]
    abm.inject_fault(
        origin="api", method="POST", path="/accountLists/v2/folders", kind="status", status=503, when="after"
    )
    hook.create_folder("f")
    abm.inject_fault(
        origin="api", method="GET", path="/accountLists/v2/folders", kind="status", status=429, retryAfter="1"
    )
    list(hook.iter_folders())
    hook.create_export_job(TYPE, "0 6 1 * *")
    abm.fire(TYPE, outcome="COMPLETE", sizeBytes=40_000)
    execution = next(hook.iter_executions(TYPE, state="COMPLETE"))
    abm.inject_fault(
        origin="storage", method="GET", path="/.*", kind="disconnect_mid_body", afterBytes=10_000
    )
    hook.download(execution["downloadUri"], io.BytesIO())
    for call in (
        lambda: hook.create_export_job(TYPE, "0 6 1 * *"),
        lambda: hook.create_export_job("DISPLAY_TACTIC_ACCOUNT_PERFORMANCE", "* * * * *"),
        lambda: list(hook.iter_executions("DISPLAY_TACTIC_ACCOUNT_PERFORMANCE")),
    ):
        with pytest.raises(AbmApiError) as info:
            call()
        errors.append(str(info.value))
        errors.append(repr(info.value))
    abm.advance(7 * 24 * 3600)
    with pytest.raises(AbmApiError) as expired:
        hook.download(execution["downloadUri"], io.BytesIO())
    errors.append(str(expired.value))
    for mode in ("bearer", "basic"):
        conn = {
            "conn_type": "abm",
            "host": abm.base_url,
            "password": abm.api_key + "x",
            "extra": {"auth_type": mode},
        }
        monkeypatch.setenv("AIRFLOW_CONN_ABM_WRONG", json.dumps(conn))
        ok, message = AbmHook("abm_wrong").test_connection()
        assert not ok
        errors.append(message)
    errors.append(repr(hook.settings))

    logged = caplog.text + "\n".join(r.getMessage() for r in caplog.records)
    assert "503" in logged and "429" in logged, "the retries were logged"
    for secret in _forms(abm.api_key) + _forms(abm.api_key + "x"):
        assert secret not in logged
        for text in errors:
            assert secret not in text

    storage = seen(abm, origin="storage")
    api = seen(abm, origin="api")
    assert len(storage) >= 3 and api
    for entry in storage:
        assert header(entry, "Authorization") is None
        assert abm.api_key not in json.dumps(entry)
    assert any(abm.api_key in (header(e, "Authorization") or "") for e in api), "the API does get the key"


def test_auth_is_bound_to_the_api_origin() -> None:
    conn = type(
        "C", (), {"conn_id": "c", "host": "https://api.example.com", "port": None, "password": "k-12345"}
    )
    conn.extra_dejson = {}
    settings = AbmSettings.from_connection(conn)
    auth = OriginBoundAuth(settings)

    def prepared(url: str) -> requests.PreparedRequest:
        return requests.Request("GET", url, headers={"Authorization": "Bearer stale"}).prepare()

    assert auth(prepared("https://api.example.com/exports/v1/x")).headers["Authorization"] == "Bearer k-12345"
    assert auth(prepared("https://api.example.com:443/x")).headers["Authorization"] == "Bearer k-12345"
    for other in (
        "https://bucket.s3.amazonaws.com/x",
        "http://api.example.com/x",
        "https://api.example.com:8443/x",
    ):
        assert "Authorization" not in auth(prepared(other)).headers
    assert "k-12345" not in repr(auth)
