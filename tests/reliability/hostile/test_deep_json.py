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

from .checks import assert_api_error, sync_call
from .runs import Against
from .servers import Conn, HostileServer, Request, deep_array, deep_error, deep_in_object, item_key

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
    call: str, body: str, hostile: Against, caplog: pytest.LogCaptureFixture
) -> None:
    run = hostile.call(answer_with(200, BODIES[body]), call, **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"malformed"}, within=15, caplog=caplog)


@pytest.mark.parametrize("body", list(BODIES))
async def test_async_hook_refuses_a_deep_success_body(
    body: str, hostile: Against, caplog: pytest.LogCaptureFixture
) -> None:
    run = await hostile.acall(answer_with(200, BODIES[body]), "iter_executions", **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"malformed"}, within=15, caplog=caplog)


def _moderately_deep(req: Request) -> bytes:
    """A well-formed page whose one item nests 500 deep: parseable by Python, beyond the limit."""
    return (
        b'{"'
        + item_key(req).encode()
        + b'": [{"uuid": "u1", "name": '
        + deep_array(500)
        + b'}], "nextPageToken": ""}'
    )


def test_sync_hook_refuses_json_deeper_than_the_limit(hostile: Against) -> None:
    run = hostile.call(answer_with(200, _moderately_deep), "iter_folders", **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"malformed"}, within=15)


async def test_async_hook_refuses_json_deeper_than_the_limit(hostile: Against) -> None:
    run = await hostile.acall(answer_with(200, _moderately_deep), "iter_folders", **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"malformed"}, within=15)


def test_max_json_depth_setting_is_honoured(connect: Any, hostile: Against) -> None:
    nested = b'{"folders": [{"uuid": "u1", "name": {"a": {"b": {"c": 1}}}}], "nextPageToken": ""}'
    run = hostile.call(answer_with(200, lambda req: nested), "iter_folders", **SETTINGS, max_json_depth=4)
    assert_api_error(run.err, run.elapsed, kinds={"malformed"}, within=15)
    with HostileServer(answer_with(200, lambda req: nested)) as srv:
        default = connect(srv.url, **SETTINGS)
        assert [f["uuid"] for f in sync_call(default, "iter_folders")()] == ["u1"]


# --- error bodies -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", list(ERROR_BODIES))
@pytest.mark.parametrize("status", [400, 503])
def test_sync_hook_reads_a_deep_error_body(
    status: int, body: str, hostile: Against, caplog: pytest.LogCaptureFixture
) -> None:
    run = hostile.call(answer_with(status, ERROR_BODIES[body]), "iter_folders", **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds=None, within=15, http_status=status)
    expected = SETTINGS["max_attempts"] if status == 503 else 1
    assert run.server.request_count == expected, f"{run.server.request_count} requests, expected {expected}"
    assert_api_error(run.err, run.elapsed, kinds={"answer"}, within=15, caplog=caplog)


@pytest.mark.parametrize("status", [400, 503])
def test_sync_write_reads_a_deep_error_body(status: int, hostile: Against) -> None:
    run = hostile.call(answer_with(status, ERROR_BODIES["in-details"]), "add_accounts", **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds=None, within=15, http_status=status)
    assert run.server.request_count == (SETTINGS["max_attempts"] if status == 503 else 1)
    assert_api_error(run.err, run.elapsed, kinds={"answer"}, within=15)


@pytest.mark.parametrize("body", list(ERROR_BODIES))
@pytest.mark.parametrize("status", [400, 503])
async def test_async_hook_reads_a_deep_error_body(
    status: int, body: str, hostile: Against, caplog: pytest.LogCaptureFixture
) -> None:
    run = await hostile.acall(answer_with(status, ERROR_BODIES[body]), "iter_executions", **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds=None, within=15, http_status=status)
    assert run.server.request_count == (SETTINGS["max_attempts"] if status == 503 else 1)
    assert_api_error(run.err, run.elapsed, kinds={"answer"}, within=15, caplog=caplog)


@pytest.mark.parametrize("body", list(ERROR_BODIES))
@pytest.mark.parametrize("status", [400, 503])
def test_download_reads_a_deep_error_body(
    status: int, body: str, hostile: Against, caplog: pytest.LogCaptureFixture
) -> None:
    run = hostile.download(answer_with(status, ERROR_BODIES[body]), **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds=None, within=15, http_status=status)
    assert run.server.request_count == (SETTINGS["max_attempts"] if status == 503 else 1)
    assert run.api.request_count == 0
    assert_api_error(run.err, run.elapsed, kinds={"answer"}, within=15, caplog=caplog)
