"""The audience sync at the edges of docs/audiences.md's promises: an excluded account that would move,
a change of name only, a full resync over an account on two lists, default and padded orgs, an earlier
run left unfinished, a list excluded later, an account named twice by one audience, and ids with a
tab or a line break around them; on DuckDB, PostgreSQL and MariaDB against the emulator."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from abm_provider.warehouse.dialects import DIALECTS, _load, base
from accounts.audiences.audience_support import (
    MODEL_COLUMNS,
    dying_at_the_first_addition,
    ids,
    make_lists,
    membership_posts,
    on_service,
    sync,
    write_model,
)
from accounts.sync.sync_support import ORG, account_id, clear_requests, context
from accounts.sync.sync_support import operator as list_sync_operator
from support.warehouses import Warehouse


def test_an_excluded_account_that_would_move_is_removed_and_not_added(abm: Any, warehouse: Warehouse) -> None:
    lists = make_lists("ExMove")
    write_model(warehouse, {"tier_1": [1], "tier_2": [2, 3]}, [])
    sync(warehouse, lists, "run-1")
    # 2 is promoted and becomes a customer; 50 is a customer on no list and not in the model.
    write_model(warehouse, {"tier_1": [1, 2], "tier_2": [2, 3]}, [2, 50])
    clear_requests(abm)
    summary = sync(warehouse, lists, "run-2", max_removals=None)
    assert on_service(abm, lists) == {"tier_1": ids([1]), "tier_2": ids([3]), "tier_3": set()}
    assert summary["moves"] == []
    assert {e["audience"]: e["excluded"] for e in summary["lists"]} == {"tier_1": 0, "tier_2": 1, "tier_3": 0}
    assert [(a, accounts) for a, _, accounts in membership_posts(abm)] == [("remove", [account_id(2)])]


def test_a_run_where_only_a_name_changed_sends_nothing_and_stays_in_step(
    abm: Any, warehouse: Warehouse
) -> None:
    lists = make_lists("Rename")
    write_model(warehouse, {"tier_1": [1, 2], "tier_2": [3, 4]}, [])
    sync(warehouse, lists, "run-1")
    rows = [
        (account_id(1), "Renamed 1", ORG, "tier_1"),
        (account_id(2), "Account 2", ORG, "tier_1"),
        (account_id(3), "Account 3", ORG, "tier_2"),
        (account_id(4), "Account 4", ORG, "tier_2"),
    ]
    warehouse.replace_table("model", MODEL_COLUMNS, rows)
    clear_requests(abm)
    second = sync(warehouse, lists, "run-2")
    assert membership_posts(abm) == []
    assert on_service(abm, lists) == {"tier_1": ids([1, 2]), "tier_2": ids([3, 4]), "tier_3": set()}
    assert {e["audience"]: e["source_rows"] for e in second["lists"]} == {
        "tier_1": 2,
        "tier_2": 2,
        "tier_3": 0,
    }
    # An exclusion is the only change of the third run.
    warehouse.replace_table("customers", ["account_id"], [(account_id(3),)])
    sync(warehouse, lists, "run-3", max_removals=None)
    assert on_service(abm, lists) == {"tier_1": ids([1, 2]), "tier_2": ids([4]), "tier_3": set()}


def test_full_resync_takes_an_account_off_its_second_list_removals_first(
    abm: Any, warehouse: Warehouse
) -> None:
    lists = make_lists("Resync")
    write_model(warehouse, {"tier_1": [1, 2], "tier_2": [3, 4]}, [])
    sync(warehouse, lists, "run-1")
    model = warehouse.name("model")
    one = f"SELECT account_id, account_name, crm_org_id FROM {model} WHERE account_id = '{account_id(1)}'"
    list_sync_operator(warehouse, lists["tier_2"], sql=one, max_removals=None).execute(context("dup"))
    write_model(warehouse, {"tier_1": [1, 3], "tier_2": [4]}, [])  # 3 promoted
    clear_requests(abm)
    sync(warehouse, lists, "run-2", full_resync=True, max_removals=None)
    assert on_service(abm, lists) == {"tier_1": ids([1, 3]), "tier_2": ids([4]), "tier_3": set()}
    actions = [a for a, _, _ in membership_posts(abm)]
    assert actions == sorted(actions, key=lambda a: a != "remove")


def test_default_org_and_spaces_around_the_org_make_one_account(abm: Any, warehouse: Warehouse) -> None:
    lists = make_lists("Org")
    rows = [
        (account_id(1), "Account 1", f"  {ORG} ", "tier_1"),
        (account_id(1), "Account 1", ORG, "tier_2"),
        (account_id(2), "Account 2", None, "tier_2"),  # the default org
        (account_id(2), "Account 2", "  ", "tier_3"),
        (account_id(5), "Account 5", ORG, "tier_2"),
    ]
    warehouse.replace_table("model", MODEL_COLUMNS, rows)
    warehouse.replace_table("customers", ["account_id"], [])
    sync(warehouse, lists, "run-1", default_crm_org_id=ORG)
    assert on_service(abm, lists) == {"tier_1": ids([1]), "tier_2": ids([2, 5]), "tier_3": set()}
    clear_requests(abm)
    sync(warehouse, lists, "run-2", default_crm_org_id=ORG)
    assert membership_posts(abm) == []
    # 2 loses its tier 2 row: it moves to tier 3 (its blank org is the default).
    warehouse.replace_table(
        "model", MODEL_COLUMNS, [r for r in rows if r[3] != "tier_2" or r[0] != account_id(2)]
    )
    sync(warehouse, lists, "run-3", default_crm_org_id=ORG, max_removals=None)
    assert on_service(abm, lists) == {"tier_1": ids([1]), "tier_2": ids([5]), "tier_3": ids([2])}


def test_a_new_run_completes_an_earlier_unfinished_run_then_plans(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    lists = make_lists("Earlier")
    write_model(warehouse, {"tier_1": [1], "tier_2": [2, 3, 4]}, [])
    sync(warehouse, lists, "run-1")
    write_model(warehouse, {"tier_1": [1, 2], "tier_2": [3, 4]}, [])
    with dying_at_the_first_addition(monkeypatch), pytest.raises(SystemExit):
        sync(warehouse, lists, "run-2", max_removals=None)
    # The model changes again before the next (scheduled) run: 3 is promoted too.
    write_model(warehouse, {"tier_1": [1, 2, 3], "tier_2": [4]}, [])
    sync(warehouse, lists, "run-3", max_removals=None)
    assert on_service(abm, lists) == {"tier_1": ids([1, 2, 3]), "tier_2": ids([4]), "tier_3": set()}


def test_a_member_of_an_exclude_list_added_later_leaves_the_programme(abm: Any, warehouse: Warehouse) -> None:
    lists = make_lists("XL")
    other = make_lists("XLOther")["tier_1"]
    write_model(warehouse, {"tier_1": [1, 2], "tier_2": [3, 4]}, [])
    sync(warehouse, lists, "run-1", exclude_lists=[other])
    model = warehouse.name("model")
    one = f"SELECT account_id, account_name, crm_org_id FROM {model} WHERE account_id = '{account_id(3)}'"
    list_sync_operator(warehouse, other, sql=one).execute(context("other"))
    sync(warehouse, lists, "run-2", exclude_lists=[other], max_removals=None)
    assert on_service(abm, lists) == {"tier_1": ids([1, 2]), "tier_2": ids([4]), "tier_3": set()}


def test_one_account_named_twice_by_one_audience_with_two_names_sends_nothing_again(
    abm: Any, warehouse: Warehouse
) -> None:
    lists = make_lists("TwoNames")
    rows = [
        (account_id(1), "Name A", ORG, "tier_1"),
        (account_id(1), "Name B", ORG, "tier_1"),
        (account_id(2), "Account 2", ORG, "tier_2"),
        (account_id(3), "Account 3", ORG, "unmapped"),
    ]
    warehouse.replace_table("model", MODEL_COLUMNS, rows)
    warehouse.replace_table("customers", ["account_id"], [])
    clear_requests(abm)
    first = sync(warehouse, lists, "run-1")
    assert on_service(abm, lists) == {"tier_1": ids([1]), "tier_2": ids([2]), "tier_3": set()}
    # Its first row only is planned and sent: the plan knows the key repeats though no other
    # audience names it.
    sent = [a for action, _, accounts in membership_posts(abm) if action == "add" for a in accounts]
    assert sorted(sent) == [account_id(1), account_id(2)]
    assert {e["audience"]: e["added"] for e in first["lists"]} == {"tier_1": 1, "tier_2": 1, "tier_3": 0}
    clear_requests(abm)
    second = sync(warehouse, lists, "run-2")
    assert membership_posts(abm) == []
    assert on_service(abm, lists) == {"tier_1": ids([1]), "tier_2": ids([2]), "tier_3": set()}
    assert [e["source_rows"] for e in second["lists"]] == [e["source_rows"] for e in first["lists"]]


def test_an_account_left_on_two_lists_is_taken_off_one_and_not_reported_as_moved(
    abm: Any, warehouse: Warehouse
) -> None:
    """Separate list syncs put account 1 (a tier 1 account) on the tier 1 and tier 2 lists before the
    programme's first run. The run removes it from tier 2 and adds it nowhere: it did not move."""
    lists = make_lists("Dup")
    write_model(warehouse, {"tier_1": [1, 2], "tier_2": [3, 4]}, [])
    model = warehouse.name("model")
    one = f"SELECT account_id, account_name, crm_org_id FROM {model} WHERE account_id = '{account_id(1)}'"
    for tier in ("tier_1", "tier_2"):
        list_sync_operator(warehouse, lists[tier], sql=one).execute(context(f"before-{tier}"))
    summary = sync(warehouse, lists, "run-1", max_removals=None)
    held = on_service(abm, lists)
    assert held["tier_1"] == {account_id(1), account_id(2)}
    assert account_id(1) not in held["tier_2"]
    entries = {e["audience"]: e for e in summary["lists"]}
    assert entries["tier_1"]["added"] == 1  # account 2 only: account 1 was already there
    # A move is a removal from one list and an addition to another: account 1 was only removed.
    assert summary["moves"] == [], summary["moves"]
    assert (entries["tier_1"]["moved_in"], entries["tier_2"]["moved_out"]) == (0, 0)


def test_an_id_with_a_trailing_tab_is_the_same_account_and_goes_to_one_list_only(
    abm: Any, warehouse: Warehouse
) -> None:
    """The validator strips every surrounding whitespace of an id (tab, newline); account 1's rows
    name tier 1 (its id with a trailing tab) and tier 2: it is one account, on tier 1 only."""
    rows = [
        (account_id(1) + "\t", "Account 1", ORG, "tier_1"),
        (account_id(1), "Account 1", ORG, "tier_2"),
        (account_id(2), "Account 2", ORG, "tier_2"),
    ]
    warehouse.replace_table("model", MODEL_COLUMNS, rows)
    warehouse.replace_table("customers", ["account_id"], [])
    lists = make_lists("Tab")
    sync(warehouse, lists, "run-1", max_rejected=None)
    held = on_service(abm, lists)
    assert account_id(1) in held["tier_1"]
    assert account_id(1) not in held["tier_2"], "account 1 is on two lists of the programme"


def test_an_excluded_id_with_a_trailing_tab_in_the_source_is_kept_off(abm: Any, warehouse: Warehouse) -> None:
    """Account 1 is a customer; its source row's id has a trailing newline, which the validator
    strips: the account is excluded all the same."""
    rows = [
        (account_id(1) + "\n", "Account 1", ORG, "tier_1"),
        (account_id(2), "Account 2", ORG, "tier_1"),
    ]
    warehouse.replace_table("model", MODEL_COLUMNS, rows)
    warehouse.replace_table("customers", ["account_id"], [(account_id(1),)])
    lists = make_lists("TabX")
    sync(warehouse, lists, "run-1", max_rejected=None)
    held = on_service(abm, lists)
    assert account_id(1) not in held["tier_1"], "an excluded account was added"


@pytest.mark.parametrize(
    ("spelled", "tier", "name"),
    [
        pytest.param(account_id(1) + "\t", "tier_2", "Account 1", id="tab-lower-tier"),
        pytest.param("\u00a0" + account_id(1), "tier_1", "Account 1", id="nbsp-same-tier"),
        pytest.param(account_id(1) + "\n", "tier_2", "Renamed 1", id="newline-and-renamed"),
    ],
)
def test_a_second_run_tiers_every_row_of_an_account_one_of_whose_rows_spells_it_with_whitespace(
    abm: Any, warehouse: Warehouse, spelled: str, tier: str, name: str
) -> None:
    """A programme in step compares the source with its members on the ids as written: a row whose id
    has whitespace around it pairs with no member, so its account is tiered again, with every row of
    it, however each spells the id. Account 1 stays on tier 1, where its other row (in step) puts it."""
    lists = make_lists("Spelled")
    write_model(warehouse, {"tier_1": [1], "tier_2": [2]}, [])
    sync(warehouse, lists, "run-1")
    rows = [
        (account_id(1), name, ORG, "tier_1"),
        (spelled, name, ORG, tier),
        (account_id(2), "Account 2", ORG, "tier_2"),
    ]
    warehouse.replace_table("model", MODEL_COLUMNS, rows)
    clear_requests(abm)
    summary = sync(warehouse, lists, "run-2", max_rejected=None)
    assert on_service(abm, lists) == {"tier_1": ids([1]), "tier_2": ids([2]), "tier_3": set()}
    assert membership_posts(abm) == [], "an account in step was moved"
    assert summary["moves"] == []
    # Each of account 1's rows was tiered once: its two rows name it, none twice.
    tier_1 = next(e for e in summary["lists"] if e["audience"] == "tier_1")
    assert (tier_1["source_rows"], tier_1["duplicates"]) == (2 if tier == "tier_1" else 1, 0)


def test_ids_and_audiences_that_differ_only_in_case_are_told_apart_on_every_warehouse(
    abm: Any, warehouse: Warehouse
) -> None:
    """Salesforce's 15-character ids are case-sensitive, and so are the audience values: on MariaDB,
    whose default collations fold case, as on the others. The id spelled in capitals is another
    account, on its own tier and not excluded with its lower-case twin; ``TIER_1`` is no audience."""
    upper, lower, other = "001000000000ABC", "001000000000abc", account_id(3)
    rows = [
        (upper, "Upper", ORG, "tier_2"),
        (lower, "Lower", ORG, "tier_1"),
        (account_id(2), "Account 2", ORG, "tier_2"),
        (account_id(4), "Account 4", ORG, "tier_3"),
        (other, "Account 3", ORG, "TIER_1"),
    ]
    warehouse.replace_table("model", MODEL_COLUMNS, rows)
    warehouse.replace_table("customers", ["account_id"], [("001000000000Abc",)])
    lists = make_lists("Case")
    summary = sync(warehouse, lists, "run-1")
    assert on_service(abm, lists) == {
        "tier_1": {lower},
        "tier_2": {upper, account_id(2)},
        "tier_3": {account_id(4)},
    }
    assert summary["totals"]["excluded"] == 0
    # The excluded spelling is a third account: excluding it takes neither twin off its list.
    warehouse.replace_table("customers", ["account_id"], [(lower,)])
    sync(warehouse, lists, "run-2", max_removals=None, allow_empty_source=True)
    assert on_service(abm, lists) == {
        "tier_1": set(),
        "tier_2": {upper, account_id(2)},
        "tier_3": {account_id(4)},
    }


def test_where_the_dialect_strips_spaces_only_an_id_with_a_tab_twice_in_one_tier_is_sent_once(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a dialect whose ``strip_sql`` is standard SQL's ``TRIM`` (Snowflake, BigQuery, generic), the
    tiering keys ``A`` and ``A<tab>`` apart while the validator reads both as ``A``: the plan must not
    take the tiering's word that no key repeats, and sends account 1 once. Simulated on the warehouse's
    own dialect, its strip and its declaration put back to the base's."""
    dialect = _load(DIALECTS[{"mariadb": "mysql"}.get(warehouse.kind, warehouse.kind)])
    monkeypatch.setattr(dialect, "strip_sql", base.Dialect.strip_sql)
    monkeypatch.setattr(dialect, "capabilities", replace(dialect.capabilities, strips_like_python=False))
    rows = [
        (account_id(1), "Account 1", ORG, "tier_1"),
        (account_id(1) + "\t", "Account 1", ORG, "tier_1"),
        (account_id(2), "Account 2", ORG, "tier_2"),
    ]
    warehouse.replace_table("model", MODEL_COLUMNS, rows)
    warehouse.replace_table("customers", ["account_id"], [])
    lists = make_lists("SpacesOnly")
    clear_requests(abm)
    sync(warehouse, lists, "run-1")
    sent = [a for action, _, accounts in membership_posts(abm) if action == "add" for a in accounts]
    assert sorted(sent) == [account_id(1), account_id(2)]


def test_an_excluded_account_whose_row_names_no_audience_is_not_logged_as_kept_off(
    abm: Any, warehouse: Warehouse
) -> None:
    """Customer 5's only row names an audience the programme does not map: it is kept off no list, so
    the moves table gets no row for it, which, naming neither list, no later trim could reach."""
    rows = [
        (account_id(1), "Account 1", ORG, "tier_1"),
        (account_id(5), "Account 5", ORG, "prospect"),
    ]
    warehouse.replace_table("model", MODEL_COLUMNS, rows)
    warehouse.replace_table("customers", ["account_id"], [(account_id(5),)])
    lists = make_lists("Unmapped")
    for run in ("run-1", "run-2"):
        sync(warehouse, lists, run)
    moves = warehouse.query(f"SELECT kind, from_list, to_list FROM {warehouse.name('abm_sync_moves')}")
    assert [m for m in moves if m[1] is None and m[2] is None] == []
    assert on_service(abm, lists) == {"tier_1": ids([1]), "tier_2": set(), "tier_3": set()}


def test_an_id_too_long_for_any_list_is_rejected_and_the_programme_runs_on(
    abm: Any, warehouse: Warehouse
) -> None:
    """An id of 300 characters (the lists keep 255) named by two rows and by the customers: the work
    tables that group and exclude keys leave it out, its rows are rejected naming the limit, and the
    rest of the programme is sent, on the first run and on the second, which compares with members."""
    long_id = "001" + "x" * 297
    rows = [
        (account_id(1), "Account 1", ORG, "tier_1"),
        (long_id, "Too long", ORG, "tier_2"),
        (long_id, "Too long", ORG, "tier_3"),
        (account_id(2), "Account 2", ORG, "tier_2"),
    ]
    warehouse.replace_table("model", MODEL_COLUMNS, rows, long_text=True)
    warehouse.replace_table("customers", ["account_id"], [(long_id + "y",)], long_text=True)
    lists = make_lists("TooLong")
    first = sync(warehouse, lists, "run-1", max_rejected=None)
    assert on_service(abm, lists) == {"tier_1": ids([1]), "tier_2": ids([2]), "tier_3": set()}
    assert first["totals"]["rejected"] == 2
    reasons = warehouse.query(f"SELECT reason FROM {warehouse.name('abm_sync_rejects')}")
    assert reasons and all("255" in str(r[0]) for r in reasons), reasons
    rows.append((account_id(3), "Account 3", ORG, "tier_3"))
    warehouse.replace_table("model", MODEL_COLUMNS, rows, long_text=True)
    sync(warehouse, lists, "run-2", max_rejected=None)
    assert on_service(abm, lists) == {"tier_1": ids([1]), "tier_2": ids([2]), "tier_3": ids([3])}
