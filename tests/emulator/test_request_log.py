"""The request log's bodies: API-origin JSON bodies kept for tests to read, within two bounds.

The bounds are proven in-process with small limits (the layer with the body sent in chunks); that a
test can read the accounts each add carried is proven on the running emulator.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from asgi_calls import call, echo

from abm_emulator.requestlog import RequestBookkeeping, RequestLog

NOW = datetime(2026, 3, 3, 4, 5, 6, tzinfo=UTC)


def _bookkeeping(log: RequestLog, origin: str = "api") -> RequestBookkeeping:
    return RequestBookkeeping(echo, origin, log, lambda: NOW)


async def test_a_body_over_the_limit_is_not_kept_but_its_size_is():
    log = RequestLog(max_body_bytes=100)
    big = json.dumps({"accounts": [{"id": "a" * 50}, {"id": "b" * 50}]}).encode()
    answer = await call(_bookkeeping(log), chunks=(big[:60], big[60:120], big[120:]))
    assert answer.body == big  # the app still received every byte
    small = b'{"accounts": []}'
    await call(_bookkeeping(log), chunks=(small[:5], small[5:]))
    assert [(e["body"], e["bodyBytes"]) for e in log.entries()] == [
        (None, len(big)),
        ({"accounts": []}, len(small)),
    ]


async def test_the_bodies_kept_together_stay_within_the_total_oldest_dropped_first():
    bodies = [json.dumps({"n": n, "pad": "x" * 40}).encode() for n in range(5)]
    size = len(bodies[0])
    log = RequestLog(max_body_bytes=1000, max_total_body_bytes=3 * size)
    for body in bodies:
        await call(_bookkeeping(log), chunks=(body,))
    entries = log.entries()
    assert [e["body"]["n"] if e["body"] else None for e in entries] == [None, None, 2, 3, 4]
    assert [e["bodyBytes"] for e in entries] == [size] * 5  # the entries themselves stay
    assert log.kept_body_bytes() == 3 * size


async def test_entries_pushed_out_of_the_log_free_their_bodies():
    log = RequestLog(maxlen=2)
    for n in range(3):
        await call(_bookkeeping(log), chunks=(json.dumps({"n": n}).encode(),))
    assert [e["body"] for e in log.entries()] == [{"n": 1}, {"n": 2}]
    assert log.kept_body_bytes() == 2 * len(b'{"n": 0}')
    log.clear()
    assert log.entries() == [] and log.kept_body_bytes() == 0


@pytest.mark.parametrize("raw", [b"", b"not json", b'{"a": NaN}', b"[" * 100_000 + b"]" * 100_000])
async def test_only_json_bodies_are_kept(raw):
    log = RequestLog()
    await call(_bookkeeping(log), chunks=(raw,))
    [entry] = log.entries()
    assert entry["body"] is None and entry["bodyBytes"] == len(raw)
    assert log.kept_body_bytes() == 0


async def test_storage_bodies_are_not_read_and_admin_calls_not_logged():
    log = RequestLog()
    await call(_bookkeeping(log, "storage"), method="GET", path="/object.csv")
    await call(_bookkeeping(log), path="/_admin/faults", chunks=(b'{"kind": "reset"}',))
    [entry] = log.entries()
    assert (entry["origin"], entry["body"], entry["bodyBytes"]) == ("storage", None, None)


async def test_a_request_is_logged_on_arrival_and_gets_its_status_once_answered():
    """What a test waiting on the log relies on: an entry without a status is still being served."""
    log = RequestLog()
    while_served: list[list[int | None]] = []

    async def app(scope, receive, send):
        while_served.append([e["status"] for e in log.entries()])
        await echo(scope, receive, send)

    await call(RequestBookkeeping(app, "api", log, lambda: NOW), chunks=(b"{}",))
    assert while_served == [[None]]
    assert [e["status"] for e in log.entries()] == [200]


def _account(account_id: str) -> dict[str, str]:
    return {"id": account_id, "name": f"Name {account_id}"}


def test_the_log_shows_the_accounts_each_add_carried_even_when_refused(emulator, api):
    list_id = api.account_list()
    add = f"/accountLists/v2/accountLists/{list_id}/accounts/add"
    batches = [["001000000000001", "001000000000002"], ["001000000000003"]]
    emulator.inject_fault(method="POST", path=add, kind="status", status=503)
    assert api.post(add, {"accounts": [_account(i) for i in batches[0]]}).status_code == 503
    for batch in batches:
        assert api.post(add, {"accounts": [_account(i) for i in batch]}).status_code == 200
    adds = [r for r in emulator.requests_seen() if r["path"] == add]
    assert [r["status"] for r in adds] == [503, 200, 200]  # the fault answered before any route read it
    assert [[a["id"] for a in r["body"]["accounts"]] for r in adds] == [batches[0], *batches]
    assert all(r["bodyBytes"] > 0 for r in adds)
    assert api.get("/accountLists/v2/folders").status_code == 200
    [listing] = [r for r in emulator.requests_seen() if r["method"] == "GET"]
    assert listing["body"] is None and listing["bodyBytes"] == 0
