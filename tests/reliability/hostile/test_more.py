"""Beyond the six classes: broken framing, oversized answers, a gzip bomb, odd Retry-After, odd JSON.

Each call must still end in an ``AbmApiError`` with a sensible ``kind``, in bounded time and memory,
with the key nowhere. Several of these already hold for the code as it was; they guard the rewrite.
"""

from __future__ import annotations

import functools
import struct
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .checks import (
    KEY,
    assert_api_error,
    assert_no_secret,
    assert_short_message,
    failure,
    sync_call,
    trigger_events,
)
from .runs import Against
from .servers import Conn, HostileServer, MiB, Request, error_body, head_bytes, page, refuse

pytestmark = pytest.mark.timeout(30)

SETTINGS = {"max_attempts": 2, "retry_max_wait": 0.2, "request_timeout": 5}
BOUND = 15.0


def raw(data: bytes) -> Callable[[Conn, Request], None]:
    """Send ``data`` as it is, then close."""

    def handle(conn: Conn, req: Request) -> None:
        conn.send(data)

    return handle


def folders_page(req: Request) -> bytes:
    return b'{"folders": [], "nextPageToken": ""}'


# --- broken connections and framing -------------------------------------------------------------------


def test_sync_connection_closed_on_accept(hostile: Against, caplog: pytest.LogCaptureFixture) -> None:
    run = hostile.call(refuse, "iter_folders", server={"close_on_accept": True}, **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"lost", "connect"}, within=BOUND, http_status=None)
    assert run.server.connection_count == SETTINGS["max_attempts"]
    assert_no_secret(run.err, caplog)


async def test_async_connection_closed_on_accept(hostile: Against, caplog: pytest.LogCaptureFixture) -> None:
    run = await hostile.acall(refuse, "iter_executions", server={"close_on_accept": True}, **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"lost", "connect"}, within=BOUND, http_status=None)
    assert_no_secret(run.err, caplog)


def test_download_connection_closed_on_accept(hostile: Against) -> None:
    run = hostile.download(refuse, server={"close_on_accept": True}, **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"lost", "connect"}, within=BOUND, http_status=None)
    assert run.server.connection_count == SETTINGS["max_attempts"]


def test_sync_connection_refused(connect: Any) -> None:
    with HostileServer(refuse) as srv:
        url = srv.url
    conn_id = connect(url, **SETTINGS)  # the server is gone: nothing listens on the port now
    err, elapsed = failure(sync_call(conn_id, "iter_folders"))
    assert_api_error(err, elapsed, kinds={"connect"}, within=BOUND, http_status=None)


GARBAGE = {
    "ssh-banner": b"SSH-2.0-OpenSSH_9.6\r\n",
    "binary": bytes(range(256)) * 4,
    "http-0.9-ish": b"<html>no status line at all</html>\n",
    "bad-version": b"HTTP/9.9 200 OK\r\nContent-Length: 2\r\n\r\n{}",
}


@pytest.mark.parametrize("garbage", list(GARBAGE))
def test_sync_garbage_instead_of_a_status_line(
    garbage: str, hostile: Against, caplog: pytest.LogCaptureFixture
) -> None:
    run = hostile.call(raw(GARBAGE[garbage]), "iter_folders", **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"lost", "malformed"}, within=BOUND)
    assert run.server.request_count <= SETTINGS["max_attempts"]
    assert_no_secret(run.err, caplog)


@pytest.mark.parametrize("garbage", ["ssh-banner", "binary"])
async def test_async_garbage_instead_of_a_status_line(garbage: str, hostile: Against) -> None:
    run = await hostile.acall(raw(GARBAGE[garbage]), "iter_folders", **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"lost", "malformed"}, within=BOUND)


def test_download_garbage_instead_of_a_status_line(hostile: Against) -> None:
    run = hostile.download(raw(GARBAGE["ssh-banner"]), **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"lost", "malformed"}, within=BOUND)


CONTENT_LENGTHS = {"invalid": "abc", "negative": "-5", "huge": str(10**30), "two-values": "2, 40"}


def bad_length(value: str) -> Callable[[Conn, Request], None]:
    def handle(conn: Conn, req: Request) -> None:
        conn.head(200, {"Content-Type": "application/json", "Content-Length": value})
        conn.send(b'{"folders": [], "nextPageToken": ""}')

    return handle


@pytest.mark.parametrize("length", list(CONTENT_LENGTHS))
def test_sync_bad_content_length(length: str, hostile: Against) -> None:
    run = hostile.call(bad_length(CONTENT_LENGTHS[length]), "iter_folders", **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"malformed", "lost", "too_large"}, within=BOUND)


@pytest.mark.parametrize("length", ["invalid", "huge"])
async def test_async_bad_content_length(length: str, hostile: Against) -> None:
    run = await hostile.acall(bad_length(CONTENT_LENGTHS[length]), "iter_folders", **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"malformed", "lost", "too_large"}, within=BOUND)


@pytest.mark.parametrize("length", ["invalid", "negative", "huge"])
def test_download_bad_content_length(length: str, hostile: Against, destination: Path) -> None:
    run = hostile.download(bad_length(CONTENT_LENGTHS[length]), operator=True, **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"malformed", "lost", "too_large"}, within=BOUND)
    assert not destination.exists()


def test_sync_body_shorter_than_content_length(hostile: Against) -> None:
    run = hostile.call(bad_length("5000"), "iter_folders", **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"lost"}, within=BOUND)
    assert run.server.request_count == SETTINGS["max_attempts"], "a GET that lost its answer is retried"


def huge_headers(kind: str) -> Callable[[Conn, Request], None]:
    """A 1 MiB header line, or 20,000 small headers (about 1 MiB as well)."""

    def handle(conn: Conn, req: Request) -> None:
        if kind == "one-line":
            headers = [("X-Huge", "h" * MiB)]
        else:
            headers = [(f"X-Many-{i}", "v" * 40) for i in range(20_000)]
        headers += [("Content-Type", "application/json"), ("Content-Length", "36"), ("Connection", "close")]
        if conn.send(head_bytes(200, headers)):
            conn.send(b'{"folders": [], "nextPageToken": ""}')

    return handle


@pytest.mark.parametrize("kind", ["one-line", "many"])
def test_sync_one_mib_of_headers(kind: str, hostile: Against) -> None:
    run = hostile.call(huge_headers(kind), "iter_folders", traced=True, **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"malformed", "too_large", "lost"}, within=BOUND)
    assert run.peak < 10 * MiB, f"peak {run.peak / MiB:.1f} MiB"


@pytest.mark.parametrize("kind", ["one-line", "many"])
async def test_async_one_mib_of_headers(kind: str, hostile: Against) -> None:
    run = await hostile.acall(huge_headers(kind), "iter_folders", **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"malformed", "too_large", "lost"}, within=BOUND)


def endless_interim(conn: Conn, req: Request) -> None:
    """``100 Continue`` after ``100 Continue`` (clients skip them), for a minute, never a final answer."""
    ends = time.monotonic() + 60
    while time.monotonic() < ends and conn.send(b"HTTP/1.1 100 Continue\r\n\r\n"):
        if conn.server.stopping.wait(0.01):
            return


def test_sync_endless_interim_answers_hit_the_deadline(hostile: Against) -> None:
    run = hostile.call(endless_interim, "iter_folders", request_timeout=1, max_attempts=1)
    assert_api_error(run.err, run.elapsed, kinds={"timeout", "malformed"}, within=BOUND)


# --- oversized success bodies and a gzip bomb ---------------------------------------------------------------


def big_json(size: int, *, framing: str) -> Callable[[Conn, Request], None]:
    """A 200 JSON object of ``size`` bytes (a long string), with or without Content-Length."""

    def handle(conn: Conn, req: Request) -> None:
        opening = b'{"folders": [], "nextPageToken": "", "pad": "'
        closing = b'"}'
        headers = {"Content-Type": "application/json"}
        if framing == "length":
            headers["Content-Length"] = str(size)
        body = size - len(opening) - len(closing)
        if conn.head(200, headers) and conn.send(opening) and conn.stream(body):
            conn.send(closing)

    return handle


@pytest.mark.parametrize("framing", ["length", "close"])
def test_sync_success_body_over_max_response_bytes(framing: str, hostile: Against) -> None:
    run = hostile.call(
        big_json(20 * MiB, framing=framing),
        "iter_folders",
        traced=True,
        idle=10,
        **SETTINGS,
        max_response_bytes=MiB,
    )
    assert_api_error(run.err, run.elapsed, kinds=None, within=BOUND)
    assert run.server.max_bytes_per_connection < 8 * MiB, (
        f"{run.server.max_bytes_per_connection / MiB:.1f} MiB pushed"
    )
    assert run.peak < 10 * MiB, f"peak {run.peak / MiB:.1f} MiB"
    assert_api_error(run.err, run.elapsed, kinds={"too_large"}, within=BOUND)


async def test_async_success_body_over_max_response_bytes(hostile: Against) -> None:
    run = await hostile.acall(
        big_json(20 * MiB, framing="length"), "iter_folders", idle=10, **SETTINGS, max_response_bytes=MiB
    )
    assert_api_error(run.err, run.elapsed, kinds=None, within=BOUND)
    assert run.server.max_bytes_per_connection < 8 * MiB
    assert_api_error(run.err, run.elapsed, kinds={"too_large"}, within=BOUND)


@functools.lru_cache(maxsize=1)
def gzip_bomb() -> bytes:
    """About 1 MiB of gzip that inflates to 1 GiB of zeros (fully flushed blocks, repeated)."""
    block_size = MiB
    zeros = bytes(block_size)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    final = zlib.compressobj(9, zlib.DEFLATED, -15).flush(zlib.Z_FINISH)
    crc = 0
    for _ in range(1024):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + block * 1024 + final + struct.pack("<II", crc, (1024 * block_size) & 0xFFFFFFFF)


def bomb(status: int) -> Callable[[Conn, Request], None]:
    def handle(conn: Conn, req: Request) -> None:
        body = gzip_bomb()
        conn.answer(
            status,
            body,
            {"Content-Encoding": "gzip", "Content-Type": "application/json"},
        )

    return handle


@pytest.mark.parametrize("status", [200, 400])
def test_sync_gzip_bomb(status: int, hostile: Against, caplog: pytest.LogCaptureFixture) -> None:
    gzip_bomb()  # built before the measurement
    run = hostile.call(bomb(status), "iter_folders", traced=True, **SETTINGS, max_response_bytes=MiB)
    assert_api_error(run.err, run.elapsed, kinds=None, within=BOUND)
    assert run.peak < 10 * MiB, f"peak {run.peak / MiB:.1f} MiB: the bomb was inflated"
    expected = {"too_large", "malformed"} if status == 200 else {"answer"}
    assert_api_error(run.err, run.elapsed, kinds=expected, within=BOUND)
    assert_short_message(run.err)
    assert_no_secret(run.err, caplog)


async def test_async_gzip_bomb(hostile: Against) -> None:
    gzip_bomb()
    warm_up = lambda conn, req: conn.answer(400, error_body(400, "X", "warm-up"))  # noqa: E731
    await hostile.acall(warm_up, "iter_folders", **SETTINGS)  # imports, first use
    run = await hostile.acall(bomb(200), "iter_folders", traced=True, **SETTINGS, max_response_bytes=MiB)
    assert_api_error(run.err, run.elapsed, kinds=None, within=BOUND)
    assert run.peak < 10 * MiB, f"peak {run.peak / MiB:.1f} MiB: the bomb was inflated"
    assert_api_error(run.err, run.elapsed, kinds={"too_large", "malformed"}, within=BOUND)


# --- Retry-After ------------------------------------------------------------------------------------------


def limited(retry_after: str) -> Callable[[Conn, Request], None]:
    def handle(conn: Conn, req: Request) -> None:
        conn.answer(429, error_body(429, "RESOURCE_EXHAUSTED", "slow down"), {"Retry-After": retry_after})

    return handle


@pytest.mark.parametrize(
    "value", ["999999999", "Fri, 31 Dec 9999 23:59:59 GMT", "1e308"], ids=["seconds", "date", "float"]
)
def test_sync_enormous_retry_after_ends_at_once(value: str, hostile: Against) -> None:
    run = hostile.call(limited(value), "iter_folders", max_attempts=5, retry_max_wait=2)
    assert_api_error(run.err, run.elapsed, kinds={"answer"}, within=5, http_status=429)
    assert run.server.request_count == 1, "a Retry-After beyond retry_max_wait ends the call at once"
    assert "retry" in str(run.err).lower() and "after" in str(run.err).lower(), (
        f"the message does not say why: {run.err}"
    )


async def test_async_enormous_retry_after_ends_at_once(hostile: Against) -> None:
    run = await hostile.acall(limited("999999999"), "iter_folders", max_attempts=5, retry_max_wait=2)
    assert_api_error(run.err, run.elapsed, kinds={"answer"}, within=5, http_status=429)
    assert run.server.request_count == 1
    assert "retry" in str(run.err).lower() and "after" in str(run.err).lower(), (
        f"the message does not say why: {run.err}"
    )


def test_download_enormous_retry_after_ends_at_once(hostile: Against) -> None:
    run = hostile.download(limited("999999999"), max_attempts=5, retry_max_wait=2)
    assert_api_error(run.err, run.elapsed, kinds={"answer"}, within=5, http_status=429)
    assert run.server.request_count == 1


@pytest.mark.parametrize("value", ["-5", "-1e9", "nan", "soon"])
def test_sync_negative_or_unreadable_retry_after_is_ordinary_backoff(value: str, hostile: Against) -> None:
    run = hostile.call(limited(value), "iter_folders", max_attempts=3, retry_max_wait=0.2)
    assert_api_error(run.err, run.elapsed, kinds={"answer"}, within=BOUND, http_status=429)
    assert run.server.request_count == 3


# --- a 200 that is not the promised object, a 401 page ----------------------------------------------


@pytest.mark.parametrize("body", [b"[]", b'"folders"', b"42", b"null", b"true", b'{"folders": "x"}'])
def test_sync_success_that_is_not_an_object(body: bytes, hostile: Against) -> None:
    run = hostile.call(lambda conn, req: conn.answer(200, body), "iter_folders", **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"malformed"}, within=BOUND)


@pytest.mark.parametrize("body", [b"[]", b"42"])
async def test_async_success_that_is_not_an_object(body: bytes, hostile: Against) -> None:
    run = await hostile.acall(lambda conn, req: conn.answer(200, body), "iter_executions", **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"malformed"}, within=BOUND)


def html_401(conn: Conn, req: Request) -> None:
    page_html = (
        "<html><head><title>401 Authorization Required</title></head><body><h1>Unauthorized</h1>"
        f"<p>The credential {req.header('authorization')} ({KEY}) was refused.</p>"
        + "<p>padding</p>" * 500
        + "</body></html>"
    )
    conn.answer(401, page_html, content_type="text/html")


@pytest.mark.parametrize("auth_type", ["bearer", "basic"])
def test_sync_401_html_page(auth_type: str, hostile: Against, caplog: pytest.LogCaptureFixture) -> None:
    run = hostile.call(html_401, "iter_folders", **SETTINGS, auth_type=auth_type)
    assert_api_error(run.err, run.elapsed, kinds=None, within=BOUND, http_status=401)
    assert run.server.request_count == 1, "a 401 is not retried"
    assert_short_message(run.err)
    assert_api_error(run.err, run.elapsed, kinds={"answer"}, within=BOUND, caplog=caplog)


async def test_async_401_html_page(hostile: Against, caplog: pytest.LogCaptureFixture) -> None:
    run = await hostile.acall(html_401, "iter_folders", **SETTINGS, auth_type="basic")
    assert_api_error(run.err, run.elapsed, kinds=None, within=BOUND, http_status=401)
    assert run.server.request_count == 1
    assert_short_message(run.err)
    assert_api_error(run.err, run.elapsed, kinds={"answer"}, within=BOUND, caplog=caplog)


# --- the trigger against a server that never answers ------------------------------------------------


def silent(conn: Conn, req: Request) -> None:
    """Read the request, then say nothing for a minute (or until the client leaves)."""
    conn.hold(60)


async def test_trigger_deadline_holds_during_a_request_that_never_answers(
    connect: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with HostileServer(silent) as srv:
        conn_id = connect(srv.url, max_attempts=2, retry_max_wait=0.2)
        events, _ = await trigger_events(conn_id, request_timeout=60, late=lambda: "the request outlived it")
    assert len(events) == 1
    assert events[0].payload.get("status") in {"timeout", "error"}
    assert_no_secret(None, caplog, events=events)


def test_sync_listing_with_pages_then_garbage(hostile: Against) -> None:
    """Two good pages, then a page that is not JSON: the error names the listing, kind malformed."""

    def handle(conn: Conn, req: Request) -> None:
        if req.index < 2:
            conn.answer(200, page("folders", [{"uuid": f"u{req.index}", "name": "n"}], f"t{req.index}"))
        else:
            conn.answer(200, b"<html>maintenance</html>", content_type="text/html")

    run = hostile.call(handle, "iter_folders", **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds={"malformed"}, within=BOUND)
    assert "/accountLists/v2/folders" in str(run.err)
