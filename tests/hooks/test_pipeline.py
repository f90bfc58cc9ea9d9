"""``abm_provider.hooks._pipeline``: reading answers and retrying, without a server.

``Retry-After`` in seconds or as a date, capped exponential back-off, which failures are retried and
how many attempts a call gets, the error body read into a message that names the call, the status,
the field and the request id (never the key), and what a request that got no answer becomes.
"""

from __future__ import annotations

import email.utils
import logging
import pickle
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
import tenacity

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks import _pipeline as pipeline
from abm_provider.hooks import _responses as bodies
from abm_provider.hooks._pipeline import Answer, Call, Pipeline
from abm_provider.hooks.settings import AbmSettings
from support.abm_connections import KEY, abm_connection, abm_pipeline


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
    pipe = abm_pipeline(retry_max_wait=3.0)
    first = [pipe.backoff(1, None) for _ in range(50)]
    assert all(pipeline.INITIAL_WAIT <= w <= pipeline.INITIAL_WAIT + pipeline.JITTER for w in first)
    assert min(pipe.backoff(3, None) for _ in range(50)) >= pipeline.INITIAL_WAIT * 4
    assert max(pipe.backoff(30, None) for _ in range(50)) <= 3.0
    assert len({round(pipe.backoff(2, None), 6) for _ in range(20)}) > 1, "jitter spreads the waits"


def test_wait_is_at_least_retry_after() -> None:
    err = AbmApiError(
        method="GET", path="/x", http_status=429, status=None, message="m", transient=True, retry_after=2.0
    )
    wait = abm_pipeline(retry_max_wait=60).retrying(logging.getLogger("test"))["wait"]
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
        (pipe or abm_pipeline()).interpret(call, Answer(status, headers, b""))
    return info.value


def test_retry_rules() -> None:
    pipe = abm_pipeline(retry_max_wait=60)
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
    pipe = abm_pipeline(max_attempts=3)
    err = _answer(503)
    assert pipe.may_retry(err, 2) and err.attempts == 2
    assert not pipe.may_retry(err, 3) and err.attempts == 3
    assert "after 3 attempts" in str(err)


def test_retry_after_beyond_retry_max_wait_fails_at_once_and_says_why() -> None:
    pipe = abm_pipeline(retry_max_wait=30)
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
        abm_pipeline().interpret(Call("POST", "/exports/v1/exportJobs", on_unknown="raise"), answer)
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
    settings = AbmSettings.from_connection(abm_connection(auth_type="basic"))
    basic_token = settings.auth_header()["Authorization"].split(" ", 1)[1]
    body = f'{{"error": {{"message": "bad header Bearer {KEY} / Basic {basic_token}"}}}}'.encode()
    with pytest.raises(AbmApiError) as info:
        Pipeline(settings).interpret(Call("GET", "/x"), Answer(401, {}, body))
    assert KEY not in str(info.value) and basic_token not in str(info.value)
    assert "***" in str(info.value)


# --- what a request that got no answer becomes ----------------------------------------------------


def test_transport_error_kinds() -> None:
    """What the transports raise for a request that got no answer, through the prepared request."""
    pipe = abm_pipeline()
    create = pipe.prepare(Call("POST", "/x", body={"a": 1}, on_unknown="raise"))
    before = create.fail("connect", "OSError: refused", False)
    after = create.fail("lost", f"TimeoutError: read {KEY}")
    assert before.transient and not before.outcome_unknown and "could not connect" in str(before)
    assert after.transient and after.outcome_unknown and KEY not in str(after)
    assert (before.kind, after.kind) == ("connect", "lost")
