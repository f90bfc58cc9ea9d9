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
from .servers import Conn, HostileServer, Request, head_bytes, refuse

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
    phase: str, call: str, connect: Any, caplog: pytest.LogCaptureFixture
) -> None:
    handler = trickle_head() if phase == "head" else trickle_body()
    with HostileServer(handler) as srv:
        conn_id = connect(srv.url, **SETTINGS)
        err, elapsed = failure(sync_call(conn_id, call))
    assert_api_error(err, elapsed, kinds=None, within=BOUND)
    assert srv.request_count == 1
    assert_api_error(err, elapsed, kinds={"timeout"}, within=BOUND, caplog=caplog)


def test_sync_timeout_counts_every_attempt(connect: Any) -> None:
    with HostileServer(trickle_body()) as srv:
        conn_id = connect(srv.url, **{**SETTINGS, "max_attempts": 2})
        err, elapsed = failure(sync_call(conn_id, "iter_executions"))
    assert_api_error(err, elapsed, kinds=None, within=BOUND)
    assert srv.request_count == 2
    assert_api_error(err, elapsed, kinds={"timeout"}, within=BOUND)


def test_old_setting_name_timeout_is_a_total_deadline_too(connect: Any) -> None:
    with HostileServer(trickle_head()) as srv:
        conn_id = connect(srv.url, timeout=1, max_attempts=1)
        err, elapsed = failure(sync_call(conn_id, "iter_folders"))
    assert_api_error(err, elapsed, kinds={"timeout"}, within=BOUND)


@pytest.mark.parametrize("phase", ["head", "body"])
async def test_async_call_times_out_on_a_trickle(
    phase: str, connect: Any, caplog: pytest.LogCaptureFixture
) -> None:
    handler = trickle_head() if phase == "head" else trickle_body()
    with HostileServer(handler) as srv:
        conn_id = connect(srv.url, **{**SETTINGS, "max_attempts": 2})
        err, elapsed = await afailure(async_call(conn_id, "iter_executions"))
    assert_api_error(err, elapsed, kinds=None, within=BOUND)
    assert srv.request_count == 2
    assert_api_error(err, elapsed, kinds={"timeout"}, within=BOUND, caplog=caplog)


def test_download_times_out_on_a_trickled_body(connect: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Each attempt makes progress, yet hits ``download_timeout``: both attempts count."""
    with HostileServer(refuse) as api, HostileServer(trickle_download()) as storage:
        conn_id = connect(api.url, **{**SETTINGS, "max_attempts": 2, "download_timeout": 2})
        err, elapsed = failure(download_call(conn_id, signed_link(storage.url)))
    assert_api_error(err, elapsed, kinds=None, within=BOUND)
    assert storage.request_count == 2, f"{storage.request_count} attempts with max_attempts=2"
    assert api.request_count == 0
    assert_api_error(err, elapsed, kinds={"timeout"}, within=BOUND, caplog=caplog)


def test_download_times_out_on_trickled_headers(connect: Any) -> None:
    with HostileServer(refuse) as api, HostileServer(trickle_head()) as storage:
        conn_id = connect(api.url, **{**SETTINGS, "download_timeout": 2})
        err, elapsed = failure(download_call(conn_id, signed_link(storage.url)))
    assert_api_error(err, elapsed, kinds={"timeout"}, within=BOUND)
    assert storage.request_count == 1


def test_operator_publishes_nothing_after_a_trickle(
    connect: Any, destination: Path, operator_download: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with HostileServer(refuse) as api, HostileServer(trickle_download()) as storage:
        conn_id = connect(api.url, **{**SETTINGS, "download_timeout": 2})
        err, elapsed = failure(operator_download(conn_id, signed_link(storage.url)))
    assert_api_error(err, elapsed, kinds=None, within=BOUND)
    assert not destination.exists()
    assert_api_error(err, elapsed, kinds={"timeout"}, within=BOUND, caplog=caplog)
