"""Reading add/remove answers and pages tolerantly, without a server."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks._paging import Pager
from abm_provider.hooks._pipeline import Call, Pipeline
from abm_provider.hooks.endpoints import executions_call
from abm_provider.hooks.results import AccountsResult, batch_result
from abm_provider.hooks.settings import AbmSettings


def _acc(i: int, org: str | None = "00D1") -> dict[str, str]:
    account = {"id": f"001{i:015d}", "crmType": "SALESFORCE"}
    if org:
        account["crmOrgId"] = org
    return account


def test_add_answer_counts_may_be_strings_or_absent() -> None:
    sent = [_acc(i) for i in range(4)]
    answer = {
        "successfulAccounts": sent[:3],
        "accountsNotFound": sent[3:],
        "addedAccounts": "2",
        "duplicateAccounts": "1",
    }
    result = batch_result("add", 0, sent, answer)
    assert (result.sent, result.applied, result.duplicates, len(result.not_found)) == (4, 2, 1, 1)
    derived = batch_result("add", 1, sent, {"successfulAccounts": sent[:3], "duplicateAccounts": 1})
    assert (derived.applied, derived.duplicates) == (2, 1)


def test_remove_answer_not_removed_are_not_found_matched_by_org_and_id() -> None:
    sent = [_acc(1), _acc(2), _acc(3, org="00D2")]
    removed = [_acc(1), _acc(3, org="00D9")]  # same id 3 but another org: not the one sent
    result = batch_result("remove", 2, sent, {"listId": "l", "accounts": removed})
    assert result.applied == 2
    assert [a["id"] for a in result.not_found] == [_acc(2)["id"], _acc(3)["id"]]
    echo_without_org = batch_result("remove", 0, sent[:1], {"accounts": [{"id": _acc(1)["id"]}]})
    assert echo_without_org.not_found == []


def test_totals_add_up_and_not_found_can_be_dropped() -> None:
    totals = AccountsResult()
    sent = [_acc(i) for i in range(3)]
    batch = batch_result("add", 0, sent, {"successfulAccounts": sent[:1], "accountsNotFound": sent[1:]})
    totals.include(batch, keep_not_found=False)
    totals.include(batch, keep_not_found=True)
    assert (totals.sent, totals.not_found_count, len(totals.not_found), totals.batches) == (6, 4, 2, 2)
    assert totals.applied == 2


def test_added_is_a_deprecated_read_only_name_for_applied() -> None:
    sent = [_acc(i) for i in range(2)]
    removed = batch_result("remove", 0, sent, {"accounts": sent[:1]})
    totals = AccountsResult()
    totals.include(removed, keep_not_found=True)
    for result in (removed, totals):
        with pytest.warns(DeprecationWarning, match=r"\.added is deprecated, use \.applied"):
            assert result.added == result.applied == 1
        # A frozen dataclass with slots raises TypeError here on some Pythons (its __setattr__ calls super()).
        with pytest.raises((AttributeError, TypeError)):
            result.added = 5  # type: ignore[misc]
        assert result.applied == 1
    assert "added" not in dataclasses.asdict(removed) and dataclasses.asdict(totals)["applied"] == 1


def _pipeline(**limits: object) -> Pipeline:
    conn = SimpleNamespace(
        conn_id="c", host="https://api.example.com", port=None, password="k-12345", extra_dejson={}
    )
    return Pipeline(AbmSettings.from_connection(conn, **limits))


def test_pages_and_tokens() -> None:
    call = Call("GET", "/f", {"pageSize": 100})
    items, following = Pager(_pipeline(), call, "folders").read({"nextPageToken": "t"})
    assert items == [] and following is not None
    assert following.path == "/f" and following.query == {"pageSize": 100, "pageToken": "t"}
    last = Pager(_pipeline(), call, "folders").read({"folders": [{"a": 1}], "nextPageToken": ""})
    assert last == ([{"a": 1}], None)
    with pytest.raises(AbmApiError, match="not an array"):
        Pager(_pipeline(), call, "folders").read({"folders": {"a": 1}})
    pager = Pager(_pipeline(), call, "folders")
    pager.read({"nextPageToken": "a"})
    pager.read({"nextPageToken": "b"})
    with pytest.raises(AbmApiError, match="twice"):
        pager.read({"nextPageToken": "a"})


def test_executions_query() -> None:
    call = executions_call("TACTIC_PERFORMANCE", state="COMPLETE", page_size=10)
    assert (call.method, call.path) == ("GET", "/exports/v1/exportJobs/TACTIC_PERFORMANCE/executions")
    assert call.query == {"pageSize": 10, "orderBy": "updateTime desc", "filter": "status=COMPLETE"}
    with pytest.raises(ValueError, match="page_size"):
        executions_call("TACTIC_PERFORMANCE", page_size=0)
    with pytest.raises(ValueError, match="state must be one execution state"):
        executions_call("TACTIC_PERFORMANCE", state="COMPLETE OR 1")
