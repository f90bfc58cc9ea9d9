"""Class 4: a server that trickles, one byte every 0.05-0.1 s, so no single read ever times out.

The trickle would take a minute or more (it is padded so), in the status line and headers, in the
body of a JSON answer, or in a download body. ``request_timeout`` (and ``download_timeout``) is the
total deadline of one attempt, so each call must end with ``AbmApiError(kind="timeout")`` within a
few seconds. The servers give up on their own after 60 s and as soon as the client disconnects.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from .checks import assert_api_error
from .runs import Against
from .servers import Conn, Request, head_bytes

pytestmark = pytest.mark.timeout(30)

PAD = "p" * 600  # at 0.1 s a byte, 60 s of trickle
SETTINGS = {"request_timeout": 1, "max_attempts": 1, "retry_max_wait": 0.2}
BOUND = 15.0


def listing_body(req: Request) -> bytes:
    key = "exportJobExecutions" if "executions" in req.path else "folders"
    return json.dumps({key: [], "pad": PAD, "nextPageToken": ""}).encode()


def trickle_head(interval: float = 0.1) -> Callable[[Conn, Request], None]:
    """Status line and headers (with a long padding header) one byte at a time."""

    def handle(conn: Conn, req: Request) -> None:
        body = listing_body(req)
        head = head_bytes(
            200,
            [
                ("X-Padding", PAD),
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                ("Connection", "close"),
            ],
        )
        if conn.trickle(head, interval, max_seconds=60):
            conn.send(body)

    return handle


def trickle_body(interval: float = 0.1) -> Callable[[Conn, Request], None]:
    """Headers at once, then a JSON body one byte at a time."""

    def handle(conn: Conn, req: Request) -> None:
        body = listing_body(req)
        conn.head(200, {"Content-Type": "application/json", "Content-Length": str(len(body))})
        conn.trickle(body, interval, max_seconds=60)

    return handle


def trickle_download(interval: float = 0.05, size: int = 1200) -> Callable[[Conn, Request], None]:
    """A CSV whose body arrives one byte every ``interval`` s (a minute in all)."""

    def handle(conn: Conn, req: Request) -> None:
        conn.head(200, {"Content-Type": "text/csv", "Content-Length": str(size), "ETag": '"t1"'})
        conn.trickle(b"a,b\n" * (size // 4), interval, max_seconds=60)

    return handle


@pytest.mark.parametrize("phase", ["head", "body"])
@pytest.mark.parametrize("call", ["iter_folders", "add_accounts"])
def test_sync_call_times_out_on_a_trickle(
    phase: str, call: str, hostile: Against, caplog: pytest.LogCaptureFixture
) -> None:
    handler = trickle_head() if phase == "head" else trickle_body()
    run = hostile.call(handler, call, **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds=None, within=BOUND)
    assert run.server.request_count == 1
    assert_api_error(run.err, run.elapsed, kinds={"timeout"}, within=BOUND, caplog=caplog)


def test_sync_timeout_counts_every_attempt(hostile: Against) -> None:
    run = hostile.call(trickle_body(), "iter_executions", **{**SETTINGS, "max_attempts": 2})
    assert_api_error(run.err, run.elapsed, kinds=None, within=BOUND)
    assert run.server.request_count == 2
    assert_api_error(run.err, run.elapsed, kinds={"timeout"}, within=BOUND)


@pytest.mark.parametrize("phase", ["head", "body"])
async def test_async_call_times_out_on_a_trickle(
    phase: str, hostile: Against, caplog: pytest.LogCaptureFixture
) -> None:
    handler = trickle_head() if phase == "head" else trickle_body()
    run = await hostile.acall(handler, "iter_executions", **{**SETTINGS, "max_attempts": 2})
    assert_api_error(run.err, run.elapsed, kinds=None, within=BOUND)
    assert run.server.request_count == 2
    assert_api_error(run.err, run.elapsed, kinds={"timeout"}, within=BOUND, caplog=caplog)


def test_download_times_out_on_a_trickled_body(hostile: Against, caplog: pytest.LogCaptureFixture) -> None:
    """Each attempt makes progress, yet hits ``download_timeout``: both attempts count."""
    run = hostile.download(trickle_download(), **{**SETTINGS, "max_attempts": 2, "download_timeout": 2})
    assert_api_error(run.err, run.elapsed, kinds=None, within=BOUND)
    assert run.server.request_count == 2, f"{run.server.request_count} attempts with max_attempts=2"
    assert run.api.request_count == 0
    assert_api_error(run.err, run.elapsed, kinds={"timeout"}, within=BOUND, caplog=caplog)


def test_download_times_out_on_trickled_headers(hostile: Against) -> None:
    run = hostile.download(trickle_head(), **{**SETTINGS, "download_timeout": 2})
    assert_api_error(run.err, run.elapsed, kinds={"timeout"}, within=BOUND)
    assert run.server.request_count == 1


def test_operator_publishes_nothing_after_a_trickle(
    hostile: Against, destination: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = hostile.download(trickle_download(), operator=True, **{**SETTINGS, "download_timeout": 2})
    assert_api_error(run.err, run.elapsed, kinds=None, within=BOUND)
    assert not destination.exists()
    assert_api_error(run.err, run.elapsed, kinds={"timeout"}, within=BOUND, caplog=caplog)
