"""The audience sync with its model, its exclusion and its state on Snowflake (fakesnow) and BigQuery
(bqemulator), against the emulator: each account on one tier and customers on none after each run, a
move's removal sent before its addition, and a run that finds the programme in step sends nothing.
Each database is written and read with its own client, never through the code under test."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.audiences.audience_support import (
    FIRST,
    FIRST_CUSTOMERS,
    SECOND,
    SECOND_CUSTOMERS,
    assert_one_tier_each,
    expected,
    ids,
    make_lists,
    membership_posts,
    on_service,
    sync,
    write_model,
)
from accounts.sync.sync_support import ORG, account_id, clear_requests
from support.cloud_state import CLOUD_KINDS, CloudState, open_cloud


@pytest.fixture(params=CLOUD_KINDS)
def cloud(request: pytest.FixtureRequest, abm: Any, monkeypatch: pytest.MonkeyPatch) -> CloudState:
    """``abm_warehouse`` on a database of the test's own on the emulator."""
    return open_cloud(request, request.param, monkeypatch)


def test_runs_keep_each_account_on_one_tier_and_send_a_moves_removal_first(
    abm: Any, cloud: CloudState
) -> None:
    lists = make_lists()
    write_model(cloud, FIRST, FIRST_CUSTOMERS)
    first = sync(cloud, lists, "run-1")
    held = on_service(abm, lists)
    assert held == expected(FIRST, FIRST_CUSTOMERS)
    assert_one_tier_each(held, FIRST_CUSTOMERS)
    assert first["totals"]["added"] == sum(len(v) for v in held.values())

    write_model(cloud, SECOND, SECOND_CUSTOMERS)
    clear_requests(abm)
    second = sync(cloud, lists, "run-2")
    held = on_service(abm, lists)
    assert held == expected(SECOND, SECOND_CUSTOMERS)
    assert_one_tier_each(held, SECOND_CUSTOMERS)
    actions = [action for action, _, _ in membership_posts(abm)]
    assert actions == sorted(actions, key=lambda a: a != "remove"), actions
    moves = {(m["from"], m["to"]): m["accounts"] for m in second["moves"]}
    assert moves == {("tier_2", "tier_1"): 1, ("tier_1", "tier_3"): 1}

    clear_requests(abm)
    third = sync(cloud, lists, "run-3")
    assert membership_posts(abm) == []
    assert (third["totals"]["added"], third["totals"]["removed"]) == (0, 0)
    assert on_service(abm, lists) == held


def test_an_id_with_a_tab_after_it_is_the_account_without_it(abm: Any, cloud: CloudState) -> None:
    """The tiering strips an id as the validator does (tabs too), so an account named by tier 1 as
    written and by tier 2 with a tab after it goes to tier 1 only, not to both."""
    lists = make_lists()
    write_model(cloud, {"tier_1": [1], "tier_2": [2], "tier_3": []}, [])
    tabbed = f"'{account_id(1)}' || CHR(9)"
    cloud.query(f"INSERT INTO {cloud.name('model')} VALUES ({tabbed}, 'Account 1', '{ORG}', 'tier_2')")
    sync(cloud, lists, "run-1")
    assert on_service(abm, lists) == {"tier_1": ids([1]), "tier_2": ids([2]), "tier_3": set()}
