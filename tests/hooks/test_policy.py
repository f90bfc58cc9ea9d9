"""The shared request policy without a server: settings, URL safety, error reading, retry rules."""

from __future__ import annotations

import pickle
from types import SimpleNamespace
from typing import Any

import pytest
import tenacity

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks import _policy as policy

KEY = "sk-live-0123456789abcdef"


def _conn(host: str | None = "https://api.example.com", password: str | None = KEY, **extra: Any) -> Any:
    return SimpleNamespace(conn_id="abm_test", host=host, port=None, password=password, extra_dejson=extra)


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
    assert policy.parse_retry_after(value) == expected


def test_retry_after_http_date_is_seconds_from_now() -> None:
    now = 1_800_000_000.0
    assert policy.parse_retry_after(policy.http_date(now + 10), now=now) == pytest.approx(10.0)
    assert policy.parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now=now) == 0.0
    assert policy.parse_retry_after("Thu, 32 Foo 2020 99:00:00 GMT", now=now) is None


# --- back-off ------------------------------------------------------------------------------------


def _state(attempt: int, error: BaseException | None) -> Any:
    outcome = tenacity.Future.construct(attempt, error, error is not None) if error else None
    return SimpleNamespace(attempt_number=attempt, outcome=outcome)


def test_backoff_grows_and_is_capped() -> None:
    wait = policy.BackoffWait(max_wait=3.0)
    first = [wait.backoff(1) for _ in range(50)]
    assert all(policy.INITIAL_WAIT <= w <= policy.INITIAL_WAIT + policy.JITTER for w in first)
    assert min(wait.backoff(3) for _ in range(50)) >= policy.INITIAL_WAIT * 4
    assert max(wait.backoff(30) for _ in range(50)) <= 3.0
    assert len({round(wait.backoff(2), 6) for _ in range(20)}) > 1, "jitter spreads the waits"


def test_wait_is_at_least_retry_after() -> None:
    err = AbmApiError(
        method="GET", path="/x", http_status=429, status=None, message="m", transient=True, retry_after=2.0
    )
    wait = policy.BackoffWait(max_wait=60)
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
    assert policy.failure_kind(status, sent=sent) == kind


def _answer(status: int, *, idempotent: bool = True, retry_after: str | None = None) -> AbmApiError:
    return policy.api_error(
        method="GET" if idempotent else "POST",
        path="/x",
        http_status=status,
        body=b"",
        content_type=None,
        request_id=None,
        retry_after=retry_after,
        idempotent=idempotent,
        redact=policy.Redactor([]),
    )


def test_retry_rules() -> None:
    budget = policy.RetryBudget(max_wait=60)
    assert not policy.should_retry(_answer(400), budget=budget, may_repeat_uncertain=True)
    assert not policy.should_retry(_answer(401), budget=budget, may_repeat_uncertain=True)
    assert not policy.should_retry(_answer(403), budget=budget, may_repeat_uncertain=True)
    assert policy.should_retry(_answer(429, idempotent=False), budget=budget, may_repeat_uncertain=False)
    assert policy.should_retry(_answer(503), budget=budget, may_repeat_uncertain=False)
    create_503 = _answer(503, idempotent=False)
    assert create_503.outcome_unknown
    assert not policy.should_retry(create_503, budget=budget, may_repeat_uncertain=False)
    assert policy.should_retry(create_503, budget=budget, may_repeat_uncertain=True)
    assert not policy.should_retry(ValueError("x"), budget=budget, may_repeat_uncertain=True)


def test_retry_after_beyond_max_wait_fails_at_once_and_says_why() -> None:
    err = _answer(429, retry_after="120")
    assert not policy.should_retry(err, budget=policy.RetryBudget(max_wait=30), may_repeat_uncertain=True)
    assert "retry after 120 s" in str(err) and "max_wait=30" in str(err)


# --- error bodies ----------------------------------------------------------------------------------


def test_documented_error_body() -> None:
    body = (
        b'{"error": {"code": 400, "message": "schedule too frequent", "status": "FAILED_PRECONDITION",'
        b' "details": [{"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations":'
        b' [{"field": "schedule", "description": "must fire at most once a day"}]}]}}'
    )
    parsed = policy.parse_error_body(400, body, "application/json")
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
    parsed = policy.parse_error_body(503, body)
    assert parsed.status == status
    assert parsed.message == message


def test_error_message_names_call_status_field_and_request_id() -> None:
    err = policy.api_error(
        method="POST",
        path="/exports/v1/exportJobs",
        http_status=400,
        body=b'{"error": {"message": "too often", "status": "FAILED_PRECONDITION", "details": '
        b'[{"fieldViolations": [{"field": "schedule", "description": "at most daily"}]}]}}',
        content_type="application/json",
        request_id="req-42",
        retry_after=None,
        idempotent=False,
        redact=policy.Redactor([]),
    )
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
    settings = policy.AbmSettings.from_connection(_conn(auth_type="basic"))
    basic_token = settings.auth_header()["Authorization"].split(" ", 1)[1]
    err = policy.api_error(
        method="GET",
        path="/x",
        http_status=401,
        body=f'{{"error": {{"message": "bad header Bearer {KEY} / Basic {basic_token}"}}}}'.encode(),
        content_type="application/json",
        request_id=None,
        retry_after=None,
        idempotent=True,
        redact=settings.redactor(),
    )
    assert KEY not in str(err) and basic_token not in str(err)
    assert "***" in str(err)


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
    assert policy.normalise_base_url(host) == expected


def test_port_field_is_appended() -> None:
    assert policy.normalise_base_url("api.example.com", 8443) == "https://api.example.com:8443"


@pytest.mark.parametrize(
    ("host", "words"),
    [
        ("http://api.example.com", "plain http://"),
        ("http://10.0.0.1", "plain http://"),
        ("ftp://api.example.com", "https://"),
        ("https://user:pw@api.example.com", "password field"),
        ("https://api.example.com/?x=1", "query"),
    ],
)
def test_unsafe_base_urls_are_refused(host: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        policy.normalise_base_url(host, where="connection 'abm_default'")


@pytest.mark.parametrize("bad", ["a/b", "..", ".", "a b", "x\ty", "id\n", "a\\b", ""])
def test_path_segment_refuses_what_could_change_the_path(bad: str) -> None:
    with pytest.raises(ValueError, match="list_id"):
        policy.path_segment(bad, "list_id")


def test_path_segment_encodes_the_rest() -> None:
    assert policy.path_segment("TACTIC_PERFORMANCE", "export_type") == "TACTIC_PERFORMANCE"
    assert policy.path_segment("a?b#c%d", "list_id") == "a%3Fb%23c%25d"
    with pytest.raises(ValueError, match="list_id must be a string"):
        policy.path_segment(5, "list_id")


def test_query_encoding() -> None:
    query = policy.encode_query(
        {"orderBy": "updateTime asc", "filter": "status=COMPLETE", "folderIds": ["a", "b"], "pageToken": None}
    )
    assert query == "orderBy=updateTime%20asc&filter=status%3DCOMPLETE&folderIds=a&folderIds=b"


def test_loggable_url_drops_the_signature() -> None:
    url = "https://bucket.s3.amazonaws.com/exports/x.csv?X-Amz-Signature=abc&X-Amz-Credential=def"
    assert policy.loggable_url(url) == "https://bucket.s3.amazonaws.com/exports/x.csv"


# --- settings --------------------------------------------------------------------------------------


def test_settings_defaults_and_bearer() -> None:
    settings = policy.AbmSettings.from_connection(_conn(host=None))
    assert settings.base_url == "https://api.terminusplatform.com"
    assert settings.budget == policy.RetryBudget(5, 60.0, 60.0)
    assert settings.verify is True
    assert settings.auth_header() == {"Authorization": f"Bearer {KEY}"}
    assert KEY not in repr(settings)


def test_hook_arguments_win_over_extra_and_form_keys_are_read() -> None:
    conn = _conn(**{"extra__abm__max_attempts": "7", "max_wait": 12, "timeout": "", "verify": "/etc/ca.pem"})
    settings = policy.AbmSettings.from_connection(conn, timeout=3)
    assert settings.budget == policy.RetryBudget(7, 12.0, 3.0)
    assert settings.verify == "/etc/ca.pem"
    assert policy.AbmSettings.from_connection(conn, max_attempts=2).budget.max_attempts == 2
    assert policy.AbmSettings.from_connection(_conn(verify="false")).verify is False


def test_basic_auth_sends_the_key_as_user_name() -> None:
    settings = policy.AbmSettings.from_connection(_conn(auth_type="Basic"))
    import base64

    token = settings.auth_header()["Authorization"].removeprefix("Basic ")
    assert base64.b64decode(token).decode() == f"{KEY}:"


@pytest.mark.parametrize(
    ("extra", "kwargs", "words"),
    [
        ({"max_attempts": "many"}, {}, "max_attempts must be a whole number"),
        ({"max_attempts": 0}, {}, "max_attempts must be >= 1"),
        ({}, {"max_wait": -1}, "max_wait must be a finite number >= 0"),
        ({"timeout": 0}, {}, "timeout must be greater than 0"),
        ({"auth_type": "digest"}, {}, "auth_type must be 'bearer' or 'basic'"),
        ({"verify": 3}, {}, "verify must be true, false or a CA bundle path"),
    ],
)
def test_bad_settings_name_the_setting_and_connection(
    extra: dict[str, Any], kwargs: dict[str, Any], words: str
) -> None:
    with pytest.raises(ValueError, match=words) as info:
        policy.AbmSettings.from_connection(_conn(**extra), **kwargs)
    assert "abm_test" in str(info.value)


def test_missing_key_is_reported() -> None:
    with pytest.raises(ValueError, match="no API key"):
        policy.AbmSettings.from_connection(_conn(password=None))


def test_transport_error_kinds() -> None:
    redact = policy.Redactor([KEY])
    before = policy.transport_error(
        method="POST", path="/x", exc=OSError("refused"), sent=False, idempotent=False, redact=redact
    )
    after = policy.transport_error(
        method="POST", path="/x", exc=TimeoutError(f"read {KEY}"), sent=True, idempotent=False, redact=redact
    )
    assert before.transient and not before.outcome_unknown and "could not connect" in str(before)
    assert after.transient and after.outcome_unknown and KEY not in str(after)


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
