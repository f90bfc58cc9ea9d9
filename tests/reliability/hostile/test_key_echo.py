"""Class 1: a server that echoes the credential back, in every place an error can carry text.

The server repeats the key, the ``Authorization`` value it received (so a Basic token too) and, on a
download link, the ``X-Amz-Signature`` it was given: in the error body's ``status``, ``message`` and
``fieldViolations``, in ``x-request-id``, in a storage-style XML ``<Error><Code>``, in ``Retry-After``
and in a 200 that is not JSON. Whatever the hook makes of it, neither the key (raw or as a Basic
token, padded or not) nor the download signature may show in the error (text, repr, attributes,
pickle, traceback) or in any log record at any level.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .checks import KEY, assert_api_error, assert_no_secret
from .runs import Against
from .servers import Conn, Request, error_body

pytestmark = pytest.mark.timeout(30)

WHERES = ("status", "message", "fieldViolations", "x-request-id", "xml-code", "retry-after", "non-json-200")


def echo_handler(where: str) -> Callable[[Conn, Request], None]:
    """Answer every request with the credential echoed at ``where``."""

    def handle(conn: Conn, req: Request) -> None:
        # What a careless server echoes: the key, the credential it received, the signature it got.
        received = [KEY, req.header("authorization") or "", req.param("X-Amz-Signature") or ""]
        text = " ".join(part for part in received if part)
        if where == "status":
            conn.answer(400, error_body(400, text, "bad request"))
        elif where == "message":
            conn.answer(400, error_body(400, "INVALID_ARGUMENT", f"the key {text} is not valid here"))
        elif where == "fieldViolations":
            violations = [{"field": text, "description": f"bad credential {text}"}] * 3
            conn.answer(400, error_body(400, "INVALID_ARGUMENT", "invalid", violations))
        elif where == "x-request-id":
            conn.answer(
                400,
                error_body(400, "INVALID_ARGUMENT", "invalid"),
                {"x-request-id": text, "x-amz-request-id": text},
            )
        elif where == "xml-code":
            xml = (
                '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>'
                f"{text}</Code><Message>Signature {text} does not match</Message>"
                f"<SignatureProvided>{text}</SignatureProvided><RequestId>{text}</RequestId></Error>"
            )
            conn.answer(400, xml, content_type="application/xml")
        elif where == "retry-after":
            conn.answer(429, error_body(429, "RESOURCE_EXHAUSTED", "slow down"), {"Retry-After": text})
        elif where == "non-json-200":
            conn.answer(200, f"<html>welcome {text}</html>", content_type="text/html")
        else:  # pragma: no cover
            raise AssertionError(where)

    return handle


def assert_hidden(err: Any, elapsed: float, where: str, caplog: pytest.LogCaptureFixture) -> None:
    """The answer's status and kind (``malformed`` for a 200 that is not JSON), with no secret anywhere."""
    status = {"retry-after": 429, "non-json-200": 200}.get(where, 400)
    kinds = {"malformed"} if where == "non-json-200" else {"answer"}
    assert_api_error(err, elapsed, kinds=kinds, within=15, http_status=status, caplog=caplog)


def settings(auth_type: str) -> dict[str, Any]:
    return {"max_attempts": 2, "retry_max_wait": 0.2, "auth_type": auth_type}


@pytest.mark.parametrize("auth_type", ["bearer", "basic"])
@pytest.mark.parametrize("where", WHERES)
def test_sync_hook_hides_an_echoed_key(
    where: str, auth_type: str, hostile: Against, caplog: pytest.LogCaptureFixture
) -> None:
    run = hostile.call(echo_handler(where), "iter_folders", **settings(auth_type))
    assert run.server.requests and run.server.requests[0].header("authorization"), (
        "the API got the credential"
    )
    assert_hidden(run.err, run.elapsed, where, caplog)


@pytest.mark.parametrize("call", ["add_accounts", "create_folder"])
@pytest.mark.parametrize("where", ["status", "x-request-id", "xml-code"])
def test_sync_writes_hide_an_echoed_key(
    where: str, call: str, hostile: Against, caplog: pytest.LogCaptureFixture
) -> None:
    run = hostile.call(echo_handler(where), call, **settings("basic"))
    assert_hidden(run.err, run.elapsed, where, caplog)


@pytest.mark.parametrize("auth_type", ["bearer", "basic"])
@pytest.mark.parametrize("where", WHERES)
async def test_async_hook_hides_an_echoed_key(
    where: str, auth_type: str, hostile: Against, caplog: pytest.LogCaptureFixture
) -> None:
    run = await hostile.acall(echo_handler(where), "iter_executions", **settings(auth_type))
    assert run.server.requests and run.server.requests[0].header("authorization"), (
        "the API got the credential"
    )
    assert_hidden(run.err, run.elapsed, where, caplog)


@pytest.mark.parametrize("where", [w for w in WHERES if w != "non-json-200"])
def test_download_hides_an_echoed_key_and_signature(
    where: str, hostile: Against, caplog: pytest.LogCaptureFixture
) -> None:
    run = hostile.download(echo_handler(where), **settings("basic"))
    storage = run.server
    assert run.api.request_count == 0
    assert storage.requests and all(r.header("authorization") is None for r in storage.requests), (
        "the key went to the storage origin"
    )
    assert_hidden(run.err, run.elapsed, where, caplog)


def test_operator_download_hides_an_echoed_signature(
    hostile: Against, caplog: pytest.LogCaptureFixture, destination: Path
) -> None:
    run = hostile.download(echo_handler("xml-code"), operator=True, **settings("bearer"))
    assert not destination.exists()
    assert_hidden(run.err, run.elapsed, "xml-code", caplog)


def _csv(conn: Conn, req: Request) -> None:
    conn.answer(200, b"date,clicks\n2026-01-01,1\n", {"ETag": '"c1"'}, content_type="text/csv")


def test_successful_download_logs_no_signature(hostile: Against, caplog: pytest.LogCaptureFixture) -> None:
    """The link's query is a credential for the file: no log line at any level carries it."""
    run = hostile.download(_csv, **settings("bearer"))
    assert run.err is None, f"the download failed: {run.err!r}"
    assert run.server.requests[0].param("X-Amz-Signature"), "the signature was sent to the storage origin"
    assert_no_secret(None, caplog)
