"""downloadUri: pre-signed, served by the storage origin, expiring, restating the last 48 hours."""

from __future__ import annotations

import csv
import io
from datetime import date, datetime, timedelta

import requests

DAY = 86_400
KEY = ("date", "tactic_id")


def _rows(text: str) -> dict[tuple[str, str], dict[str, str]]:
    return {(r["date"], r["tactic_id"]): r for r in csv.DictReader(io.StringIO(text))}


def _latest_uri(api) -> str:
    [latest] = api.executions(pageSize=1, orderBy="createTime desc", filter="status=COMPLETE").json()[
        "exportJobExecutions"
    ]
    return latest["downloadUri"]


def test_link_expires_after_ttl_and_a_new_listing_gives_a_fresh_one(emulator, api):
    api.job()
    emulator.fire("TACTIC_PERFORMANCE")
    uri = _latest_uri(api)
    assert requests.get(uri, timeout=30).status_code == 200
    emulator.advance(901)  # default --link-ttl 900
    assert requests.get(uri, timeout=30).status_code == 403
    fresh = _latest_uri(api)
    assert fresh != uri
    assert requests.get(fresh, timeout=30).status_code == 200


def test_storage_refuses_a_request_that_carries_authorization(emulator, api):
    api.job()
    emulator.fire("TACTIC_PERFORMANCE")
    uri = _latest_uri(api)
    response = requests.get(uri, headers={"Authorization": f"Bearer {api.key}"}, timeout=30)
    assert response.status_code == 400


def test_file_size_follows_fire_and_is_reported_in_state(emulator, api):
    api.job()
    fired = emulator.fire("TACTIC_PERFORMANCE", size_bytes=50_000)
    body = requests.get(fired["downloadUri"], timeout=30).content
    assert 40_000 < len(body) < 60_000
    [execution] = next(
        iter(a["executions"] for a in emulator.state()["accounts"].values() if api.key in a["apiKeys"])
    )
    assert execution["file"]["bytes"] == len(body)


def test_later_execution_restates_only_the_last_48_hours(emulator, api):
    api.job()
    first = emulator.fire("TACTIC_PERFORMANCE")
    old = _rows(requests.get(first["downloadUri"], timeout=30).text)
    emulator.advance(DAY)
    second = emulator.fire("TACTIC_PERFORMANCE")
    new = _rows(requests.get(second["downloadUri"], timeout=30).text)
    generated = datetime.fromisoformat(second["createTime"].replace("Z", "+00:00"))
    window_start: date = (generated - timedelta(hours=48)).date()
    common = set(old) & set(new)
    settled = [k for k in common if date.fromisoformat(k[0]) < window_start - timedelta(days=1)]
    restated = [k for k in common if date.fromisoformat(k[0]) >= window_start]
    assert settled and restated
    assert all(old[k] == new[k] for k in settled)
    assert any(old[k] != new[k] for k in restated)


def test_storage_sees_no_api_key(emulator, api):
    api.job()
    fired = emulator.fire("TACTIC_PERFORMANCE")
    requests.get(fired["downloadUri"], timeout=30)
    storage = [r for r in emulator.requests_seen() if r["origin"] == "storage"]
    assert storage and all("authorization" not in r["headers"] for r in storage)
    assert all(api.key not in r["path"] + r["query"] for r in storage)
