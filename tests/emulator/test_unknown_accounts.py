"""Accounts the service does not know, chosen by a test: ``/_admin/unknownAccounts`` and the
``abm_emulator`` fixture's ``make_accounts_unknown`` / ``make_accounts_known``."""

from __future__ import annotations

import pytest
import requests
from emulator_api import Api, violated_fields

from abm_emulator.testing import EmulatorError, start_emulator

ACME = "001000000000001"
GLOBEX = "001000000000002"


def _add(api: Api, list_id: str, *ids: str) -> dict:
    response = api.post(
        f"/accountLists/v2/accountLists/{list_id}/accounts/add", {"accounts": [{"id": i} for i in ids]}
    )
    assert response.status_code == 200, response.text
    return response.json()


def _remove(api: Api, list_id: str, *ids: str) -> dict:
    response = api.post(
        f"/accountLists/v2/accountLists/{list_id}/accounts/remove", {"accounts": [{"id": i} for i in ids]}
    )
    assert response.status_code == 200, response.text
    return response.json()


def _admin(emulator, method: str, body: object = None) -> requests.Response:
    return requests.request(method, emulator.base_url + "/_admin/unknownAccounts", json=body, timeout=30)


def test_the_admin_call_makes_ids_unknown_to_add_and_remove_then_known_again(emulator, api):
    list_id = api.account_list()
    _add(api, list_id, ACME)

    made = _admin(emulator, "POST", {"ids": [ACME, GLOBEX]})
    assert made.status_code == 200 and made.json() == {"ids": [ACME, GLOBEX]}
    assert _admin(emulator, "GET").json() == {"ids": [ACME, GLOBEX]}

    added = _add(api, list_id, GLOBEX)
    assert [a["id"] for a in added["accountsNotFound"]] == [GLOBEX]
    assert added["successfulAccounts"] == [] and added["addedAccounts"] == 0
    # Remove answers in its documented shape, which has no accountsNotFound: the unknown id is not
    # removed and not in the answer.
    removed = _remove(api, list_id, ACME)
    assert set(removed) == {"listId", "accounts"} and removed["accounts"] == []
    assert [m["id"] for m in emulator.members(list_id)] == [ACME]

    assert _admin(emulator, "DELETE", {"ids": [GLOBEX]}).json() == {"ids": [ACME]}
    assert _add(api, list_id, GLOBEX)["addedAccounts"] == 1
    assert _admin(emulator, "DELETE").json() == {"ids": []}  # no body: every id known again
    assert [a["id"] for a in _remove(api, list_id, ACME)["accounts"]] == [ACME]


def test_the_fixture_helpers_do_the_same_and_reset_forgets_them(abm_emulator):
    api = Api(abm_emulator.base_url, abm_emulator.api_key)
    list_id = api.account_list()
    _add(api, list_id, ACME)

    assert abm_emulator.make_accounts_unknown(ACME) == [ACME]  # one id as a string
    assert abm_emulator.make_accounts_unknown([GLOBEX]) == [ACME, GLOBEX]
    assert abm_emulator.unknown_accounts() == [ACME, GLOBEX]
    assert [a["id"] for a in _add(api, list_id, ACME, GLOBEX)["accountsNotFound"]] == [ACME, GLOBEX]
    assert _remove(api, list_id, ACME)["accounts"] == []

    assert abm_emulator.make_accounts_known([ACME]) == [GLOBEX]
    assert [a["id"] for a in _remove(api, list_id, ACME)["accounts"]] == [ACME]
    assert [a["id"] for a in _add(api, list_id, ACME, GLOBEX)["accountsNotFound"]] == [GLOBEX]
    assert abm_emulator.make_accounts_known() == []
    assert _add(api, list_id, GLOBEX)["accountsNotFound"] == []

    abm_emulator.make_accounts_unknown([ACME])
    abm_emulator.reset()
    assert abm_emulator.unknown_accounts() == []


def test_an_unknown_id_is_unknown_in_every_customer_account(emulator, api, api_beta):
    emulator.make_accounts_unknown([ACME])
    for client in (api, api_beta):
        assert [a["id"] for a in _add(client, client.account_list(), ACME)["accountsNotFound"]] == [ACME]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "ids"),
        ({"ids": []}, "ids"),
        ({"ids": ACME}, "ids"),
        ({"ids": [""]}, "ids"),
        ({"id": [ACME]}, "id"),
    ],
)
def test_a_bad_body_names_the_field(emulator, body, field):
    methods = ["POST"] if body == {} else ["POST", "DELETE"]  # DELETE with nothing: every id known
    for method in methods:
        response = _admin(emulator, method, body)
        assert response.status_code == 400, (method, response.text)
        assert violated_fields(response) == [field]
    with pytest.raises(EmulatorError, match="400"):
        emulator.make_accounts_unknown([])


def test_unknown_ids_belong_to_their_emulator_and_survive_a_restart_with_its_state(emulator, tmp_path):
    emulator.make_accounts_unknown([ACME])
    state_file = tmp_path / "state.json"
    with start_emulator(api_keys=["k"], state_file=state_file) as other:
        assert other.unknown_accounts() == []
        other.make_accounts_unknown([GLOBEX])
        assert other.stop() == 0
    with start_emulator(api_keys=["k"], state_file=state_file) as restarted:
        assert restarted.unknown_accounts() == [GLOBEX]
    assert emulator.unknown_accounts() == [ACME]
