"""One ``Date`` header on every response, from the emulated clock: a client measures delays on the
service's clock (a provider retries not-found accounts a day later by the service's ``Date``).

Read with urllib3's ``getlist`` because `requests` joins repeated headers with ``, `` and an HTTP date
holds a comma itself.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

import requests
from asgi_calls import call, echo

from abm_emulator.requestlog import RequestBookkeeping, RequestLog

FOLDERS = "/accountLists/v2/folders"
THREE_DAYS = 86400 * 3


async def test_the_emulated_date_replaces_the_apps_own():
    instant = datetime(2026, 3, 3, 4, 5, 6, 789_000, tzinfo=UTC)
    app = RequestBookkeeping(echo, "storage", RequestLog(), lambda: instant)
    answer = await call(app, method="GET", path="/object.csv")
    assert answer.header_values(b"date") == [b"Tue, 03 Mar 2026 04:05:06 GMT"]
    assert len(answer.header_values(b"x-request-id")) == 1


def _assert_emulated_date(response: requests.Response, emulator) -> None:
    dates = response.raw.headers.getlist("date")
    assert len(dates) == 1, dates
    sent = parsedate_to_datetime(dates[0])
    assert dates[0].endswith(" GMT") and sent.tzinfo is not None
    emulated = datetime.fromisoformat(emulator.clock()["now"])
    assert abs(emulated - sent) <= timedelta(seconds=2), (dates[0], emulated)
    assert datetime.now(UTC) - sent < -timedelta(days=2), "the wall clock, not the emulated one"


def test_api_answers_carry_the_emulated_date_after_an_advance(emulator, api):
    emulator.advance(THREE_DAYS)
    _assert_emulated_date(api.get(FOLDERS), emulator)  # a route
    _assert_emulated_date(api.post(FOLDERS, {"folderName": 5}), emulator)  # a validation error
    _assert_emulated_date(api.get("/no/such/route"), emulator)  # routing's 404
    _assert_emulated_date(requests.get(emulator.base_url + "/_admin/clock", timeout=30), emulator)
    emulator.inject_fault(method="GET", path=FOLDERS, kind="status", status=503, retry_after="2")
    faulted = api.get(FOLDERS)
    assert faulted.status_code == 503
    _assert_emulated_date(faulted, emulator)


def test_storage_answers_carry_the_emulated_date(emulator, api):
    api.job()
    emulator.advance(THREE_DAYS)
    fired = emulator.fire("TACTIC_PERFORMANCE")  # its link is signed on the emulated clock
    response = requests.get(fired["downloadUri"], timeout=30)
    assert response.status_code == 200
    _assert_emulated_date(response, emulator)
    emulator.inject_fault(origin="storage", path=".*", kind="status", status=500)
    _assert_emulated_date(requests.get(fired["downloadUri"], timeout=30), emulator)
