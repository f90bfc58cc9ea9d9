"""Injected faults on both origins: what a client must survive, reproduced on real connections."""

from __future__ import annotations

import http.client
import random
from urllib.parse import urlsplit

import pytest
import requests
from asgi_calls import call, echo
from emulator_api import error_of

from abm_emulator.faults import FaultInjector, FaultMiddleware

FOLDERS = "/accountLists/v2/folders"


def _folder_count(api) -> int:
    return len(api.get(FOLDERS).json()["folders"])


def test_status_before_refuses_without_effect(emulator, api):
    emulator.inject_fault(method="POST", path=FOLDERS, kind="status", status=503, retry_after="2")
    response = api.post(FOLDERS, {"folderName": "F"})
    assert response.status_code == 503
    assert error_of(response)["status"] == "UNAVAILABLE"
    assert response.headers["retry-after"] == "2" and response.headers["x-request-id"]
    assert _folder_count(api) == 0
    assert api.post(FOLDERS, {"folderName": "F"}).status_code == 200  # count defaults to 1


def test_status_after_lets_the_post_happen(emulator, api):
    emulator.inject_fault(method="POST", path=FOLDERS, kind="status", status=500, when="after")
    response = api.post(FOLDERS, {"folderName": "F"})
    assert response.status_code == 500 and error_of(response)["status"] == "INTERNAL"
    assert _folder_count(api) == 1


def test_reset_drops_the_connection_without_an_answer(emulator, api):
    emulator.inject_fault(method="GET", path=FOLDERS, kind="reset")
    with pytest.raises(requests.ConnectionError):
        requests.get(api.base_url + FOLDERS, headers=api.session.headers, timeout=30)
    assert api.get(FOLDERS).status_code == 200


def test_disconnect_mid_body_on_storage_then_range_resume(emulator, api):
    api.job()
    fired = emulator.fire("TACTIC_PERFORMANCE", size_bytes=100_000)
    whole = requests.get(fired["downloadUri"], timeout=30).content
    emulator.inject_fault(
        origin="storage", method="GET", path="/.*\\.csv", kind="disconnect_mid_body", after_bytes=10_000
    )
    url = urlsplit(fired["downloadUri"])
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    connection.request("GET", f"{url.path}?{url.query}")
    response = connection.getresponse()
    assert response.status == 200 and int(response.headers["content-length"]) == len(whole)
    with pytest.raises(http.client.IncompleteRead) as cut:
        response.read()
    connection.close()
    received = cut.value.partial
    assert received == whole[:10_000]
    rest = requests.get(fired["downloadUri"], headers={"Range": f"bytes={len(received)}-"}, timeout=30)
    assert rest.status_code == 206 and bytes(received) + rest.content == whole


def test_delay_holds_the_answer(emulator, api):
    emulator.inject_fault(method="GET", path=FOLDERS, kind="delay", delay_seconds=3)
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.get(api.base_url + FOLDERS, headers=api.session.headers, timeout=0.5)
    emulator.inject_fault(method="GET", path=FOLDERS, kind="delay", delay_seconds=0.2)
    assert api.get(FOLDERS).status_code == 200


def test_malformed_json_keeps_status_but_breaks_the_body(emulator, api):
    api.folder()
    emulator.inject_fault(method="GET", path=FOLDERS, kind="malformed_json")
    response = api.get(FOLDERS)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    with pytest.raises(ValueError):
        response.json()
    assert api.get(FOLDERS).json()["folders"]


def test_count_method_and_full_match_path(emulator, api):
    emulator.inject_fault(method="GET", path="/accountLists/v2/folder", kind="status", status=503, count=2)
    emulator.inject_fault(method="POST", path=FOLDERS, kind="status", status=429, count=2)
    assert api.get(FOLDERS).status_code == 200  # the first fault's path is not a full match
    assert [api.post(FOLDERS, {"folderName": "x"}).status_code for _ in range(3)] == [429, 429, 200]
    assert len(emulator.admin("GET", "/_admin/faults")["faults"]) == 1
    emulator.clear_faults()
    assert emulator.admin("GET", "/_admin/faults")["faults"] == []


def test_probability_is_reproducible_from_the_seed(emulator, api):
    def pattern() -> list[int]:
        emulator.clear_faults()
        emulator.inject_fault(method="GET", path=FOLDERS, kind="status", status=503, probability=0.5, seed=7)
        return [api.get(FOLDERS).status_code for _ in range(20)]

    first, second = pattern(), pattern()
    rng = random.Random(7)
    assert first == second == [503 if rng.random() < 0.5 else 200 for _ in range(20)]


def test_admin_api_is_never_faulted(emulator):
    emulator.inject_fault(method="*", path=".*", kind="status", status=500, count=5)
    assert emulator.admin("GET", "/_admin/health") == {"ok": True}
    emulator.reset()
    assert emulator.admin("GET", "/_admin/faults")["faults"] == []


@pytest.mark.parametrize(
    ("fault", "field"),
    [
        ({"kind": "explode"}, "kind"),
        ({"kind": "status", "status": 200}, "status"),
        ({"kind": "status", "path": "("}, "path"),
        ({"kind": "delay", "delaySeconds": -1}, "delaySeconds"),
        ({"kind": "status", "probability": 2}, "probability"),
        ({"kind": "status", "colour": "red"}, "colour"),
        ({"kind": "status", "origin": "db"}, "origin"),
        ({"kind": "status", "count": 0}, "count"),
        ({"kind": "status", "bodyContains": ""}, "bodyContains"),
        ({"kind": "status", "bodyContains": 5}, "bodyContains"),
    ],
)
def test_bad_fault_specs_are_rejected_naming_the_field(emulator, fault, field):
    response = requests.post(emulator.base_url + "/_admin/faults", json=fault, timeout=30)
    assert response.status_code == 400
    assert [v["field"] for v in error_of(response)["details"][0]["fieldViolations"]] == [field]


@pytest.mark.parametrize(
    ("status", "name"),
    [
        (403, "PERMISSION_DENIED"),
        (423, "ABORTED"),
        (429, "RESOURCE_EXHAUSTED"),
        (500, "INTERNAL"),
        (503, "UNAVAILABLE"),
    ],
)
def test_status_faults_use_the_documented_status_names(emulator, api, status, name):
    emulator.inject_fault(method="*", path="/exports/v1/.*", kind="status", status=status)
    response = api.post("/exports/v1/exportJobs", {"type": "TACTIC_PERFORMANCE", "schedule": "0 5 * * *"})
    assert response.status_code == status and error_of(response)["status"] == name


def test_reset_on_the_storage_origin(emulator, api):
    api.job()
    fired = emulator.fire("TACTIC_PERFORMANCE")
    emulator.inject_fault(origin="storage", path=".*", kind="reset")
    with pytest.raises(requests.ConnectionError):
        requests.get(fired["downloadUri"], timeout=30)
    assert requests.get(fired["downloadUri"], timeout=30).status_code == 200
    assert [r["status"] for r in emulator.requests_seen() if r["origin"] == "storage"] == [None, 200]


def _accounts(*ids: str) -> dict[str, list[dict[str, str]]]:
    return {"accounts": [{"id": i, "name": f"Name {i}"} for i in ids]}


def test_body_contains_refuses_every_batch_holding_the_account_and_names_it(emulator, api):
    list_id = api.account_list()
    add = f"/accountLists/v2/accountLists/{list_id}/accounts/add"
    fault = emulator.inject_fault(
        kind="status", status=400, method="POST", path=r".*/accounts/add", body_contains="001BAD", count=None
    )
    assert (fault["bodyContains"], fault["count"]) == ("001BAD", None)
    batch = ["001000000000001", "001BAD000000002", "001000000000003", "001000000000004"]
    for _ in range(2):  # unlimited: every batch with it
        refused = api.post(add, _accounts(*batch))
        assert refused.status_code == 400
        error = error_of(refused)
        assert error["status"] == "INVALID_ARGUMENT" and "accounts[1].id" in error["message"]
        assert error["details"] == [
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [
                    {"field": "accounts[1].id", "description": "account refused by the service"}
                ],
            }
        ]
    # A client splitting the refused batch in halves: the half without it reaches the route whole.
    kept = api.post(add, _accounts(*batch[2:]))
    assert kept.status_code == 200 and kept.json()["addedAccounts"] == 2
    refused = api.post(add, _accounts(*batch[:2]))
    assert [v["field"] for v in error_of(refused)["details"][0]["fieldViolations"]] == ["accounts[1].id"]
    assert api.post(add, _accounts(batch[0])).status_code == 200
    assert {m["id"] for m in emulator.members(list_id)} == {batch[0], *batch[2:]}
    [described] = emulator.admin("GET", "/_admin/faults")["faults"]
    assert described["fired"] == 3 and described["bodyContains"] == "001BAD"


def test_body_contains_with_other_statuses_names_no_field(emulator, api):
    emulator.inject_fault(kind="status", status=503, method="POST", path=FOLDERS, body_contains="Doomed")
    assert api.post(FOLDERS, {"folderName": "Fine"}).status_code == 200
    refused = api.post(FOLDERS, {"folderName": "Doomed"})
    assert refused.status_code == 503 and error_of(refused)["details"] == []
    assert [f["name"] for f in api.get(FOLDERS).json()["folders"]] == ["Fine"]


async def test_body_contains_reads_a_bounded_body_and_replays_it():
    injector = FaultInjector()
    injector.add({"kind": "status", "status": 503, "bodyContains": "Zürich", "count": None})
    app = FaultMiddleware(echo, "api", injector, body_limit=64)
    needle = '{"city": "Zürich"}'.encode()
    assert (await call(app, chunks=(needle[:12], needle[12:]))).status == 503  # split across messages
    other = b'{"city": "Bern", "pad": "' + b"p" * 20 + b'"}'
    answer = await call(app, chunks=(other[:10], other[10:30], other[30:]))
    assert (answer.status, answer.body) == (200, other)  # the app received every byte
    big = needle[:-1] + b', "pad": "' + b"p" * 100 + b'"}'
    answer = await call(app, chunks=(big[:40], big[40:80], big[80:]))
    assert (answer.status, answer.body) == (200, big)  # over the limit: no match, still whole
