"""The admin API: state, members, clock, fire, request log, reset."""

from __future__ import annotations

from datetime import datetime

import pytest
import requests


def _t(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_state_lists_everything_per_account(emulator, api, api_beta):
    list_id = api.account_list("targets")
    api.post(
        f"/accountLists/v2/accountLists/{list_id}/accounts/add",
        {"accounts": [{"id": "001000000000001", "crmOrgId": "o", "crmType": "SALESFORCE"}]},
    )
    api.job()
    fired = emulator.fire("TACTIC_PERFORMANCE", outcome="FAILED")
    api_beta.folder("beta's")
    accounts = emulator.state()["accounts"]
    alpha = next(a for a in accounts.values() if a["apiKeys"] == [api.key])
    beta = next(a for a in accounts.values() if a["apiKeys"] == [api_beta.key])
    assert [(lst["listId"], lst["memberCount"]) for lst in alpha["lists"]] == [(list_id, 1)]
    assert [j["type"] for j in alpha["jobs"]] == ["TACTIC_PERFORMANCE"]
    assert [(e["id"], e["state"]) for e in alpha["executions"]] == [(fired["id"], "FAILED")]
    assert [f["name"] for f in beta["folders"]] == ["beta's"] and beta["lists"] == []


def test_members_of_unknown_key_or_list(emulator, api):
    with pytest.raises(Exception, match="401"):
        emulator.members("whatever", api_key="not-a-key")
    with pytest.raises(Exception, match="404"):
        emulator.members("no-such-list")


def test_clock_advance_moves_now_and_rejects_bad_input(emulator):
    before = _t(emulator.clock()["now"])
    after = _t(emulator.advance(3600)["now"])
    assert (after - before).total_seconds() >= 3600
    for body in ({}, {"seconds": -5}, {"seconds": "soon"}):
        assert (
            requests.post(emulator.base_url + "/_admin/clock/advance", json=body, timeout=30).status_code
            == 400
        )


def test_reset_forgets_state_and_returns_the_clock(emulator, api):
    start = _t(emulator.clock()["start"])
    api.folder()
    emulator.advance(10 * 86_400)
    emulator.reset()
    assert api.get("/accountLists/v2/folders").json()["folders"] == []
    assert (_t(emulator.clock()["now"]) - start).total_seconds() < 60


def test_fire_needs_a_job_and_a_known_outcome(emulator, api):
    with pytest.raises(Exception, match="404"):
        emulator.fire("TACTIC_PERFORMANCE")
    api.job()
    with pytest.raises(Exception, match="outcome"):
        emulator.fire("TACTIC_PERFORMANCE", outcome="MAYBE")
    with pytest.raises(Exception, match="apiKey"):
        emulator.fire("TACTIC_PERFORMANCE", api_key="nobody")
    assert emulator.fire("TACTIC_PERFORMANCE", api_key=emulator.api_keys[0])["state"] == "COMPLETE"


def test_request_log_records_both_origins_with_headers(emulator, api):
    api.job()
    fired = emulator.fire("TACTIC_PERFORMANCE")
    requests.get(fired["downloadUri"], headers={"X-Probe": "1"}, timeout=30)
    seen = emulator.requests_seen()
    api_posts = [r for r in seen if r["origin"] == "api" and r["method"] == "POST"]
    assert api_posts[0]["path"] == "/exports/v1/exportJobs"
    assert api_posts[0]["headers"]["authorization"] == f"Bearer {api.key}"
    [download] = [r for r in seen if r["origin"] == "storage"]
    assert download["headers"]["x-probe"] == "1" and download["status"] == 200
    assert not [r for r in seen if r["path"].startswith("/_admin")]


def test_state_shows_each_accounts_crm_org_stable_across_reset(emulator, api, api_beta):
    accounts = emulator.state()["accounts"]
    alpha = next(a for a in accounts.values() if a["apiKeys"] == [api.key])
    beta = next(a for a in accounts.values() if a["apiKeys"] == [api_beta.key])
    assert list(alpha)[:3] == ["apiKeys", "orgUuid", "crmOrgId"]  # next to orgUuid
    for org in (alpha["crmOrgId"], beta["crmOrgId"]):
        assert len(org) == 15 and org.startswith("00D") and org.isalnum()
    assert alpha["crmOrgId"] != beta["crmOrgId"]  # one CRM org per customer account
    assert emulator.crm_org_id() == alpha["crmOrgId"]
    assert emulator.crm_org_id(api_beta.key) == beta["crmOrgId"]
    assert emulator.account_state(api_beta.key) == beta

    api.folder()  # the account now exists in state rather than being shown from its key alone
    assert emulator.crm_org_id() == alpha["crmOrgId"]
    emulator.reset()
    assert emulator.crm_org_id() == alpha["crmOrgId"]
    with pytest.raises(Exception, match="API key"):
        emulator.crm_org_id("not-a-key")
