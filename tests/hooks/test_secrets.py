"""The API key never leaves for anywhere but the API: not logs, not errors, not the storage origin."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks._pipeline import Prepared
from abm_provider.hooks.abm import AbmHook
from support.emulator_log import header, seen

TYPE = "TACTIC_PERFORMANCE"


def _forms(key: str) -> list[str]:
    """The key as sent: raw, and inside a Basic token."""
    return [key, base64.b64encode(f"{key}:".encode()).decode()]


def test_key_is_absent_from_logs_errors_and_storage_requests(
    abm: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.DEBUG)
    hook = AbmHook(retry_max_wait=3)
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


class _RecordingTransport:
    """Stands in for the hook's transport: records each request the download would send, sends none."""

    def __init__(self) -> None:
        self.sent: list[Prepared] = []

    @contextlib.contextmanager
    def stream(self, prepared: Prepared, total: float | None = None) -> Iterator[Any]:
        self.sent.append(prepared)
        raise prepared.fail("tls", "not sent: recorded by the test")
        yield  # pragma: no cover

    def close(self) -> None:
        pass


def test_auth_is_bound_to_the_api_origin(monkeypatch: pytest.MonkeyPatch) -> None:
    """A download link gets the key only on the API's own origin (scheme, host and port)."""
    conn = {"conn_type": "abm", "host": "https://api.example.com", "password": "k-12345"}
    monkeypatch.setenv("AIRFLOW_CONN_ABM_ORIGIN", json.dumps(conn))
    hook = AbmHook("abm_origin")
    recorder = _RecordingTransport()
    hook._transport = recorder  # type: ignore[assignment]

    def authorization(url: str) -> str | None:
        recorder.sent.clear()
        with pytest.raises(AbmApiError):
            hook.download(url, io.BytesIO())
        [prepared] = recorder.sent
        return prepared.headers.get("Authorization")

    assert authorization("https://api.example.com/exports/v1/x") == "Bearer k-12345"
    assert authorization("https://api.example.com:443/x") == "Bearer k-12345"
    for other in ("https://bucket.s3.amazonaws.com/x", "https://api.example.com:8443/x"):
        assert authorization(other) is None
    # Plain http to the API host is refused outright: nothing is sent, with or without the key.
    recorder.sent.clear()
    with pytest.raises(AbmApiError) as info:
        hook.download("http://api.example.com/x", io.BytesIO())
    assert info.value.kind == "unsafe_url" and recorder.sent == []
    assert "k-12345" not in repr(hook.settings)
