"""Class 5: a 50 MiB error page, from the API and from the download origin.

At most ``max_error_bytes`` (64 KiB) of an error body is read and the connection is then closed, not
drained. So the call ends with a short ``AbmApiError(kind="answer")``, the server cannot push the
whole body (the bytes the kernel accepted from it stay far below 50 MiB: socket buffers absorb a few
MiB at most) and the Python memory allocated during the call stays under 10 MiB (``tracemalloc``).
The server gives up on a client that stops reading after a 2 s send timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .checks import assert_api_error, assert_short_message
from .runs import Against, Run
from .servers import Conn, MiB, Request, error_body

pytestmark = pytest.mark.timeout(45)

HUGE = 50 * MiB
MAX_SENT = 8 * MiB
MAX_PEAK = 10 * MiB
SETTINGS = {"max_attempts": 2, "retry_max_wait": 0.2, "request_timeout": 20}
PAGE = b"<html><body><h1>Error</h1><p>" + b"The server is having a very bad day. " * 1700 + b"</p>"


def huge_error(status: int, framing: str = "length") -> Callable[[Conn, Request], None]:
    """``status`` with a 50 MiB HTML page, framed by Content-Length, chunks or connection close."""

    def handle(conn: Conn, req: Request) -> None:
        headers = {"Content-Type": "text/html", "x-request-id": "req-huge"}
        if framing == "length":
            headers["Content-Length"] = str(HUGE)
        elif framing == "chunked":
            headers["Transfer-Encoding"] = "chunked"
        if not conn.head(status, headers):
            return
        if framing != "chunked":
            conn.stream(HUGE, chunk=PAGE)
            return
        sent = 0
        frame = f"{len(PAGE):x}\r\n".encode() + PAGE + b"\r\n"
        while sent < HUGE and conn.send(frame):
            sent += len(PAGE)
        conn.send(b"0\r\n\r\n")

    return handle


def small_error(conn: Conn, req: Request) -> None:
    conn.answer(400, error_body(400, "INVALID_ARGUMENT", "warm-up"))


@pytest.fixture
def warm(hostile: Against) -> Callable[[], None]:
    """One small failing call of each kind first, so imports and first-use set-up are not measured."""

    def sync() -> None:
        hostile.call(small_error, "iter_folders", **SETTINGS)
        hostile.download(small_error, **SETTINGS)

    return sync


def check(run: Run, status: int, caplog: Any) -> None:
    """A short ``answer`` error, little of the page pushed (the run waited for the server to be idle)."""
    err, elapsed, peak, srv = run.err, run.elapsed, run.peak, run.server
    assert_api_error(err, elapsed, kinds=None, within=30, http_status=status)
    assert srv.max_bytes_per_connection < MAX_SENT, (
        f"the client read the error page: the server pushed {srv.max_bytes_per_connection / MiB:.1f} MiB"
    )
    assert peak < MAX_PEAK, f"peak Python memory {peak / MiB:.1f} MiB during the call"
    assert_short_message(err)
    assert_api_error(err, elapsed, kinds={"answer"}, within=30, caplog=caplog)


@pytest.mark.parametrize(
    ("status", "framing", "call"),
    [
        (400, "length", "iter_folders"),
        (400, "chunked", "iter_executions"),
        (400, "close", "iter_account_lists"),
        (400, "length", "add_accounts"),
        (503, "length", "iter_folders"),
    ],
)
def test_sync_hook_reads_little_of_a_huge_error(
    status: int, framing: str, call: str, hostile: Against, warm: Callable[[], None], caplog: Any
) -> None:
    warm()
    run = hostile.call(huge_error(status, framing), call, traced=True, idle=10, **SETTINGS)
    check(run, status, caplog)
    if status == 503:
        assert run.server.request_count == SETTINGS["max_attempts"], "a 503 is retried whatever its body"


@pytest.mark.parametrize(("status", "framing"), [(400, "length"), (400, "chunked"), (503, "length")])
async def test_async_hook_reads_little_of_a_huge_error(
    status: int, framing: str, hostile: Against, caplog: Any
) -> None:
    await hostile.acall(small_error, "iter_folders", **SETTINGS)  # imports and first use, not measured
    run = await hostile.acall(
        huge_error(status, framing), "iter_executions", traced=True, idle=10, **SETTINGS
    )
    check(run, status, caplog)
    if status == 503:
        assert run.server.request_count == SETTINGS["max_attempts"]


@pytest.mark.parametrize(("status", "framing"), [(400, "length"), (404, "close"), (503, "chunked")])
def test_download_reads_little_of_a_huge_error(
    status: int, framing: str, hostile: Against, warm: Callable[[], None], caplog: Any
) -> None:
    warm()
    run = hostile.download(huge_error(status, framing), traced=True, idle=10, **SETTINGS)
    check(run, status, caplog)
    assert run.api.request_count == 0
    if status == 503:
        assert run.server.request_count == SETTINGS["max_attempts"]


def test_max_error_bytes_setting_bounds_the_read(
    hostile: Against, warm: Callable[[], None], caplog: Any
) -> None:
    """A smaller ``max_error_bytes`` reads less still; the message stays short."""
    warm()
    run = hostile.call(
        huge_error(400),
        "iter_folders",
        server={"sndbuf": 64 << 10},
        traced=True,
        idle=10,
        **SETTINGS,
        max_error_bytes=1024,
    )
    check(run, 400, caplog)
    assert run.server.max_bytes_per_connection < 4 * MiB
