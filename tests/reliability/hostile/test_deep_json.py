"""Class 6: JSON nested 100,000 deep (200 KB), in a success body and in error bodies.

A 200 whose body is deeper than ``max_json_depth`` is ``AbmApiError(kind="malformed")``; an error
answer keeps its status and is ``kind="answer"`` whatever its body (a 503 is still retried); never a
``RecursionError``. Depth is judged without recursing, so it is also refused when Python could parse it
(500 deep) but it is beyond the limit (default 32).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .checks import (
    afailure,
    assert_api_error,
    async_call,
    download_call,
    failure,
    signed_link,
    sync_call,
)
from .servers import Conn, HostileServer, Request, deep_array, deep_error, deep_in_object, item_key, refuse

pytestmark = pytest.mark.timeout(30)

DEPTH = 100_000
SETTINGS = {"max_attempts": 3, "retry_max_wait": 0.2}
BODIES: dict[str, Callable[[Request], bytes]] = {
    "array": lambda req: deep_array(DEPTH),
    "in-object": lambda req: deep_in_object(item_key(req), DEPTH),
}
ERROR_BODIES: dict[str, Callable[[Request], bytes]] = {
    "array": lambda req: deep_array(DEPTH),
    "in-details": lambda req: deep_error(DEPTH),
}


def answer_with(status: int, body: Callable[[Request], bytes]) -> Callable[[Conn, Request], None]:
    def handle(conn: Conn, req: Request) -> None:
        conn.answer(status, body(req), {"x-request-id": "req-deep"})

    return handle


# --- success bodies ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", list(BODIES))
@pytest.mark.parametrize("call", ["iter_folders", "iter_executions", "add_accounts", "create_folder"])
def test_sync_hook_refuses_a_deep_success_body(
    call: str, body: str, connect: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with HostileServer(answer_with(200, BODIES[body])) as srv:
        conn_id = connect(srv.url, **SETTINGS)
        err, elapsed = failure(sync_call(conn_id, call))
    assert_api_error(err, elapsed, kinds={"malformed"}, within=15, caplog=caplog)


@pytest.mark.parametrize("body", list(BODIES))
async def test_async_hook_refuses_a_deep_success_body(
    body: str, connect: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with HostileServer(answer_with(200, BODIES[body])) as srv:
        conn_id = connect(srv.url, **SETTINGS)
        err, elapsed = await afailure(async_call(conn_id, "iter_executions"))
    assert_api_error(err, elapsed, kinds={"malformed"}, within=15, caplog=caplog)


def _moderately_deep(req: Request) -> bytes:
    """A well-formed page whose one item nests 500 deep: parseable by Python, beyond the limit."""
    return (
        b'{"'
        + item_key(req).encode()
        + b'": [{"uuid": "u1", "name": '
        + deep_array(500)
        + b'}], "nextPageToken": ""}'
    )


def test_sync_hook_refuses_json_deeper_than_the_limit(connect: Any) -> None:
    with HostileServer(answer_with(200, _moderately_deep)) as srv:
        conn_id = connect(srv.url, **SETTINGS)
        err, elapsed = failure(sync_call(conn_id, "iter_folders"))
    assert_api_error(err, elapsed, kinds={"malformed"}, within=15)


async def test_async_hook_refuses_json_deeper_than_the_limit(connect: Any) -> None:
    with HostileServer(answer_with(200, _moderately_deep)) as srv:
        conn_id = connect(srv.url, **SETTINGS)
        err, elapsed = await afailure(async_call(conn_id, "iter_folders"))
    assert_api_error(err, elapsed, kinds={"malformed"}, within=15)


def test_max_json_depth_setting_is_honoured(connect: Any) -> None:
    nested = b'{"folders": [{"uuid": "u1", "name": {"a": {"b": {"c": 1}}}}], "nextPageToken": ""}'
    with HostileServer(answer_with(200, lambda req: nested)) as srv:
        shallow = connect(srv.url, **SETTINGS, max_json_depth=4)
        err, elapsed = failure(sync_call(shallow, "iter_folders"))
        assert_api_error(err, elapsed, kinds={"malformed"}, within=15)
        default = connect(srv.url, **SETTINGS)
        assert [f["uuid"] for f in sync_call(default, "iter_folders")()] == ["u1"]


# --- error bodies -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", list(ERROR_BODIES))
@pytest.mark.parametrize("status", [400, 503])
def test_sync_hook_reads_a_deep_error_body(
    status: int, body: str, connect: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with HostileServer(answer_with(status, ERROR_BODIES[body])) as srv:
        conn_id = connect(srv.url, **SETTINGS)
        err, elapsed = failure(sync_call(conn_id, "iter_folders"))
    assert_api_error(err, elapsed, kinds=None, within=15, http_status=status)
    expected = SETTINGS["max_attempts"] if status == 503 else 1
    assert srv.request_count == expected, f"{srv.request_count} requests, expected {expected}"
    assert_api_error(err, elapsed, kinds={"answer"}, within=15, caplog=caplog)


@pytest.mark.parametrize("status", [400, 503])
def test_sync_write_reads_a_deep_error_body(status: int, connect: Any) -> None:
    with HostileServer(answer_with(status, ERROR_BODIES["in-details"])) as srv:
        conn_id = connect(srv.url, **SETTINGS)
        err, elapsed = failure(sync_call(conn_id, "add_accounts"))
    assert_api_error(err, elapsed, kinds=None, within=15, http_status=status)
    assert srv.request_count == (SETTINGS["max_attempts"] if status == 503 else 1)
    assert_api_error(err, elapsed, kinds={"answer"}, within=15)


@pytest.mark.parametrize("body", list(ERROR_BODIES))
@pytest.mark.parametrize("status", [400, 503])
async def test_async_hook_reads_a_deep_error_body(
    status: int, body: str, connect: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with HostileServer(answer_with(status, ERROR_BODIES[body])) as srv:
        conn_id = connect(srv.url, **SETTINGS)
        err, elapsed = await afailure(async_call(conn_id, "iter_executions"))
    assert_api_error(err, elapsed, kinds=None, within=15, http_status=status)
    assert srv.request_count == (SETTINGS["max_attempts"] if status == 503 else 1)
    assert_api_error(err, elapsed, kinds={"answer"}, within=15, caplog=caplog)


@pytest.mark.parametrize("body", list(ERROR_BODIES))
@pytest.mark.parametrize("status", [400, 503])
def test_download_reads_a_deep_error_body(
    status: int, body: str, connect: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with HostileServer(refuse) as api, HostileServer(answer_with(status, ERROR_BODIES[body])) as storage:
        conn_id = connect(api.url, **SETTINGS)
        err, elapsed = failure(download_call(conn_id, signed_link(storage.url)))
    assert_api_error(err, elapsed, kinds=None, within=15, http_status=status)
    assert storage.request_count == (SETTINGS["max_attempts"] if status == 503 else 1)
    assert api.request_count == 0
    assert_api_error(err, elapsed, kinds={"answer"}, within=15, caplog=caplog)
