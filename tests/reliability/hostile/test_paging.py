"""Class 3: a listing that never ends.

Every page is empty and hands out a fresh ``nextPageToken``, or the tokens cycle. A listing must stop
within ``max_pages`` pages (``AbmApiError(kind="paging")``), a cycle must be caught (even one longer
than ``page_cursor_memory``, by the page bound), the sensor's poke must end, and the trigger must send
its one terminal event soon after its deadline even while a poll is still paging.

The servers cap the requests they answer (``max_requests``), so an old client that pages forever
ends up with refused connections and the test fails on the request count instead of hanging.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from .checks import ASYNC_CALLS, KEY, TYPE, assert_api_error, assert_no_secret, trigger_events
from .runs import Against
from .servers import Conn, HostileServer, Request, Tokens, item_key, page

pytestmark = pytest.mark.timeout(30)

MAX_PAGES = 20
SETTINGS = {"max_pages": MAX_PAGES, "max_attempts": 2, "retry_max_wait": 0.2}


def endless(delay: float = 0.0) -> Callable[[Conn, Request], None]:
    """Every page empty, with a token never seen before; ``delay`` seconds per page."""
    tokens = Tokens()

    def handle(conn: Conn, req: Request) -> None:
        if delay and conn.server.stopping.wait(delay):
            return
        conn.answer(200, page(item_key(req), [], tokens.fresh()))

    return handle


def cycling(length: int) -> Callable[[Conn, Request], None]:
    """Empty pages whose tokens go round ``tok-0 .. tok-<length-1>``, then ``tok-0`` again."""

    def handle(conn: Conn, req: Request) -> None:
        current = req.param("pageToken")
        position = int(current.split("-")[1]) + 1 if current else 0
        conn.answer(200, page(item_key(req), [], f"tok-{position % length}"))

    return handle


SYNC_LISTINGS = ["iter_folders", "iter_account_lists", "iter_executions"]


@pytest.mark.parametrize("call", SYNC_LISTINGS)
def test_sync_listing_stops_at_max_pages(
    call: str, hostile: Against, caplog: pytest.LogCaptureFixture
) -> None:
    run = hostile.call(endless(), call, server={"max_requests": 200}, **SETTINGS)
    assert run.server.request_count <= MAX_PAGES + 1, (
        f"{run.server.request_count} pages read with max_pages={MAX_PAGES}"
    )
    assert_api_error(run.err, run.elapsed, kinds={"paging"}, within=15, caplog=caplog)


@pytest.mark.parametrize("call", ASYNC_CALLS)
async def test_async_listing_stops_at_max_pages(
    call: str, hostile: Against, caplog: pytest.LogCaptureFixture
) -> None:
    run = await hostile.acall(endless(), call, server={"max_requests": 200}, **SETTINGS)
    assert run.server.request_count <= MAX_PAGES + 1, (
        f"{run.server.request_count} pages read with max_pages={MAX_PAGES}"
    )
    assert_api_error(run.err, run.elapsed, kinds={"paging"}, within=15, caplog=caplog)


def test_hook_argument_max_pages_wins_over_the_extra(hostile: Against) -> None:
    run = hostile.call(
        endless(),
        "iter_folders",
        server={"max_requests": 200},
        hook={"max_pages": 5},
        **{**SETTINGS, "max_pages": 1000},
    )
    assert_api_error(run.err, run.elapsed, kinds={"paging"}, within=15)
    assert run.server.request_count <= 6


def test_sync_listing_catches_a_token_cycle(hostile: Against) -> None:
    run = hostile.call(cycling(3), "iter_executions", server={"max_requests": 200}, **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds=None, within=15)
    assert run.server.request_count <= 5, (
        f"a cycle of 3 tokens took {run.server.request_count} pages to notice"
    )
    assert_api_error(run.err, run.elapsed, kinds={"paging"}, within=15)


async def test_async_listing_catches_a_token_cycle(hostile: Against) -> None:
    run = await hostile.acall(cycling(3), "iter_executions", server={"max_requests": 200}, **SETTINGS)
    assert_api_error(run.err, run.elapsed, kinds=None, within=15)
    assert run.server.request_count <= 5, (
        f"a cycle of 3 tokens took {run.server.request_count} pages to notice"
    )
    assert_api_error(run.err, run.elapsed, kinds={"paging"}, within=15)


def test_sync_cycle_longer_than_the_token_memory_is_bounded(hostile: Against) -> None:
    run = hostile.call(
        cycling(10), "iter_folders", server={"max_requests": 200}, **{**SETTINGS, "page_cursor_memory": 4}
    )
    assert_api_error(run.err, run.elapsed, kinds=None, within=15)
    assert run.server.request_count <= MAX_PAGES + 1
    assert_api_error(run.err, run.elapsed, kinds={"paging"}, within=15)


async def test_async_cycle_longer_than_the_token_memory_is_bounded(hostile: Against) -> None:
    run = await hostile.acall(
        cycling(10), "iter_folders", server={"max_requests": 200}, **{**SETTINGS, "page_cursor_memory": 4}
    )
    assert_api_error(run.err, run.elapsed, kinds=None, within=15)
    assert run.server.request_count <= MAX_PAGES + 1
    assert_api_error(run.err, run.elapsed, kinds={"paging"}, within=15)


def test_sensor_poke_ends_on_an_endless_listing(
    connect: Any, caplog: pytest.LogCaptureFixture, context: dict[str, Any]
) -> None:
    from abm_provider.sensors.exports import ExecutionCompleteSensor

    with HostileServer(endless(), max_requests=200) as srv:
        conn_id = connect(srv.url, **SETTINGS)
        sensor = ExecutionCompleteSensor(
            task_id="s", export_type=TYPE, abm_conn_id=conn_id, timeout=30, poke_interval=1
        )
        started = time.monotonic()
        try:
            outcome: Any = sensor.poke(context)
        except Exception as exc:  # noqa: BLE001 - either ending is allowed, the bound is the point
            outcome = exc
        elapsed = time.monotonic() - started
    assert srv.request_count <= MAX_PAGES + 1, f"one poke read {srv.request_count} pages"
    assert elapsed < 15
    if isinstance(outcome, Exception):
        # A listing that never ends is final: the sensor fails the task for good, naming the bound.
        from airflow.sdk.exceptions import AirflowFailException

        assert isinstance(outcome, AirflowFailException), repr(outcome)
        assert f"did not end within max_pages={MAX_PAGES} pages" in str(outcome)
        assert_api_error(outcome.__context__, elapsed, kinds={"paging"}, within=15)
    else:
        assert not outcome.is_done
    assert_no_secret(outcome if isinstance(outcome, Exception) else None, caplog)


async def test_trigger_ends_at_its_deadline_while_paging(
    connect: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with HostileServer(endless(delay=0.3), max_requests=200) as srv:
        conn_id = connect(srv.url, max_attempts=2, retry_max_wait=0.2)
        events, deadline = await trigger_events(
            conn_id,
            request_timeout=5,
            late=lambda: f"the trigger was still paging ({srv.request_count} pages)",
        )
        ended = time.time()
    assert ended < deadline + 10
    assert len(events) == 1, f"expected one terminal event, got {len(events)}"
    payload = events[0].payload
    assert payload.get("status") in {"timeout", "error"}, payload
    assert KEY not in repr(payload)
    assert_no_secret(None, caplog, events=events)
