"""Class 2: redirects, and the URL rules every hop must pass.

A download link on a hostile storage origin answers ``302`` to a plain-http host, the cloud metadata
address, a local file, another scheme, a loop or an endless chain. Each must end in an ``AbmApiError``
(``unsafe_url`` for a hop that breaks the URL rules, ``redirect`` for a loop or too many hops) without
retrying, without resolving or connecting to anything but 127.0.0.1 (``network_guard`` records every
attempt), without sending the key anywhere, and with nothing published at the operator's destination.
An API call answering ``302`` is not followed at all: the server the ``Location`` names sees nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .checks import (
    afailure,
    assert_api_error,
    assert_no_secret,
    async_call,
    download_call,
    failure,
    signed_link,
    sync_call,
)
from .runs import Against
from .servers import Conn, HostileServer, Request, refuse

pytestmark = pytest.mark.timeout(30)

CSV = b"date,campaign_id,campaign_name,tactic_id,tactic_name,impressions,clicks,spend\n"
UNSAFE_TARGETS = {
    "plain-http": "http://example.com/x",
    "metadata": "http://169.254.169.254/latest/meta-data/",
    "metadata-https": "https://169.254.169.254/latest/meta-data/iam/",
    "metadata-name": "http://metadata.google.internal/computeMetadata/v1/",
    "link-local-v6": "http://[fe80::1]/x",
    "any-address": "http://0.0.0.0:9/x",
    "file": "file:///etc/passwd",
    "ftp": "ftp://127.0.0.1/x",
    "data": "data:text/plain;base64,aGVsbG8=",
}
SETTINGS = {"max_attempts": 3, "retry_max_wait": 0.2, "max_redirects": 3}


def redirect_to(location: Callable[[Request], str], status: int = 302) -> Callable[[Conn, Request], None]:
    def handle(conn: Conn, req: Request) -> None:
        conn.answer(status, b"", {"Location": location(req)}, content_type="text/plain")

    return handle


def serve_csv(conn: Conn, req: Request) -> None:
    conn.answer(200, CSV, {"ETag": '"e1"'}, content_type="text/csv")


def assert_nothing_reached(network_guard: list[str], *servers: HostileServer) -> None:
    assert network_guard == [], f"tried to reach the network: {network_guard}"
    for server in servers:
        assert all(r.header("authorization") is None for r in server.requests), "the key left the API"


def unsafe_redirect(target: str) -> Callable[[Conn, Request], None]:
    """A storage origin whose link redirects to the unsafe ``target``."""
    return redirect_to(lambda r: UNSAFE_TARGETS[target])


def assert_hop_refused(
    err: Any, elapsed: float, network_guard: list[str], caplog: Any, storage: HostileServer
) -> None:
    """An unsafe hop is final: nothing reached, the link fetched once, ``unsafe_url``, no secret."""
    assert_api_error(err, elapsed, kinds=None, within=10)
    assert_nothing_reached(network_guard, storage)
    assert storage.request_count == 1, (
        f"an unsafe redirect is final, yet the link was fetched {storage.request_count} times"
    )
    assert_api_error(err, elapsed, kinds={"unsafe_url"}, within=10, caplog=caplog)


def assert_redirects_stopped(
    err: Any, elapsed: float, network_guard: list[str], caplog: Any, *storage: HostileServer
) -> None:
    """At most ``max_redirects`` hops were followed, nothing else reached; ``redirect``, no secret."""
    assert_api_error(err, elapsed, kinds=None, within=10)
    hops = sum(server.request_count for server in storage)
    limit = SETTINGS["max_redirects"]
    assert hops <= limit + 1, f"{hops} requests (followed {hops - 1} hops) with max_redirects={limit}"
    assert_nothing_reached(network_guard, *storage)
    assert_api_error(err, elapsed, kinds={"redirect"}, within=10, caplog=caplog)


# --- download hops ------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", list(UNSAFE_TARGETS), ids=list(UNSAFE_TARGETS))
def test_download_refuses_an_unsafe_redirect_without_connecting(
    target: str, hostile: Against, network_guard: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    run = hostile.download(unsafe_redirect(target), **SETTINGS)
    assert_hop_refused(run.err, run.elapsed, network_guard, caplog, run.server)
    assert run.api.request_count == 0


@pytest.mark.parametrize("target", ["plain-http", "metadata", "file"])
def test_operator_publishes_nothing_after_an_unsafe_redirect(
    target: str,
    hostile: Against,
    network_guard: list[str],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    destination: Path,
) -> None:
    run = hostile.download(unsafe_redirect(target), operator=True, **SETTINGS)
    assert not destination.exists(), "a file was published after a refused redirect"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "state") == [], "files left behind"
    assert_hop_refused(run.err, run.elapsed, network_guard, caplog, run.server)


def test_download_stops_a_redirect_loop(
    connect: Any, network_guard: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    ports: dict[str, str] = {}
    a = HostileServer(redirect_to(lambda r: signed_link(ports["b"], "/bucket/b.csv")))
    b = HostileServer(redirect_to(lambda r: signed_link(ports["a"], "/bucket/a.csv")))
    with HostileServer(refuse) as api, a, b:
        ports.update(a=a.url, b=b.url)
        conn_id = connect(api.url, **{**SETTINGS, "max_attempts": 1})
        err, elapsed = failure(download_call(conn_id, signed_link(a.url, "/bucket/a.csv")))
    assert_redirects_stopped(err, elapsed, network_guard, caplog, a, b)


def test_download_stops_after_max_redirects(
    hostile: Against,
    network_guard: list[str],
    caplog: pytest.LogCaptureFixture,
    destination: Path,
) -> None:
    def next_hop(req: Request) -> str:
        return f"/hop/{req.index + 1}.csv?X-Amz-Signature={req.param('X-Amz-Signature')}"

    run = hostile.download(
        redirect_to(next_hop), operator=True, server={"max_requests": 60}, **{**SETTINGS, "max_attempts": 1}
    )
    assert not destination.exists()
    assert_redirects_stopped(run.err, run.elapsed, network_guard, caplog, run.server)


@pytest.mark.parametrize("link", ["metadata", "metadata-https", "file", "ftp", "plain-http"])
def test_download_refuses_an_unsafe_link(
    link: str, connect: Any, network_guard: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    with HostileServer(refuse) as api:
        conn_id = connect(api.url, **SETTINGS)
        err, elapsed = failure(download_call(conn_id, UNSAFE_TARGETS[link]))
    assert_api_error(err, elapsed, kinds=None, within=10)
    assert network_guard == []
    assert api.request_count == 0
    assert_api_error(err, elapsed, kinds={"unsafe_url"}, within=10)


@pytest.mark.parametrize("base", ["https://169.254.169.254", "http://example.com", "https://[fe80::1]:8443"])
def test_sync_hook_refuses_an_unsafe_base_url(
    base: str, connect: Any, network_guard: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    conn_id = connect(base, **SETTINGS)
    err, elapsed = failure(sync_call(conn_id, "iter_folders"))
    assert_api_error(err, elapsed, kinds=None, within=10)
    assert network_guard == [], f"tried to reach the network: {network_guard}"
    assert_api_error(err, elapsed, kinds={"unsafe_url"}, within=10, caplog=caplog)


async def test_async_hook_refuses_an_unsafe_base_url(
    connect: Any, network_guard: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    conn_id = connect("https://169.254.169.254", **SETTINGS)
    err, elapsed = await afailure(async_call(conn_id, "iter_folders"))
    assert_api_error(err, elapsed, kinds=None, within=10)
    assert network_guard == [], f"tried to reach the network: {network_guard}"
    assert_api_error(err, elapsed, kinds={"unsafe_url"}, within=10)


# --- API calls are never redirected ------------------------------------------------------------------


def assert_not_followed(
    err: Any,
    elapsed: float,
    network_guard: list[str],
    api: HostileServer,
    *,
    target: HostileServer | None = None,
    caplog: Any = None,
) -> None:
    """The redirect answer is final (one request, nothing else reached); ``redirect`` or a 3xx ``answer``."""
    assert_api_error(err, elapsed, kinds=None, within=10)
    if target is not None:
        assert target.request_count == 0, "the redirect of an API call was followed"
    assert api.request_count == 1, "a redirect answer is final"
    assert network_guard == []
    if caplog is not None:
        assert_no_secret(err, caplog)
    kind = getattr(err, "kind", "<no kind attribute>")
    assert kind in {"redirect", "answer"}, f"kind {kind!r}, expected 'redirect' or 'answer': {err}"
    assert kind == "redirect" or 300 <= (err.http_status or 0) < 400, f"http_status {err.http_status}: {err}"


@pytest.mark.parametrize("call", ["iter_folders", "add_accounts"])
@pytest.mark.parametrize("status", [302, 307])
def test_sync_api_call_does_not_follow_a_redirect(
    call: str, status: int, hostile: Against, network_guard: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    with HostileServer(refuse) as target:
        run = hostile.call(redirect_to(lambda r: target.url + r.target, status), call, **SETTINGS)
    assert_not_followed(run.err, run.elapsed, network_guard, run.server, target=target, caplog=caplog)


async def test_async_api_call_does_not_follow_a_redirect(
    hostile: Against, network_guard: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    with HostileServer(refuse) as target:
        run = await hostile.acall(redirect_to(lambda r: target.url + r.target), "iter_executions", **SETTINGS)
    assert_not_followed(run.err, run.elapsed, network_guard, run.server, target=target, caplog=caplog)


def test_sync_api_call_does_not_follow_a_redirect_to_metadata(
    hostile: Against, network_guard: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    run = hostile.call(redirect_to(lambda r: UNSAFE_TARGETS["metadata"]), "iter_executions", **SETTINGS)
    assert_not_followed(run.err, run.elapsed, network_guard, run.server)
