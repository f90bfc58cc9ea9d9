"""Injected faults on both origins: what a client must survive, reproduced on real connections."""

from __future__ import annotations

import http.client
import random
from urllib.parse import urlsplit

import pytest
import requests
from emulator_api import error_of

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
