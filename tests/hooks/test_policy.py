"""The shared request policy without a server: settings, URL safety, error reading, retry rules.

The rules live in :mod:`abm_provider.hooks.settings` (settings and bounds), :mod:`abm_provider.common.urls`
(URL rules and redaction) and :mod:`abm_provider.hooks._pipeline` (reading answers, retrying).
"""

from __future__ import annotations

import base64
import email.utils
import json
import logging
import pickle
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
import tenacity

from abm_provider.common.urls import encode_query, normalise_base_url, path_segment, safe_url
from abm_provider.exceptions import AbmApiError
from abm_provider.hooks import _pipeline as pipeline
from abm_provider.hooks import _responses as bodies
from abm_provider.hooks._pipeline import Answer, Call, Pipeline
from abm_provider.hooks.settings import AbmSettings, Limits

KEY = "sk-live-0123456789abcdef"


def _conn(host: str | None = "https://api.example.com", password: str | None = KEY, **extra: Any) -> Any:
    return SimpleNamespace(conn_id="abm_test", host=host, port=None, password=password, extra_dejson=extra)


def _pipe(conn: Any = None, **limits: Any) -> Pipeline:
    return Pipeline(AbmSettings.from_connection(conn or _conn(), **limits))


def _http_date(timestamp: float) -> str:
    return email.utils.format_datetime(datetime.fromtimestamp(timestamp, tz=UTC), usegmt=True)


# --- Retry-After ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2", 2.0),
        (" 3 ", 3.0),
        ("0", 0.0),
        ("1.5", 1.5),
        ("-4", 0.0),
        ("", None),
        (None, None),
        ("soon", None),
    ],
)
def test_retry_after_seconds(value: str | None, expected: float | None) -> None:
    assert bodies.parse_retry_after(value) == expected


def test_retry_after_http_date_is_seconds_from_now() -> None:
    now = 1_800_000_000.0
    assert bodies.parse_retry_after(_http_date(now + 10), now=now) == pytest.approx(10.0)
    assert bodies.parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now=now) == 0.0
    assert bodies.parse_retry_after("Thu, 32 Foo 2020 99:00:00 GMT", now=now) is None


# --- back-off ------------------------------------------------------------------------------------


def _state(attempt: int, error: BaseException | None) -> Any:
    outcome = tenacity.Future.construct(attempt, error, error is not None) if error else None
    return SimpleNamespace(attempt_number=attempt, outcome=outcome)


def test_backoff_grows_and_is_capped() -> None:
    pipe = _pipe(retry_max_wait=3.0)
    first = [pipe.backoff(1, None) for _ in range(50)]
    assert all(pipeline.INITIAL_WAIT <= w <= pipeline.INITIAL_WAIT + pipeline.JITTER for w in first)
    assert min(pipe.backoff(3, None) for _ in range(50)) >= pipeline.INITIAL_WAIT * 4
    assert max(pipe.backoff(30, None) for _ in range(50)) <= 3.0
    assert len({round(pipe.backoff(2, None), 6) for _ in range(20)}) > 1, "jitter spreads the waits"


def test_wait_is_at_least_retry_after() -> None:
    err = AbmApiError(
        method="GET", path="/x", http_status=429, status=None, message="m", transient=True, retry_after=2.0
    )
    wait = _pipe(retry_max_wait=60).retrying(logging.getLogger("test"))["wait"]
    assert all(wait(_state(1, err)) >= 2.0 for _ in range(20))
    plain = AbmApiError(method="GET", path="/x", http_status=503, status=None, message="m", transient=True)
    assert wait(_state(1, plain)) < 2.0


# --- classification --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "sent", "kind"),
    [
        (400, True, "final"),
        (401, True, "final"),
        (403, True, "final"),
        (404, True, "final"),
        (409, True, "final"),
        (423, True, "refused"),
        (429, True, "refused"),
        (500, True, "uncertain"),
        (501, True, "final"),
        (502, True, "uncertain"),
        (503, True, "uncertain"),
        (504, True, "uncertain"),
        (None, False, "refused"),
        (None, True, "uncertain"),
    ],
)
def test_failure_kind(status: int | None, sent: bool, kind: str) -> None:
    assert pipeline.failure_kind(status, sent=sent) == kind


def _answer(
    status: int,
    *,
    idempotent: bool = True,
    retry_after: str | None = None,
    pipe: Pipeline | None = None,
) -> AbmApiError:
    """The error an answer of ``status`` amounts to; a create (not idempotent) must not repeat blindly."""
    call = Call("GET", "/x") if idempotent else Call("POST", "/x", on_unknown="raise")
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    with pytest.raises(AbmApiError) as info:
        (pipe or _pipe()).interpret(call, Answer(status, headers, b""))
    return info.value


def test_retry_rules() -> None:
    pipe = _pipe(retry_max_wait=60)
    assert not pipe.may_retry(_answer(400), 1, "repeat")
    assert not pipe.may_retry(_answer(401), 1, "repeat")
    assert not pipe.may_retry(_answer(403), 1, "repeat")
    assert pipe.may_retry(_answer(429, idempotent=False), 1, "raise")
    assert pipe.may_retry(_answer(503), 1, "raise")
    create_503 = _answer(503, idempotent=False)
    assert create_503.outcome_unknown
    assert not pipe.may_retry(create_503, 1, "raise")
    assert pipe.may_retry(create_503, 1, "repeat")
    assert not pipe.may_retry(ValueError("x"), 1, "repeat")


def test_attempts_are_bounded_and_counted() -> None:
    pipe = _pipe(max_attempts=3)
    err = _answer(503)
    assert pipe.may_retry(err, 2) and err.attempts == 2
    assert not pipe.may_retry(err, 3) and err.attempts == 3
    assert "after 3 attempts" in str(err)


def test_retry_after_beyond_retry_max_wait_fails_at_once_and_says_why() -> None:
    pipe = _pipe(retry_max_wait=30)
    err = _answer(429, retry_after="120", pipe=pipe)
    assert not pipe.may_retry(err, 1, "repeat")
    assert "retry after 120 s" in str(err) and "retry_max_wait=30" in str(err)


# --- error bodies ----------------------------------------------------------------------------------


def test_documented_error_body() -> None:
    body = (
        b'{"error": {"code": 400, "message": "schedule too frequent", "status": "FAILED_PRECONDITION",'
        b' "details": [{"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations":'
        b' [{"field": "schedule", "description": "must fire at most once a day"}]}]}}'
    )
    parsed = bodies.parse_error_body(400, body)
    assert parsed.status == "FAILED_PRECONDITION"
    assert parsed.message == "schedule too frequent"
    assert parsed.field_violations == [{"field": "schedule", "description": "must fire at most once a day"}]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"", None, "Service Unavailable"),
        (b"upstream connect error", None, "upstream connect error"),
        (b"<html><body><h1>502 Bad Gateway</h1></body></html>", None, "502 Bad Gateway"),
        (
            b"<?xml version='1.0'?><Error><Code>AccessDenied</Code>"
            b"<Message>Request has expired</Message></Error>",
            "AccessDenied",
            "Request has expired",
        ),
        (b'{"detail": "Not Found"}', None, "Not Found"),
        (b'{"error": "boom"}', None, "boom"),
        (b"{not json", None, "{not json"),
    ],
)
def test_other_error_bodies_still_give_a_message(body: bytes, status: str | None, message: str) -> None:
    parsed = bodies.parse_error_body(503, body)
    assert parsed.status == status
    assert parsed.message == message


def test_error_message_names_call_status_field_and_request_id() -> None:
    body = (
        b'{"error": {"message": "too often", "status": "FAILED_PRECONDITION", "details": '
        b'[{"fieldViolations": [{"field": "schedule", "description": "at most daily"}]}]}}'
    )
    answer = Answer(400, {"Content-Type": "application/json", "x-request-id": "req-42"}, body)
    with pytest.raises(AbmApiError) as info:
        _pipe().interpret(Call("POST", "/exports/v1/exportJobs", on_unknown="raise"), answer)
    err = info.value
    assert str(err) == (
        "POST /exports/v1/exportJobs failed: 400 FAILED_PRECONDITION: too often (schedule: at most daily) "
        "[request id req-42]"
    )
    assert not err.transient and not err.outcome_unknown
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.http_status, copy.status, copy.field_violations, copy.request_id) == (
        400,
        "FAILED_PRECONDITION",
        [{"field": "schedule", "description": "at most daily"}],
        "req-42",
    )
    assert str(copy) == str(err)


def test_echoed_key_is_redacted_from_error_text() -> None:
    settings = AbmSettings.from_connection(_conn(auth_type="basic"))
    basic_token = settings.auth_header()["Authorization"].split(" ", 1)[1]
    body = f'{{"error": {{"message": "bad header Bearer {KEY} / Basic {basic_token}"}}}}'.encode()
    with pytest.raises(AbmApiError) as info:
        Pipeline(settings).interpret(Call("GET", "/x"), Answer(401, {}, body))
    assert KEY not in str(info.value) and basic_token not in str(info.value)
    assert "***" in str(info.value)


# --- URLs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        (None, "https://api.terminusplatform.com"),
        ("", "https://api.terminusplatform.com"),
        ("api.example.com", "https://api.example.com"),
        ("https://api.example.com/", "https://api.example.com"),
        ("https://gw.example.com/abm/", "https://gw.example.com/abm"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://127.5.6.7:1", "http://127.5.6.7:1"),
        ("http://[::1]:9000", "http://[::1]:9000"),
        ("http://localhost:9000", "http://localhost:9000"),
    ],
)
def test_base_url(host: str | None, expected: str) -> None:
    assert normalise_base_url(host) == expected


def test_port_field_is_appended() -> None:
    assert normalise_base_url("api.example.com", 8443) == "https://api.example.com:8443"
    # The form's port field, the URL's own port, or both when they agree; the UI sends 0 for "none".
    assert normalise_base_url("http://127.0.0.1", 8080) == "http://127.0.0.1:8080"
    assert normalise_base_url("http://127.0.0.1:8080", 8080) == "http://127.0.0.1:8080"
    assert normalise_base_url("http://127.0.0.1:8080", 0) == "http://127.0.0.1:8080"


def test_a_port_field_that_contradicts_the_url_is_refused() -> None:
    with pytest.raises(ValueError, match="has port 8080 but the port field says 9090") as info:
        normalise_base_url("http://127.0.0.1:8080", 9090, where="connection 'abm_default'")
    assert "connection 'abm_default'" in str(info.value)


@pytest.mark.parametrize(
    ("host", "words"),
    [
        ("http://api.example.com", "plain http://"),
        ("http://10.0.0.1", "plain http://"),
        ("ftp://api.example.com", "scheme 'ftp'; only https"),
        ("https://user:pw@api.example.com", "user name or password"),
        ("https://api.example.com/?x=1", "query"),
    ],
)
def test_unsafe_base_urls_are_refused(host: str, words: str) -> None:
    with pytest.raises(ValueError, match=words) as info:
        normalise_base_url(host, where="connection 'abm_default'")
    assert "connection 'abm_default'" in str(info.value)


@pytest.mark.parametrize("bad", ["a/b", "..", ".", "a b", "x\ty", "id\n", "a\\b", ""])
def test_path_segment_refuses_what_could_change_the_path(bad: str) -> None:
    with pytest.raises(ValueError, match="list_id"):
        path_segment(bad, "list_id")


def test_path_segment_encodes_the_rest() -> None:
    assert path_segment("TACTIC_PERFORMANCE", "export_type") == "TACTIC_PERFORMANCE"
    assert path_segment("a?b#c%d", "list_id") == "a%3Fb%23c%25d"
    with pytest.raises(ValueError, match="list_id must be a string"):
        path_segment(5, "list_id")


def test_query_encoding() -> None:
    query = encode_query(
        {"orderBy": "updateTime asc", "filter": "status=COMPLETE", "folderIds": ["a", "b"], "pageToken": None}
    )
    assert query == "orderBy=updateTime%20asc&filter=status%3DCOMPLETE&folderIds=a&folderIds=b"


def test_safe_url_drops_the_signature() -> None:
    url = "https://bucket.s3.amazonaws.com/exports/x.csv?X-Amz-Signature=abc&X-Amz-Credential=def"
    shown = safe_url(url)
    assert shown == "https://bucket.s3.amazonaws.com/exports/x.csv?<redacted>"
    assert "abc" not in shown and "def" not in shown


# --- settings --------------------------------------------------------------------------------------


def test_settings_defaults_and_bearer() -> None:
    settings = AbmSettings.from_connection(_conn(host=None))
    assert settings.base_url == "https://api.terminusplatform.com"
    assert settings.limits == Limits()
    limits = settings.limits
    assert (limits.max_attempts, limits.retry_max_wait, limits.request_timeout) == (5, 60.0, 60.0)
    assert settings.verify is True
    assert settings.auth_header() == {"Authorization": f"Bearer {KEY}"}
    assert KEY not in repr(settings)


def test_hook_arguments_win_over_extra_and_form_keys_are_read() -> None:
    conn = _conn(
        **{
            "extra__abm__max_attempts": "7",
            "retry_max_wait": 12,
            "request_timeout": "",
            "verify": "/etc/ca.pem",
        }
    )
    settings = AbmSettings.from_connection(conn, request_timeout=3)
    limits = settings.limits
    assert (limits.max_attempts, limits.retry_max_wait, limits.request_timeout) == (7, 12.0, 3.0)
    assert settings.verify == "/etc/ca.pem"
    assert AbmSettings.from_connection(conn, max_attempts=2).limits.max_attempts == 2
    assert AbmSettings.from_connection(_conn(verify="false")).verify is False


def test_deprecated_extra_names_still_work_and_warn() -> None:
    """Connections saved for the previous release carry ``max_wait`` and ``timeout`` in their extra."""
    conn = _conn(max_wait=12, extra__abm__timeout="4")
    with pytest.warns(DeprecationWarning, match="'max_wait' is deprecated") as warned:
        settings = AbmSettings.from_connection(conn)
    assert any("'timeout' is deprecated" in str(w.message) for w in warned)
    assert (settings.limits.retry_max_wait, settings.limits.request_timeout) == (12.0, 4.0)
    new_wins = _conn(max_wait=12, retry_max_wait=7)
    with pytest.warns(DeprecationWarning):
        assert AbmSettings.from_connection(new_wins).limits.retry_max_wait == 7.0


def test_page_token_memory_is_now_page_cursor_memory() -> None:
    """Airflow masks an extra named like a secret ("token"): the form showed it as ***."""
    with pytest.warns(
        DeprecationWarning, match="'page_token_memory' is deprecated, use 'page_cursor_memory'"
    ):
        settings = AbmSettings.from_connection(_conn(page_token_memory=50))
    assert settings.limits.page_cursor_memory == 50


def test_no_connection_setting_is_named_like_a_secret() -> None:
    """Airflow hides the value of every extra whose name looks sensitive, in the UI, the API and logs."""
    from airflow.sdk._shared.secrets_masker import should_hide_value_for_key

    import abm_provider

    conn_type = next(t for t in abm_provider.get_provider_info()["connection-types"] if t["conn-fields"])
    masked = [name for name in conn_type["conn-fields"] if should_hide_value_for_key(name)]
    assert masked == []


def test_deprecated_hook_arguments_still_work_and_warn(monkeypatch: pytest.MonkeyPatch) -> None:
    from abm_provider.hooks.abm import AbmAsyncHook, AbmHook

    conn = {"conn_type": "abm", "host": "https://api.example.com", "password": KEY}
    monkeypatch.setenv("AIRFLOW_CONN_ABM_DEFAULT", json.dumps(conn))
    with pytest.warns(DeprecationWarning) as warned:
        hook = AbmHook(max_wait=3, timeout=4)
    messages = [str(w.message) for w in warned]
    assert any("'max_wait' is deprecated" in m for m in messages)
    assert any("'timeout' is deprecated" in m for m in messages)
    assert (hook.settings.limits.retry_max_wait, hook.settings.limits.request_timeout) == (3.0, 4.0)
    with pytest.warns(DeprecationWarning, match="'max_wait' is deprecated"):
        assert AbmAsyncHook(max_wait=3).hook_params == {"retry_max_wait": 3}


def test_basic_auth_sends_the_key_as_user_name() -> None:
    settings = AbmSettings.from_connection(_conn(auth_type="Basic"))
    token = settings.auth_header()["Authorization"].removeprefix("Basic ")
    assert base64.b64decode(token).decode() == f"{KEY}:"


@pytest.mark.parametrize(
    ("extra", "kwargs", "words"),
    [
        ({"max_attempts": "many"}, {}, "max_attempts must be a whole number"),
        ({"max_attempts": 0}, {}, "max_attempts must be between 1 and"),
        ({}, {"retry_max_wait": -1}, "retry_max_wait must be between 0 and"),
        ({}, {"retry_max_wait": float("inf")}, "retry_max_wait must be between 0 and"),
        ({"request_timeout": 0}, {}, "request_timeout must be between 0.01 and"),
        ({"auth_type": "digest"}, {}, "auth_type must be 'bearer' or 'basic'"),
        ({"verify": 3}, {}, "verify must be true, false or a CA bundle path"),
    ],
)
def test_bad_settings_name_the_setting_and_connection(
    extra: dict[str, Any], kwargs: dict[str, Any], words: str
) -> None:
    with pytest.raises(ValueError, match=words) as info:
        AbmSettings.from_connection(_conn(**extra), **kwargs)
    assert "abm_test" in str(info.value)


def test_missing_key_is_reported() -> None:
    with pytest.raises(ValueError, match="no API key"):
        AbmSettings.from_connection(_conn(password=None))


def test_transport_error_kinds() -> None:
    """What the transports raise for a request that got no answer, through the prepared request."""
    pipe = _pipe()
    create = pipe.prepare(Call("POST", "/x", body={"a": 1}, on_unknown="raise"))
    before = create.fail("connect", "OSError: refused", False)
    after = create.fail("lost", f"TimeoutError: read {KEY}")
    assert before.transient and not before.outcome_unknown and "could not connect" in str(before)
    assert after.transient and after.outcome_unknown and KEY not in str(after)
    assert (before.kind, after.kind) == ("connect", "lost")


def test_many_field_violations_are_summarised_in_the_message() -> None:
    violations = [{"field": f"accounts[{i}].crmOrgId", "description": "is required"} for i in range(1000)]
    err = AbmApiError(
        method="POST",
        path="/x",
        http_status=400,
        status="INVALID_ARGUMENT",
        message="m",
        field_violations=violations,
    )
    assert "accounts[4].crmOrgId" in str(err) and "accounts[5].crmOrgId" not in str(err)
    assert "and 995 more in .field_violations" in str(err)
    assert len(str(err)) < 400 and len(err.field_violations) == 1000
