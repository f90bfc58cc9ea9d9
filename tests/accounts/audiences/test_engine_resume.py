"""An audience sync's run that died, was stopped or previewed, then retried or followed by another: the
retry completes the plan and reports the whole run, a later run completes an earlier plan first, the
request log replayed never shows an account on two lists, and a programme's retention keeps to its
own moves; on DuckDB, PostgreSQL and MariaDB against the emulator."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest

from abm_provider.accounts.audiences import engine
from abm_provider.compat import AirflowFailException
from abm_provider.exceptions import SyncGuardTripped
from abm_provider.hooks.abm import AbmHook
from accounts.audiences.audience_support import (
    dying_at_the_first_addition,
    ids,
    make_lists,
    on_service,
    sync,
    write_model,
)
from accounts.audiences.test_engine import (
    FIRST,
    FIRST_CUSTOMERS,
    SECOND,
    SECOND_CUSTOMERS,
    assert_members_counted,
    assert_one_tier_each,
    expected,
)
from accounts.sync.sync_support import account_id, clear_requests
from support.warehouses import Warehouse

#: A time the run log and the moves of a run are old at.
LONG_AGO = datetime(2020, 1, 1)


@contextmanager
def dying_at(monkeypatch: pytest.MonkeyPatch, action: str, list_id: str) -> Iterator[None]:
    """The run dies (``SystemExit``) at its first ``action`` request on ``list_id``."""
    send = AbmHook.change_membership

    def dies(self: AbmHook, what: str, target: str, *args: Any, **kwargs: Any) -> Any:
        if what == action and target == list_id:
            raise SystemExit(f"the worker died at the first {action} on {list_id}")
        return send(self, what, target, *args, **kwargs)

    monkeypatch.setattr(AbmHook, "change_membership", dies)
    try:
        yield
    finally:
        monkeypatch.setattr(AbmHook, "change_membership", send)


def accepted_posts(abm: Any) -> list[tuple[str, str, list[str]]]:
    found = []
    for seen in abm.requests_seen():
        path = str(seen.get("path", "")).split("?", 1)[0]
        if seen.get("method") != "POST" or not 200 <= int(seen.get("status") or 0) < 300:
            continue
        for action in ("add", "remove"):
            if path.endswith(f"/accounts/{action}"):
                list_id = path.split("/accountLists/")[-1].split("/", 1)[0]
                found.append(
                    (action, list_id, [a["id"] for a in (seen.get("body") or {}).get("accounts", [])])
                )
    return found


def assert_never_on_two(abm: Any, lists: dict[str, str], start: dict[str, set[str]]) -> None:
    """Replay the accepted requests since ``start`` (each tier's members then): no account on two."""
    tier_of = {list_id: tier for tier, list_id in lists.items()}
    held = {tier: set(members) for tier, members in start.items()}
    for action, list_id, accounts in accepted_posts(abm):
        tier = tier_of[list_id]
        if action == "add":
            held[tier] |= set(accounts)
        else:
            held[tier] -= set(accounts)
        seen: dict[str, str] = {}
        for t, members in held.items():
            for m in members:
                assert m not in seen, f"{m} on {seen[m]} and {t} after {action} on {tier}"
                seen[m] = t


def refusing(abm: Any, list_id: str, action: str, number: int) -> None:
    """The service refuses, with a ``400`` for its content, every ``action`` on ``list_id`` that holds
    account ``number``, from now on."""
    abm.inject_fault(
        kind="status",
        status=400,
        method="POST",
        path=rf".*{list_id}/accounts/{action}",
        body_contains=account_id(number),
        count=None,
    )


def started(abm: Any, warehouse: Warehouse) -> tuple[dict[str, str], dict[str, set[str]]]:
    lists = make_lists()
    write_model(warehouse, FIRST, FIRST_CUSTOMERS)
    sync(warehouse, lists, "run-1")
    write_model(warehouse, SECOND, SECOND_CUSTOMERS)
    clear_requests(abm)
    return lists, on_service(abm, lists)


def assert_whole_second_run(summary: dict[str, Any]) -> None:
    assert (summary["totals"]["removed"], summary["totals"]["added"]) == (4, 2)
    assert {(m["from"], m["to"], m["accounts"]) for m in summary["moves"]} == {
        ("tier_2", "tier_1", 1),
        ("tier_1", "tier_3", 1),
    }


@pytest.mark.parametrize(("action", "tier"), [("remove", "tier_2"), ("add", "tier_3")])
def test_a_retry_after_a_death_mid_removals_or_mid_additions_resumes_whole(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch, action: str, tier: str
) -> None:
    lists, start = started(abm, warehouse)
    with dying_at(monkeypatch, action, lists[tier]), pytest.raises(SystemExit):
        sync(warehouse, lists, "run-2")
    retried = sync(warehouse, lists, "run-2")
    assert on_service(abm, lists) == expected(SECOND, SECOND_CUSTOMERS)
    assert_whole_second_run(retried)
    assert_never_on_two(abm, lists, start)
    # Nothing was sent twice.
    sent = [(a, lst, acc) for a, lst, accounts in accepted_posts(abm) for acc in accounts]
    assert len(sent) == len(set(sent)) == 6


def test_a_new_run_after_a_death_mid_removals_with_a_changed_source_never_puts_an_account_on_two(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    lists, start = started(abm, warehouse)
    with dying_at(monkeypatch, "remove", lists["tier_2"]), pytest.raises(SystemExit):
        sync(warehouse, lists, "run-2")  # 2 left tier 1 (for tier 3); 7 is still on tier 2
    # Meanwhile 2 goes back to tier 1 and 7 back to tier 2 only, and 9 is promoted to tier 1.
    third = {**SECOND, "tier_1": [1, 2, 3, 4, 5, 9], "tier_2": [3, 6, 7, *range(8, 16)]}
    write_model(warehouse, third, SECOND_CUSTOMERS)
    sync(warehouse, lists, "run-3", max_removals=None)
    assert_never_on_two(abm, lists, start)
    assert on_service(abm, lists) == expected(third, SECOND_CUSTOMERS)
    assert account_id(9) in on_service(abm, lists)["tier_1"]


def test_a_blocked_run_retried_under_its_id_with_the_guard_relaxed_plans_afresh_and_sends(
    abm: Any, warehouse: Warehouse
) -> None:
    lists = make_lists()
    write_model(warehouse, {"tier_1": [1, 2], "tier_2": [3, 4]}, [])
    sync(warehouse, lists, "run-1")
    write_model(warehouse, {"tier_1": [1, 2, 3, 4], "tier_2": [3, 4]}, [])
    with pytest.raises(SyncGuardTripped):
        sync(warehouse, lists, "run-2")
    retried = sync(warehouse, lists, "run-2", max_removals=None)
    assert on_service(abm, lists) == {"tier_1": ids([1, 2, 3, 4]), "tier_2": set(), "tier_3": set()}
    assert {(m["from"], m["to"], m["accounts"]) for m in retried["moves"]} == {("tier_2", "tier_1", 2)}
    assert (retried["totals"]["added"], retried["totals"]["removed"]) == (2, 2)


def test_a_dry_run_then_a_real_run_under_the_same_id_plans_again_and_reports_the_real_run(
    abm: Any, warehouse: Warehouse
) -> None:
    lists, start = started(abm, warehouse)
    preview = sync(warehouse, lists, "run-2", dry_run=True)
    assert preview["dry_run"] is True and preview["totals"]["to_remove"] == 4
    real = sync(warehouse, lists, "run-2")
    assert real["dry_run"] is False
    assert on_service(abm, lists) == expected(SECOND, SECOND_CUSTOMERS)
    assert_whole_second_run(real)
    assert_never_on_two(abm, lists, start)


def test_a_dry_run_under_the_id_of_an_unfinished_plan_keeps_that_plan_for_the_real_retry(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    lists = make_lists()
    write_model(warehouse, FIRST, FIRST_CUSTOMERS)
    sync(warehouse, lists, "run-1")
    write_model(warehouse, SECOND, SECOND_CUSTOMERS)
    # The real run dies once its four removals (7 and 2 move, 8 excluded, 25 left) are sent and recorded.
    with dying_at_the_first_addition(monkeypatch), pytest.raises(SystemExit):
        sync(warehouse, lists, "run-2")

    with pytest.raises(AirflowFailException, match="left its plan unfinished; a dry run under the same"):
        sync(warehouse, lists, "run-2", dry_run=True)  # the preview task, cleared with it, runs first
    statuses = warehouse.query(
        f"SELECT status FROM {warehouse.name('abm_sync_runs')} WHERE run_id = %s AND list_id = %s",
        ["run-2", lists["tier_1"]],
    )
    assert statuses == [("sending",)], "the dry run replaced the unfinished plan of run-2"

    rerun = sync(warehouse, lists, "run-2")
    assert on_service(abm, lists) == expected(SECOND, SECOND_CUSTOMERS)
    # The retry's summary is the whole run: the removals of its first try and the moves it made.
    assert rerun["totals"]["removed"] == 4
    assert {(m["from"], m["to"]) for m in rerun["moves"]} == {("tier_2", "tier_1"), ("tier_1", "tier_3")}


def test_an_ordinary_run_completes_a_full_resync_left_unfinished(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    lists = make_lists()
    write_model(warehouse, FIRST, FIRST_CUSTOMERS)
    sync(warehouse, lists, "run-1")
    # A manual full resync (the example DAG's full_resync param) dies before its first addition.
    with dying_at_the_first_addition(monkeypatch), pytest.raises(SystemExit):
        sync(warehouse, lists, "resync", full_resync=True)
    # The next scheduled run completes it, then plans its own run.
    after = sync(warehouse, lists, "run-2")
    held = on_service(abm, lists)
    assert held == expected(FIRST, FIRST_CUSTOMERS)
    twice = warehouse.query(
        f"SELECT list_id, account_id, COUNT(*) FROM {warehouse.name('abm_sync_members')} "
        "GROUP BY list_id, account_id, crm_org_id HAVING COUNT(*) > 1"
    )
    assert twice == [], "members recorded twice"
    assert_members_counted(after, held)


def test_a_programme_s_retention_leaves_the_moves_of_a_programme_that_keeps_them_all(
    abm: Any, warehouse: Warehouse
) -> None:
    kept = make_lists("Kept")  # this programme keeps its log and moves for good
    write_model(warehouse, FIRST, FIRST_CUSTOMERS)
    sync(warehouse, kept, "kept-1", log_retention_days=None)
    write_model(warehouse, SECOND, SECOND_CUSTOMERS)
    second = sync(warehouse, kept, "kept-2", log_retention_days=None)
    assert second["moves"]  # 7 and 2 moved, 8 excluded
    moves, log = warehouse.name("abm_sync_moves"), warehouse.name("abm_sync_log")
    # Time passes: its moves and its run log are old now.
    warehouse.execute(f"UPDATE {moves} SET logged_at = %s WHERE run_id = %s", [LONG_AGO, "kept-2"])
    warehouse.execute(f"UPDATE {log} SET logged_at = %s WHERE run_id = %s", [LONG_AGO, "kept-2"])
    count = "SELECT COUNT(*) FROM {} WHERE run_id = %s"
    before = (
        warehouse.query(count.format(moves), ["kept-2"]),
        warehouse.query(count.format(log), ["kept-2"]),
    )

    # Another programme on the same state tables, with its own (short) retention, runs.
    other = make_lists("Other")
    sync(warehouse, other, "other-1", log_retention_days=1)

    after = [warehouse.query(count.format(table), ["kept-2"]) for table in (moves, log)]
    assert after[1] == before[1]  # the kept programme's run log is untouched
    assert after[0] == before[0], "the other programme's retention deleted this programme's moves"


def test_a_move_whose_removal_is_refused_waits_on_the_old_tier_and_the_next_run_makes_it(
    abm: Any, warehouse: Warehouse
) -> None:
    lists, start = started(abm, warehouse)  # in the second model 7 is promoted from tier 2 to tier 1
    refusing(abm, lists["tier_2"], "remove", 7)
    summary = sync(warehouse, lists, "run-2")

    held = on_service(abm, lists)
    assert account_id(7) in held["tier_2"], "the refusal kept 7 on tier 2"
    assert account_id(7) not in held["tier_1"], "7 joined tier 1 while still on tier 2"
    assert_one_tier_each(held, SECOND_CUSTOMERS)
    assert_never_on_two(abm, lists, start)
    added = [acc for action, _, accounts in accepted_posts(abm) if action == "add" for acc in accounts]
    assert account_id(7) not in added, "7's addition was sent"
    # The run says so: the refusal on tier 2, the move that waits, and no move made for 7.
    entry = {e["audience"]: e for e in summary["lists"]}
    assert (entry["tier_2"]["rejected"], entry["tier_1"]["waiting"], summary["totals"]["waiting"]) == (
        1,
        1,
        1,
    )
    assert entry["tier_1"]["added"] == 0 and entry["tier_2"]["moved_out"] == 0
    assert {(m["from"], m["to"]) for m in summary["moves"]} == {("tier_1", "tier_3")}
    log = warehouse.query(
        f"SELECT action, reason FROM {warehouse.name('abm_sync_log')} "
        "WHERE run_id = %s AND list_id = %s AND account_id = %s AND outcome = 'waiting'",
        ["run-2", lists["tier_1"], account_id(7)],
    )
    assert len(log) == 1 and log[0][0] == "add" and lists["tier_2"] in str(log[0][1])
    members = warehouse.query(
        f"SELECT list_id FROM {warehouse.name('abm_sync_members')} WHERE account_id = %s",
        [account_id(7)],
    )
    assert members == [(lists["tier_2"],)], "the record must say where 7 is: on tier 2 only"

    # The service takes the removal now: the next run makes the move.
    abm.clear_faults()
    third = sync(warehouse, lists, "run-3")
    assert on_service(abm, lists) == expected(SECOND, SECOND_CUSTOMERS)
    assert_never_on_two(abm, lists, start)
    assert [(m["from"], m["to"], m["accounts"]) for m in third["moves"]] == [("tier_2", "tier_1", 1)]
    assert third["totals"]["waiting"] == 0


def test_a_batch_with_a_waiting_addition_and_a_refused_one_records_each_against_its_own_account(
    abm: Any, warehouse: Warehouse
) -> None:
    """The waiting account is left out of the request; the service's refusal of another account of
    the same batch is recorded against that account, not against its neighbour in the batch."""
    lists = make_lists()
    write_model(warehouse, FIRST, FIRST_CUSTOMERS)
    sync(warehouse, lists, "run-1")
    # 6 and 7 are promoted from tier 2, and 40 is new on tier 1: one batch of three additions.
    write_model(warehouse, {**FIRST, "tier_1": [1, 2, 3, 4, 5, 6, 7, 40]}, FIRST_CUSTOMERS)
    refusing(abm, lists["tier_2"], "remove", 7)
    refusing(abm, lists["tier_1"], "add", 40)
    summary = sync(warehouse, lists, "run-2")
    held = on_service(abm, lists)
    assert account_id(6) in held["tier_1"] and account_id(7) in held["tier_2"]
    assert not {account_id(7), account_id(40)} & held["tier_1"]
    tier_1 = next(e for e in summary["lists"] if e["audience"] == "tier_1")
    assert (tier_1["added"], tier_1["rejected"], tier_1["waiting"]) == (1, 1, 1)
    outcomes = warehouse.query(
        f"SELECT account_id, outcome FROM {warehouse.name('abm_sync_log')} "
        "WHERE run_id = %s AND list_id = %s AND action = 'add' ORDER BY account_id",
        ["run-2", lists["tier_1"]],
    )
    assert outcomes == [(account_id(6), "added"), (account_id(7), "waiting"), (account_id(40), "invalid")]


def test_a_retry_after_a_death_mid_additions_keeps_the_refused_move_waiting(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    lists, start = started(abm, warehouse)
    refusing(abm, lists["tier_2"], "remove", 7)
    with dying_at(monkeypatch, "add", lists["tier_3"]), pytest.raises(SystemExit):
        sync(warehouse, lists, "run-2")  # tier 1's additions are sent (7 waits), then the worker dies
    retried = sync(warehouse, lists, "run-2")
    held = on_service(abm, lists)
    assert account_id(7) in held["tier_2"] and account_id(7) not in held["tier_1"]
    assert_never_on_two(abm, lists, start)
    assert retried["totals"]["waiting"] == 1


def test_a_plan_left_waiting_keeps_its_moves_until_completed_however_short_the_retention(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run 2 marks 7's move onto tier 1 waiting (its removal from tier 2 refused) and dies sending
    tier 1's other addition. Run 3, an hour later by its clock, keeps a minute of run log and
    completes run 2's plan first: the trim comes after, so the waiting move is still known and 7 is
    not added to tier 1."""
    lists = make_lists("Trimmed")
    write_model(warehouse, {"tier_1": [1], "tier_2": [7, 8], "tier_3": [9]}, [])
    sync(warehouse, lists, "run-1")
    start = on_service(abm, lists)
    clear_requests(abm)
    write_model(warehouse, {"tier_1": [1, 7, 20], "tier_2": [8], "tier_3": [9]}, [])
    refusing(abm, lists["tier_2"], "remove", 7)
    with dying_at(monkeypatch, "add", lists["tier_1"]), pytest.raises(SystemExit):
        sync(warehouse, lists, "run-2", max_removals=None)
    later = engine.utc_now() + timedelta(hours=1)
    monkeypatch.setattr(engine, "utc_now", lambda: later)
    sync(warehouse, lists, "run-3", max_removals=None, log_retention_days=1 / 1440)
    held = on_service(abm, lists)
    assert account_id(7) in held["tier_2"] and account_id(7) not in held["tier_1"]
    assert account_id(20) in held["tier_1"]
    assert_never_on_two(abm, lists, start)


def test_a_move_whose_addition_is_refused_is_not_counted_as_made(abm: Any, warehouse: Warehouse) -> None:
    """7 moves from tier 2 to tier 1; its removal is accepted and its addition refused (a ``400`` for
    that account): it is on neither list, so the run reports no such move, the moves table says
    ``refused``, and tier 1 counts it as rejected."""
    lists, _ = started(abm, warehouse)
    refusing(abm, lists["tier_1"], "add", 7)
    summary = sync(warehouse, lists, "run-2", max_rejected=None)
    held = on_service(abm, lists)
    assert account_id(7) not in held["tier_1"] and account_id(7) not in held["tier_2"]
    assert {(m["from"], m["to"], m["accounts"]) for m in summary["moves"]} == {("tier_1", "tier_3", 1)}
    entries = {e["audience"]: e for e in summary["lists"]}
    assert (entries["tier_1"]["moved_in"], entries["tier_2"]["moved_out"]) == (0, 0)
    assert entries["tier_1"]["rejected"] == 1
    assert summary["totals"]["moved"] == 1
    moves = warehouse.name("abm_sync_moves")
    kinds = warehouse.query(
        f"SELECT kind FROM {moves} WHERE run_id = %s AND account_id = %s", ["run-2", account_id(7)]
    )
    assert kinds == [("refused",)]
