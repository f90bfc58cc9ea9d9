"""The audience sync against the emulator, on DuckDB, PostgreSQL and MariaDB: what the service holds
after each run (its admin state) and the order its requests arrived in (its request log)."""

from __future__ import annotations

from typing import Any

import pytest

from abm_provider.accounts.sync.database import StateDatabase
from abm_provider.accounts.sync.state import StateTables
from abm_provider.exceptions import SyncAlreadyRunning, SyncGuardTripped
from abm_provider.warehouse.connections import sql_hook
from accounts.audiences.audience_support import (
    FIRST,
    FIRST_CUSTOMERS,
    SECOND,
    SECOND_CUSTOMERS,
    TIERS,
    assert_one_tier_each,
    dying_at_the_first_addition,
    expected,
    ids,
    make_lists,
    membership_posts,
    on_service,
    sync,
    write_model,
)
from accounts.sync.sync_support import account_id, clear_requests, context
from accounts.sync.sync_support import operator as list_sync_operator
from support.warehouses import Warehouse


def assert_members_counted(summary: dict[str, Any], held: dict[str, set[str]]) -> None:
    """Each list's ``state_count`` is what the service holds on it, and the totals add them up."""
    assert {e["audience"]: e["state_count"] for e in summary["lists"]} == {t: len(m) for t, m in held.items()}
    assert summary["totals"]["state_count"] == sum(len(m) for m in held.values())


def synced_then_changed(warehouse: Warehouse) -> dict[str, str]:
    """New lists synced from the :data:`FIRST` model, which then changes to the :data:`SECOND`."""
    lists = make_lists()
    write_model(warehouse, FIRST, FIRST_CUSTOMERS)
    sync(warehouse, lists, "run-1")
    write_model(warehouse, SECOND, SECOND_CUSTOMERS)
    return lists


def test_runs_keep_each_account_on_one_tier_and_customers_on_none(abm: Any, warehouse: Warehouse) -> None:
    lists = make_lists()
    write_model(warehouse, FIRST, FIRST_CUSTOMERS)
    first = sync(warehouse, lists, "run-1")
    held = on_service(abm, lists)
    assert held == expected(FIRST, FIRST_CUSTOMERS)
    assert_one_tier_each(held, FIRST_CUSTOMERS)
    assert first["totals"]["added"] == sum(len(v) for v in held.values())
    assert [e["audience"] for e in first["lists"]] == list(TIERS)
    kept_off = {e["audience"]: e["excluded"] for e in first["lists"]}
    assert kept_off == {"tier_1": 0, "tier_2": 0, "tier_3": 2}
    assert_members_counted(first, held)

    write_model(warehouse, SECOND, SECOND_CUSTOMERS)
    clear_requests(abm)
    second = sync(warehouse, lists, "run-2")
    held = on_service(abm, lists)
    assert held == expected(SECOND, SECOND_CUSTOMERS)
    assert_one_tier_each(held, SECOND_CUSTOMERS)
    moves = {(m["from"], m["to"]): m["accounts"] for m in second["moves"]}
    assert moves == {("tier_2", "tier_1"): 1, ("tier_1", "tier_3"): 1}
    entries = {e["audience"]: e for e in second["lists"]}
    assert (entries["tier_1"]["moved_in"], entries["tier_1"]["moved_out"]) == (1, 1)
    assert entries["tier_2"]["excluded"] == 1  # 8 became a customer: removed from tier 2
    assert entries["tier_3"]["removed"] == 1  # 25 left the model
    assert_members_counted(second, held)
    # Every removal arrived before the first addition: 7 left tier 2 before it joined tier 1.
    posts = membership_posts(abm)
    actions = [action for action, _, _ in posts]
    assert actions == sorted(actions, key=lambda a: a != "remove")
    removed_7 = next(i for i, p in enumerate(posts) if p[0] == "remove" and account_id(7) in p[2])
    added_7 = next(i for i, p in enumerate(posts) if p[0] == "add" and account_id(7) in p[2])
    assert (posts[removed_7][1], posts[added_7][1]) == (lists["tier_2"], lists["tier_1"])
    assert removed_7 < added_7

    # The same lists as three list syncs over disjoint queries give.
    separate = make_lists("Separate")
    customers = warehouse.name("customers")
    for tier, list_id in separate.items():
        higher = [t for t in TIERS if t < tier]
        outranked = "".join(
            f" AND account_id NOT IN (SELECT account_id FROM {warehouse.name('model')} WHERE tier = '{t}')"
            for t in higher
        )
        query = (
            f"SELECT account_id, account_name, crm_org_id FROM {warehouse.name('model')} WHERE tier = "
            f"'{tier}' AND account_id NOT IN (SELECT account_id FROM {customers}){outranked}"
        )
        list_sync_operator(warehouse, list_id, sql=query).execute(context("separate"))
    assert on_service(abm, separate) == held


def test_a_run_counts_the_programmes_members_once_to_plan_and_once_to_report(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each count reads the members table; a programme's lists are counted together, not one by one."""
    lists = synced_then_changed(warehouse)
    counts: list[str] = []
    execute = StateDatabase.execute

    def spy(self: StateDatabase, statement: Any, params: Any = ()) -> int:
        text = statement.bound(self.style)[0] if hasattr(statement, "bound") else str(statement)
        if "COUNT(*)" in text and "members" in text:
            counts.append(text)
        return execute(self, statement, params)

    monkeypatch.setattr(StateDatabase, "execute", spy)
    second = sync(warehouse, lists, "run-2")
    assert len(counts) == 2, counts
    assert_members_counted(second, on_service(abm, lists))


def test_a_programme_of_large_plans_refreshes_the_plan_tables_statistics_once(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every list's plan is in the one plan table: its statistics are refreshed once the plans are
    committed, not once per list (each is a pass over the whole table)."""
    monkeypatch.setattr("abm_provider.accounts.sync.plan.RECORD_ACCOUNTS", 1)  # every plan is "large"
    lists = make_lists()
    write_model(warehouse, FIRST, FIRST_CUSTOMERS)
    analyzed: list[tuple[str, ...]] = []
    analyze = StateDatabase.analyze

    def spy(self: StateDatabase, *tables: str) -> None:
        analyzed.append(tables)
        analyze(self, *tables)

    monkeypatch.setattr(StateDatabase, "analyze", spy)
    sync(warehouse, lists, "run-1")
    plan = StateTables.named().plan.name  # the work tables' names never end so
    assert len([t for t in analyzed if any(name.strip('"`').endswith(plan) for name in t)]) == 1, analyzed
    assert on_service(abm, lists) == expected(FIRST, FIRST_CUSTOMERS)


def test_a_run_stopped_between_a_removal_and_its_addition_converges_on_rerun(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    lists = synced_then_changed(warehouse)
    with dying_at_the_first_addition(monkeypatch), pytest.raises(SystemExit):
        sync(warehouse, lists, "run-2")
    held = on_service(abm, lists)
    assert account_id(7) not in held["tier_1"] | held["tier_2"]  # off both, never on two
    assert_one_tier_each(held, SECOND_CUSTOMERS)

    clear_requests(abm)
    rerun = sync(warehouse, lists, "run-2")
    assert on_service(abm, lists) == expected(SECOND, SECOND_CUSTOMERS)
    assert all(action == "add" for action, _, _ in membership_posts(abm))  # the removals were recorded
    assert {(m["from"], m["to"]) for m in rerun["moves"]} == {("tier_2", "tier_1"), ("tier_1", "tier_3")}


def test_an_emptied_tier_trips_the_guard_with_nothing_sent_on_any_list(
    abm: Any, warehouse: Warehouse
) -> None:
    lists = make_lists()
    write_model(warehouse, FIRST, FIRST_CUSTOMERS)
    sync(warehouse, lists, "run-1")
    before = on_service(abm, lists)
    broken = {**SECOND, "tier_2": []}  # an upstream fault empties tier 2; tier 1 and 3 still change
    write_model(warehouse, broken, SECOND_CUSTOMERS)
    clear_requests(abm)
    with pytest.raises(SyncGuardTripped, match=r"audience 'tier_2'.*nothing was sent") as tripped:
        sync(warehouse, lists, "run-2", max_removals=None)
    assert tripped.value.guard == "allow_empty_source"
    assert membership_posts(abm) == []
    assert on_service(abm, lists) == before


def test_a_tier_promoted_whole_is_a_re_tiering_that_max_removals_none_approves(
    abm: Any, warehouse: Warehouse
) -> None:
    """Every tier 2 account now qualifies for tier 1 too, its tier 2 rows still in the model: tier 2 is
    not emptied by a fault, so allow_empty_source does not stop it, and max_removals=None lets the
    promotion through (docs/audiences.md, "How the guards count")."""
    lists = make_lists()
    write_model(warehouse, {"tier_1": [1, 2], "tier_2": [3, 4]}, [])
    sync(warehouse, lists, "run-1")
    write_model(warehouse, {"tier_1": [1, 2, 3, 4], "tier_2": [3, 4]}, [])
    with pytest.raises(SyncGuardTripped) as tripped:
        sync(warehouse, lists, "run-2")
    assert tripped.value.guard == "max_removals"
    promoted = sync(warehouse, lists, "run-3", max_removals=None)
    assert on_service(abm, lists) == {"tier_1": ids([1, 2, 3, 4]), "tier_2": set(), "tier_3": set()}
    assert {(m["from"], m["to"], m["accounts"]) for m in promoted["moves"]} == {("tier_2", "tier_1", 2)}


def test_a_programme_wide_share_of_removals_trips_max_removals(abm: Any, warehouse: Warehouse) -> None:
    lists = make_lists()
    write_model(warehouse, FIRST, FIRST_CUSTOMERS)
    sync(warehouse, lists, "run-1")
    write_model(warehouse, {"tier_1": range(1, 6), "tier_2": range(6, 9), "tier_3": range(16, 19)}, [])
    clear_requests(abm)
    with pytest.raises(SyncGuardTripped, match="the programme: the plan removes 17 of the 28"):
        sync(warehouse, lists, "run-2", max_removals=0.5)
    assert membership_posts(abm) == []


def test_a_dry_run_sends_nothing_and_shows_the_moves(abm: Any, warehouse: Warehouse) -> None:
    lists = make_lists()
    write_model(warehouse, FIRST, FIRST_CUSTOMERS)
    sync(warehouse, lists, "run-1")
    before = on_service(abm, lists)
    write_model(warehouse, SECOND, SECOND_CUSTOMERS)
    clear_requests(abm)
    preview = sync(warehouse, lists, "dry", dry_run=True)
    assert membership_posts(abm) == []
    assert on_service(abm, lists) == before
    assert preview["dry_run"] is True
    assert {(m["from"], m["to"]): m["accounts"] for m in preview["moves"]} == {
        ("tier_2", "tier_1"): 1,
        ("tier_1", "tier_3"): 1,
    }
    assert preview["totals"]["to_remove"] == 4  # 7 and 2 move, 8 is excluded, 25 left
    # The real run after it plans again and converges.
    sync(warehouse, lists, "run-2")
    assert on_service(abm, lists) == expected(SECOND, SECOND_CUSTOMERS)


def test_a_list_another_sync_holds_stops_the_programme_before_anything_is_read_or_sent(
    abm: Any, warehouse: Warehouse
) -> None:
    lists = make_lists()
    write_model(warehouse, FIRST, FIRST_CUSTOMERS)
    tables = StateTables.named(schema=warehouse.schema)
    other = StateDatabase(sql_hook("abm_warehouse", "state_conn_id"))
    try:
        # A list sync of tier 2 is running: it holds that list's lock.
        assert other.try_lock(tables.lock_key(lists["tier_2"]), "list-sync-run") is None
        clear_requests(abm)
        with pytest.raises(SyncAlreadyRunning, match=f"another sync of list {lists['tier_2']} is running"):
            sync(warehouse, lists, "run-1")
        assert membership_posts(abm) == []
        # The locks the programme took before it met the held one were released.
        for tier in ("tier_1", "tier_3"):
            key = tables.lock_key(lists[tier])
            assert other.try_lock(key, "list-sync-run") is None, f"{tier}'s lock was left held"
            other.unlock(key)
    finally:
        other.close()
    sync(warehouse, lists, "run-2")
    assert on_service(abm, lists) == expected(FIRST, FIRST_CUSTOMERS)


def test_a_programme_with_members_tiers_again_only_the_accounts_that_changed(
    abm: Any, warehouse: Warehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once a list of the programme has members, a run compares the source with every member of the
    programme on the account's key and tiers again only the accounts where something differs. That
    must still take off an account a list sync left on a second list of the programme, move an
    account whose in-step row is outranked by a new row, and leave an account whose second row names
    a lower tier where it is."""
    lists = make_lists()
    write_model(warehouse, FIRST, FIRST_CUSTOMERS)
    # A list sync of the tier 1 list, before the programme, put 9 (a tier 2 account) on it as well.
    model = warehouse.name("model")
    list_sync_operator(
        warehouse,
        lists["tier_1"],
        sql=f"SELECT account_id, account_name, crm_org_id FROM {model} WHERE account_id = '{account_id(9)}'",
    ).execute(context("before"))
    assert on_service(abm, lists)["tier_1"] == ids([9])
    capsys.readouterr()
    sync(warehouse, lists, "run-1", max_removals=None)  # the one member of tier 1 leaves it
    compared = warehouse.kind != "mariadb"  # MariaDB has no full outer join: it tiers every row
    assert ("accounts changed" in capsys.readouterr().out) is compared
    held = on_service(abm, lists)
    assert held == expected(FIRST, FIRST_CUSTOMERS)
    assert account_id(9) in held["tier_2"]

    # 12 (tier 2, in step) gains a tier 1 row and keeps its tier 2 row; 14 gains a tier 3 row.
    third = {**FIRST, "tier_1": [*FIRST["tier_1"], 12], "tier_3": [*FIRST["tier_3"], 14]}
    write_model(warehouse, third, FIRST_CUSTOMERS)
    clear_requests(abm)
    second = sync(warehouse, lists, "run-2")
    held = on_service(abm, lists)
    assert held == expected(third, FIRST_CUSTOMERS)
    assert [(action, list_id) for action, list_id, _ in membership_posts(abm)] == [
        ("remove", lists["tier_2"]),
        ("add", lists["tier_1"]),
    ]
    assert {(m["from"], m["to"]): m["accounts"] for m in second["moves"]} == {("tier_2", "tier_1"): 1}
    assert {e["audience"]: e["source_rows"] for e in second["lists"]} == {
        tier: len(accounts) for tier, accounts in held.items()
    }

    clear_requests(abm)
    sync(warehouse, lists, "run-3")
    assert membership_posts(abm) == []
    assert on_service(abm, lists) == held


def test_a_query_source_is_run_once_per_run_and_compared_with_the_members(
    abm: Any, warehouse: Warehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``sql`` source is copied once, as written, and the copy is what the second run compares."""
    lists = make_lists()
    model = warehouse.name("model")
    query = f"SELECT account_id, account_name, crm_org_id, tier FROM {model} WHERE tier <> 'none'"
    write_model(warehouse, {**FIRST, "none": [40]}, FIRST_CUSTOMERS)
    sync(warehouse, lists, "run-1", sql=query)
    assert on_service(abm, lists) == expected(FIRST, FIRST_CUSTOMERS)

    write_model(warehouse, {**SECOND, "none": [40]}, SECOND_CUSTOMERS)
    capsys.readouterr()
    sync(warehouse, lists, "run-2", sql=query)
    assert ("accounts changed" in capsys.readouterr().out) is (warehouse.kind != "mariadb")
    assert on_service(abm, lists) == expected(SECOND, SECOND_CUSTOMERS)
