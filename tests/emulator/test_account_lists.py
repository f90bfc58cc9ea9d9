"""Account Lists v2 through the real emulator process: folders, lists, add/remove, every error row."""

from __future__ import annotations

import re

import pytest
from emulator_api import error_of, violated_fields

SF = "001000000000{:03d}"  # a well-formed 15-character Salesforce account id


def account(i: int, **overrides):
    return {
        "id": SF.format(i),
        "name": f"Acme {i}",
        "crmOrgId": "00D000000000001",
        "crmType": "SALESFORCE",
        **overrides,
    }


def test_create_folder_answers_create_shape_and_list_uses_other_names(api):
    created = api.post("/accountLists/v2/folders", {"folderName": "EMEA", "folderAccess": "READ_ONLY"})
    assert created.status_code == 200
    body = created.json()
    assert set(body) == {"folderId", "displayName", "folderAccess"}
    assert body["displayName"] == "EMEA" and body["folderAccess"] == "READ_ONLY"

    listed = api.get("/accountLists/v2/folders").json()
    assert listed["nextPageToken"] == ""
    [folder] = listed["folders"]
    assert set(folder) == {"uuid", "name", "orgUuid", "folderAccess", "createdMomentUtc"}
    assert folder["uuid"] == body["folderId"] and folder["name"] == "EMEA"
    assert folder["createdMomentUtc"].endswith("Z")


def test_folder_access_defaults_to_unspecified_and_names_need_not_be_unique(api):
    first = api.post("/accountLists/v2/folders", {"folderName": "Same"}).json()
    second = api.post("/accountLists/v2/folders", {"folderName": "Same"}).json()
    assert first["folderAccess"] == "FOLDER_ACCESS_UNSPECIFIED"
    assert first["folderId"] != second["folderId"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"folderAccess": "PUBLIC"}, "folderName"),
        ({"folderName": "", "folderAccess": "PUBLIC"}, "folderName"),
        ({"folderName": 5, "folderAccess": "PUBLIC"}, "folderName"),
        ({"folderName": "F", "folderAccess": "SECRET"}, "folderAccess"),
    ],
)
def test_bad_folder_bodies_name_the_field(api, body, field):
    response = api.post("/accountLists/v2/folders", body)
    assert response.status_code == 400
    assert error_of(response)["status"] == "INVALID_ARGUMENT"
    assert violated_fields(response) == [field]


@pytest.mark.parametrize("raw", ["[1, 2]", '"text"', "null", "{not json", ""])
def test_body_that_is_not_a_json_object_is_400_never_500(api, raw):
    response = api.session.post(
        api.base_url + "/accountLists/v2/folders", data=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert error_of(response)["status"] == "INVALID_ARGUMENT"
    assert response.headers["x-request-id"]


def test_create_list_in_unknown_folder_is_404(api):
    response = api.post("/accountLists/v2/accountLists", {"listName": "L", "folderId": "no-such-folder"})
    assert response.status_code == 404
    assert error_of(response)["status"] == "NOT_FOUND"


def test_lists_filtered_by_repeated_folder_ids_with_count_as_string(api):
    f1, f2, f3 = api.folder("a"), api.folder("b"), api.folder("c")
    l1, l2 = api.account_list("one", f1), api.account_list("two", f2)
    api.account_list("three", f3)
    api.post(f"/accountLists/v2/accountLists/{l1}/accounts/add", {"accounts": [account(1), account(2)]})

    listed = api.get("/accountLists/v2/accountLists", params=[("folderIds", f1), ("folderIds", f2)]).json()
    by_id = {lst["id"]: lst for lst in listed["lists"]}
    assert set(by_id) == {l1, l2}
    assert by_id[l1] == {
        "id": l1,
        "displayName": "one",
        "createTime": by_id[l1]["createTime"],
        "estimatedAccountsCount": "2",
        "folderId": f1,
    }
    assert by_id[l2]["estimatedAccountsCount"] == "0"
    assert len(api.get("/accountLists/v2/accountLists").json()["lists"]) == 3
    unknown = api.get("/accountLists/v2/accountLists", params={"folderIds": "nope"})
    assert unknown.status_code == 404


def test_add_accounts_counts_added_duplicates_and_not_found(emulator, api):
    list_id = api.account_list()
    url = f"/accountLists/v2/accountLists/{list_id}/accounts/add"
    first = api.post(url, {"accounts": [account(1), account(2)]}).json()
    assert first["addedAccounts"] == 2 and first["duplicateAccounts"] == 0
    assert first["listId"] == list_id and first["accountsNotFound"] == []

    eighteen = "001000000000003AAQ"
    second = api.post(
        url,
        {
            "accounts": [
                account(2),
                account(2),
                account(3, id=eighteen),
                account(4, id="003000000000004"),
                account(5, id="001-bad"),
            ]
        },
    ).json()
    assert second["addedAccounts"] == 1
    assert second["duplicateAccounts"] == 2  # one already on the list, one repeated in the request
    assert [a["id"] for a in second["accountsNotFound"]] == ["003000000000004", "001-bad"]
    assert [a["id"] for a in second["successfulAccounts"]] == [SF.format(2), SF.format(2), eighteen]
    assert {m["id"] for m in emulator.members(list_id)} == {SF.format(1), SF.format(2), eighteen}


def test_more_than_1000_accounts_is_400_on_accounts_and_nothing_added(emulator, api):
    list_id = api.account_list()
    batch = [account(i % 1000, id=f"001{i:012d}") for i in range(1001)]
    response = api.post(f"/accountLists/v2/accountLists/{list_id}/accounts/add", {"accounts": batch})
    assert response.status_code == 400
    assert error_of(response)["status"] == "INVALID_ARGUMENT"
    assert violated_fields(response) == ["accounts"]
    assert emulator.members(list_id) == []
    ok = api.post(f"/accountLists/v2/accountLists/{list_id}/accounts/add", {"accounts": batch[:1000]})
    assert ok.status_code == 200 and ok.json()["addedAccounts"] == 1000


@pytest.mark.parametrize(
    ("accounts", "field"),
    [
        ([{"name": "x", "crmOrgId": "o", "crmType": "SALESFORCE"}], "accounts[0].id"),
        ([account(1), {**account(2), "crmType": "HUBSPOT"}], "accounts[1].crmType"),
        ([{**account(1), "crmOrgId": 7}], "accounts[0].crmOrgId"),
        ([], "accounts"),
        ("not-a-list", "accounts"),
        ([5], "accounts[0]"),
    ],
)
def test_bad_account_bodies_name_the_field(api, accounts, field):
    list_id = api.account_list()
    response = api.post(f"/accountLists/v2/accountLists/{list_id}/accounts/add", {"accounts": accounts})
    assert response.status_code == 400
    assert field in violated_fields(response)


def test_add_to_unknown_list_is_404(api):
    response = api.post("/accountLists/v2/accountLists/nope/accounts/add", {"accounts": [account(1)]})
    assert response.status_code == 404 and error_of(response)["status"] == "NOT_FOUND"


def test_remove_accounts_returns_only_those_removed(emulator, api):
    list_id = api.account_list()
    api.post(f"/accountLists/v2/accountLists/{list_id}/accounts/add", {"accounts": [account(1), account(2)]})
    removed = api.post(
        f"/accountLists/v2/accountLists/{list_id}/accounts/remove",
        {
            "accounts": [
                {"id": SF.format(1), "crmOrgId": "00D000000000001", "crmType": "SALESFORCE"},
                {"id": SF.format(9), "crmOrgId": "00D000000000001", "crmType": "SALESFORCE"},
            ]
        },
    )
    assert removed.status_code == 200
    assert removed.json()["listId"] == list_id
    assert [a["id"] for a in removed.json()["accounts"]] == [SF.format(1)]
    assert [m["id"] for m in emulator.members(list_id)] == [SF.format(2)]
    too_many = [{"id": f"001{i:012d}", "crmOrgId": "o", "crmType": "SALESFORCE"} for i in range(1001)]
    response = api.post(f"/accountLists/v2/accountLists/{list_id}/accounts/remove", {"accounts": too_many})
    assert response.status_code == 400 and violated_fields(response) == ["accounts"]


def test_folders_paginate_with_tokens(api):
    ids = [api.folder(f"f{i}") for i in range(5)]
    seen, token, pages = [], "", 0
    while True:
        params = {"pageSize": 2, **({"pageToken": token} if token else {})}
        body = api.get("/accountLists/v2/folders", params=params).json()
        seen += [f["uuid"] for f in body["folders"]]
        token, pages = body["nextPageToken"], pages + 1
        if not token:
            break
    assert seen == ids and pages == 3


# --- accounts given by id alone: crmOrgId and crmType are optional and filled by the service ---------

ORG_ID = re.compile(r"00D[0-9A-Za-z]{12}")


def filled(emulator, i: int, name: str = "", **overrides):
    """An account as the service stores and echoes it after filling org and type."""
    org = emulator.crm_org_id()
    return {"id": SF.format(i), "name": name, "crmOrgId": org, "crmType": "SALESFORCE", **overrides}


def test_id_only_add_is_accepted_and_filled_with_the_accounts_crm_org(emulator, api):
    list_id = api.account_list()
    org = emulator.crm_org_id()
    assert ORG_ID.fullmatch(org)
    response = api.post(
        f"/accountLists/v2/accountLists/{list_id}/accounts/add",
        {
            "accounts": [
                {"id": SF.format(1)},
                {"id": SF.format(2), "name": "Named"},
                {"id": "003000000000001"},
            ]
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["addedAccounts"] == 2 and body["duplicateAccounts"] == 0
    assert body["successfulAccounts"] == [filled(emulator, 1), filled(emulator, 2, "Named")]
    assert body["accountsNotFound"] == [
        {"id": "003000000000001", "name": "", "crmOrgId": org, "crmType": "SALESFORCE"}
    ]
    assert emulator.members(list_id) == [filled(emulator, 1), filled(emulator, 2, "Named")]


def test_id_only_add_and_explicit_filled_org_name_the_same_membership(emulator, api):
    list_id = api.account_list()
    org = emulator.crm_org_id()
    add = f"/accountLists/v2/accountLists/{list_id}/accounts/add"
    api.post(add, {"accounts": [{"id": SF.format(1)}, {"id": SF.format(2)}]})
    again = api.post(add, {"accounts": [{"id": SF.format(1), "crmOrgId": org, "crmType": "SALESFORCE"}]})
    assert again.json()["addedAccounts"] == 0 and again.json()["duplicateAccounts"] == 1

    removed = api.post(
        f"/accountLists/v2/accountLists/{list_id}/accounts/remove",
        {"accounts": [{"id": SF.format(1), "crmOrgId": org, "crmType": "SALESFORCE"}]},
    )
    assert removed.status_code == 200, removed.text
    assert removed.json()["accounts"] == [filled(emulator, 1)]
    assert emulator.members(list_id) == [filled(emulator, 2)]


def test_id_only_remove_removes_an_id_only_add_and_echoes_filled_values(emulator, api):
    list_id = api.account_list()
    api.post(
        f"/accountLists/v2/accountLists/{list_id}/accounts/add",
        {"accounts": [{"id": SF.format(1), "name": "One"}, {"id": SF.format(2)}]},
    )
    removed = api.post(
        f"/accountLists/v2/accountLists/{list_id}/accounts/remove",
        {"accounts": [{"id": SF.format(1)}, {"id": SF.format(9)}]},
    )
    assert removed.status_code == 200, removed.text
    assert removed.json() == {"listId": list_id, "accounts": [filled(emulator, 1, "One")]}
    assert emulator.members(list_id) == [filled(emulator, 2)]


def test_an_explicit_other_org_is_a_different_membership(emulator, api):
    list_id = api.account_list()
    other = "00D000000000009"
    assert other != emulator.crm_org_id()
    add = f"/accountLists/v2/accountLists/{list_id}/accounts/add"
    assert api.post(add, {"accounts": [{"id": SF.format(1)}]}).json()["addedAccounts"] == 1
    second = api.post(add, {"accounts": [{"id": SF.format(1), "crmOrgId": other}]}).json()
    assert second["addedAccounts"] == 1 and second["duplicateAccounts"] == 0
    assert second["successfulAccounts"] == [filled(emulator, 1, crmOrgId=other)]  # type filled alone

    removed = api.post(
        f"/accountLists/v2/accountLists/{list_id}/accounts/remove", {"accounts": [{"id": SF.format(1)}]}
    ).json()
    assert removed["accounts"] == [filled(emulator, 1)]
    assert emulator.members(list_id) == [filled(emulator, 1, crmOrgId=other)]


@pytest.mark.parametrize("action", ["add", "remove"])
@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"crmOrgId": ""}, "accounts[1].crmOrgId"),
        ({"crmOrgId": None}, "accounts[1].crmOrgId"),
        ({"crmType": "HUBSPOT"}, "accounts[1].crmType"),
        ({"crmType": ""}, "accounts[1].crmType"),
        ({"crmType": None}, "accounts[1].crmType"),
    ],
)
def test_given_org_or_type_must_be_well_formed(emulator, api, action, bad, field):
    list_id = api.account_list()
    api.post(f"/accountLists/v2/accountLists/{list_id}/accounts/add", {"accounts": [{"id": SF.format(2)}]})
    response = api.post(
        f"/accountLists/v2/accountLists/{list_id}/accounts/{action}",
        {"accounts": [{"id": SF.format(1)}, {"id": SF.format(2), **bad}]},
    )
    assert response.status_code == 400
    assert error_of(response)["status"] == "INVALID_ARGUMENT"
    assert violated_fields(response) == [field]  # the id-only account beside it is fine
    assert emulator.members(list_id) == [filled(emulator, 2)]  # nothing added or removed


def test_openapi_requires_only_the_account_id(api):
    schemas = api.get("/openapi.json").json()["components"]["schemas"]
    ref = schemas["AccountRef"]
    assert ref["required"] == ["id"]
    org = ref["properties"]["crmOrgId"]
    assert org["type"] == "string" and org["minLength"] == 1 and "anyOf" not in org
    assert ref["properties"]["crmType"]["enum"] == ["SALESFORCE"]
