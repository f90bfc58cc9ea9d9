"""The path every other engineer relies on first: start, create, fire, list, download, admin."""

from __future__ import annotations

import csv
import io

import requests


def test_lists_and_exports_end_to_end(emulator, api):
    list_id = api.account_list()
    added = api.post(
        f"/accountLists/v2/accountLists/{list_id}/accounts/add",
        {
            "accounts": [
                {"id": "001000000000001AAA", "name": "Acme", "crmOrgId": "00D1", "crmType": "SALESFORCE"}
            ]
        },
    )
    assert added.status_code == 200, added.text
    assert emulator.members(list_id) == [
        {"id": "001000000000001AAA", "name": "Acme", "crmOrgId": "00D1", "crmType": "SALESFORCE"}
    ]

    api.job()
    fired = emulator.fire("TACTIC_PERFORMANCE")
    assert fired["state"] == "COMPLETE"
    executions = api.all_executions(filter="status=COMPLETE", orderBy="updateTime desc")
    assert [e["id"] for e in executions] == [fired["id"]]

    download = requests.get(executions[0]["downloadUri"], timeout=30)
    assert download.status_code == 200
    header = next(csv.reader(io.StringIO(download.text)))
    assert header == [
        "date",
        "campaign_id",
        "campaign_name",
        "tactic_id",
        "tactic_name",
        "impressions",
        "clicks",
        "spend",
    ]

    state = emulator.admin("GET", "/_admin/state")
    mine = next(a for a in state["accounts"].values() if emulator.api_key in a["apiKeys"])
    assert mine["lists"][0]["memberCount"] == 1
    assert [j["type"] for j in mine["jobs"]] == ["TACTIC_PERFORMANCE"]
