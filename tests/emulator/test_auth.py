"""Credentials, isolation between accounts, request ids and the error body on every kind of failure."""

from __future__ import annotations

import base64

import pytest
import requests
from emulator_api import error_of


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer",
        "Bearer wrong-key",
        "Token test-key-alpha",
        "Basic !!!",
        "Basic " + base64.b64encode(b"test-key-alpha:secret").decode(),
        "Basic " + base64.b64encode(b"wrong:").decode(),
    ],
)
def test_missing_or_unknown_credentials_are_401(emulator, authorization):
    headers = {"Authorization": authorization} if authorization else {}
    response = requests.get(emulator.base_url + "/accountLists/v2/folders", headers=headers, timeout=30)
    assert response.status_code == 401
    error = error_of(response)
    assert error["status"] == "UNAUTHENTICATED"
    assert error["message"] == "Request had invalid credentials."
    assert response.headers["x-request-id"]


def test_basic_auth_with_key_as_user_and_empty_password(emulator, api):
    folder = api.folder("basic")
    token = base64.b64encode(f"{emulator.api_key}:".encode()).decode()
    response = requests.get(
        emulator.base_url + "/accountLists/v2/folders",
        headers={"Authorization": f"Basic {token}"},
        timeout=30,
    )
    assert response.status_code == 200
    assert [f["uuid"] for f in response.json()["folders"]] == [folder]


def test_each_key_is_its_own_account(emulator, api, api_beta):
    list_id = api.account_list("alpha's")
    api.job()
    assert api_beta.get("/accountLists/v2/folders").json()["folders"] == []
    assert api_beta.get("/accountLists/v2/accountLists").json()["lists"] == []
    add = api_beta.post(
        f"/accountLists/v2/accountLists/{list_id}/accounts/add",
        {"accounts": [{"id": "001000000000001", "crmOrgId": "o", "crmType": "SALESFORCE"}]},
    )
    assert add.status_code == 404
    assert api_beta.executions().status_code == 404
    folder = api.get("/accountLists/v2/folders").json()["folders"][0]["uuid"]
    assert (
        api_beta.post("/accountLists/v2/accountLists", {"listName": "x", "folderId": folder}).status_code
        == 404
    )
    assert (
        api_beta.post(
            "/exports/v1/exportJobs", {"type": "TACTIC_PERFORMANCE", "schedule": "0 5 * * *"}
        ).status_code
        == 200
    )
    assert emulator.members(list_id) == []


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/nowhere", 404),
        ("DELETE", "/accountLists/v2/folders", 405),
        ("PUT", "/exports/v1/exportJobs", 405),
        ("GET", "/exports/v1/exportJobs/X/executions/extra", 404),
    ],
)
def test_routing_errors_use_the_error_body_and_request_id(api, method, path, status):
    response = api.session.request(method, api.base_url + path, timeout=30)
    assert response.status_code == status
    assert error_of(response)["status"] in {"NOT_FOUND", "UNIMPLEMENTED"}
    assert response.headers["x-request-id"]


def test_request_ids_are_unique_per_response(api):
    ids = {api.get("/accountLists/v2/folders").headers["x-request-id"] for _ in range(5)}
    assert len(ids) == 5


def test_openapi_document_has_the_api_and_not_the_admin_routes(emulator):
    paths = requests.get(emulator.base_url + "/openapi.json", timeout=30).json()["paths"]
    assert "/exports/v1/exportJobs/{type}/executions" in paths
    assert "/accountLists/v2/accountLists/{listId}/accounts/remove" in paths
    assert not [p for p in paths if p.startswith("/_admin")]
