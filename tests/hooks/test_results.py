"""``abm_provider.hooks.results``: add and remove answers read tolerantly into one result, with no server."""

from __future__ import annotations

import dataclasses

from abm_provider.hooks.results import AccountsResult, batch_result


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


def test_a_result_names_its_changes_applied_in_xcom_too() -> None:
    """``applied`` counts removals for a remove; the old ``added`` name is gone, not aliased."""
    sent = [_acc(i) for i in range(2)]
    removed = batch_result("remove", 0, sent, {"accounts": sent[:1]})
    totals = AccountsResult()
    totals.include(removed, keep_not_found=True)
    for result in (removed, totals):
        assert dataclasses.asdict(result)["applied"] == 1
        assert not hasattr(result, "added")
