"""``AbmHook.service_time``: the service's clock, read from the ``Date`` of a one-folder page.

The list sync measures "a day later" on the service's clock, so a worker with a skewed clock retries
neither early nor late. Against a scripted local server (the hostile suite's :class:`HostileServer`):
a valid ``Date`` is returned as aware UTC, a missing or garbled one falls back to this machine's clock
with one warning, and a 503 is retried by the hook's usual policy. Then once against the emulator.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks.abm import AbmHook
from reliability.hostile.servers import Conn, HostileServer, Request, error_body

KEY = "sk-test-service-time-0123456789"
FOLDERS = "/accountLists/v2/folders"
PAGE = {"folders": [], "nextPageToken": ""}
CONN_ID = "abm_service_time"


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], AbmHook]]:
    """``hook(url)``: a hook on ``url`` with ``KEY``, short waits and three attempts, closed afterwards."""
    made: list[AbmHook] = []

    def make(url: str) -> AbmHook:
        conn = {"conn_type": "abm", "host": url, "password": KEY}
        monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(conn))
        made.append(AbmHook(CONN_ID, max_attempts=3, retry_max_wait=0.1, request_timeout=5))
        return made[-1]

    yield make
    for one in made:
        one.close()


def _folders_page(date: str | None, *, fail_first: int = 0) -> Callable[[Conn, Request], None]:
    """A handler answering the one-folder page with ``Date: date`` (none when ``None``), after
    ``fail_first`` answers of 503 (which carry a different, decoy ``Date``)."""

    def handler(conn: Conn, req: Request) -> None:
        if req.index < fail_first:
            decoy = {"Date": "Thu, 01 Jan 1998 00:00:00 GMT"}
            conn.answer(503, error_body(503, "UNAVAILABLE", "try again"), decoy)
            return
        conn.answer(200, PAGE, {"Date": date} if date is not None else None)

    return handler


def _warnings(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> list[str]:
    """The warnings logged during the test, having checked the key is in none of the logs.

    The hook logs through Airflow's structlog logger, which prints to stdout rather than to stdlib
    logging, so its lines are read from ``capsys`` (as ``test_async_hook`` does); ``caplog`` holds
    the stdlib records (urllib3's), searched for the key too.
    """
    printed = capsys.readouterr()
    stdlib = caplog.text + "\n".join(r.getMessage() for r in caplog.records)
    assert KEY not in printed.out + printed.err + stdlib
    lines = (printed.out + printed.err).splitlines()
    hook_warnings = [line for line in lines if re.search(r"\[warning\s*\]", line)]
    return hook_warnings + [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    ("date", "expected"),
    [
        ("Tue, 03 Mar 2026 04:05:06 GMT", datetime(2026, 3, 3, 4, 5, 6, tzinfo=UTC)),
        # A zone other than GMT (not what RFC 9110 sends, but parsable) is converted to UTC.
        ("Tue, 03 Mar 2026 06:05:06 +0200", datetime(2026, 3, 3, 4, 5, 6, tzinfo=UTC)),
        # "-0000" (no zone information) is read as UTC.
        ("Tue, 03 Mar 2026 04:05:06 -0000", datetime(2026, 3, 3, 4, 5, 6, tzinfo=UTC)),
    ],
)
def test_the_date_header_is_the_service_time(
    hook: Callable[[str], AbmHook],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    date: str,
    expected: datetime,
) -> None:
    caplog.set_level(logging.DEBUG)
    with HostileServer(_folders_page(date)) as srv:
        got = hook(srv.url).service_time()
    assert got == expected
    assert got.tzinfo is not None and got.utcoffset() == timedelta(0)
    assert got.microsecond == 0
    assert srv.request_count == 1
    req = srv.requests[0]
    assert (req.method, req.path, req.param("pageSize")) == ("GET", FOLDERS, "1")
    assert req.header("Authorization") == f"Bearer {KEY}"
    assert _warnings(capsys, caplog) == []


@pytest.mark.parametrize(
    ("date", "quoted"),
    [
        (None, "no Date header"),
        ("yesterday-ish", "'yesterday-ish'"),
        ("Tue, 99 Foo 2026 99:99:99 GMT", "'Tue, 99 Foo 2026 99:99:99 GMT'"),
        # A long value is quoted cut to 60 characters; the key is redacted, never logged.
        (f"not a date {'x' * 80} {KEY}", "'not a date " + "x" * 49 + "...'"),
        (f"{KEY} not a date", "'*** not a date'"),
    ],
    ids=["missing", "words", "garbled", "long", "key"],
)
def test_no_usable_date_falls_back_to_the_local_clock_with_one_warning(
    hook: Callable[[str], AbmHook],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    date: str | None,
    quoted: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    with HostileServer(_folders_page(date)) as srv:
        before = datetime.now(UTC).replace(microsecond=0)
        got = hook(srv.url).service_time()
        after = datetime.now(UTC)
    assert before <= got <= after
    assert got.tzinfo is not None and got.utcoffset() == timedelta(0)
    assert got.microsecond == 0
    warned = _warnings(capsys, caplog)
    assert len(warned) == 1, warned
    assert quoted in warned[0] and "clock" in warned[0]


def test_a_503_is_retried_and_the_date_of_the_answer_is_used(
    hook: Callable[[str], AbmHook], capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with HostileServer(_folders_page("Wed, 04 Mar 2026 10:11:12 GMT", fail_first=1)) as srv:
        got = hook(srv.url).service_time()
    assert got == datetime(2026, 3, 4, 10, 11, 12, tzinfo=UTC)
    assert srv.request_count == 2
    assert all(r.path == FOLDERS and r.param("pageSize") == "1" for r in srv.requests)
    # The one warning is the retry policy's ("attempt 1/3, retrying"), not a fallback to this clock.
    warned = _warnings(capsys, caplog)
    assert len(warned) == 1 and "attempt 1/3" in warned[0], warned


def test_a_503_on_every_attempt_raises_after_the_policy_s_attempts(
    hook: Callable[[str], AbmHook],
) -> None:
    always_503 = _folders_page("Wed, 04 Mar 2026 10:11:12 GMT", fail_first=99)
    with HostileServer(always_503) as srv, pytest.raises(AbmApiError) as caught:
        hook(srv.url).service_time()
    assert caught.value.http_status == 503
    assert caught.value.attempts == 3
    assert srv.request_count == 3


def test_against_the_emulator_the_time_is_the_emulated_clock(abm: Any) -> None:
    """The emulator's ``Date`` is its emulated clock, moved here two days from this machine's: an aware
    UTC time in whole seconds, within a minute of what its admin API says."""
    abm.advance(2 * 24 * 3600)
    made = AbmHook(max_attempts=2, retry_max_wait=0.5)
    try:
        got = made.service_time()
    finally:
        made.close()
    emulated = datetime.fromisoformat(abm.clock()["now"].replace("Z", "+00:00"))
    assert got.tzinfo is not None and got.utcoffset() == timedelta(0)
    assert got.microsecond == 0
    assert abs(got - emulated) < timedelta(minutes=1)
