"""The audience-sync tests' helpers: a model table of tiers, the programme's operator, and what the
service holds."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from abm_provider.hooks.abm import AbmHook
from abm_provider.operators.audiences import AccountAudienceSyncOperator
from accounts.sync.sync_support import COLUMN_MAP, ORG, account_id, context, make_list, member_ids
from support.warehouses import Warehouse

CONN_ID = "abm_warehouse"
MODEL_COLUMNS = ["account_id", "account_name", "crm_org_id", "tier"]
TIERS = ("tier_1", "tier_2", "tier_3")


def model_rows(tiers: dict[str, Iterable[int]]) -> list[tuple[str, str, str, str]]:
    """Rows of the model table: each account number under each tier that names it."""
    return [(account_id(n), f"Account {n}", ORG, tier) for tier, numbers in tiers.items() for n in numbers]


def write_model(warehouse: Warehouse, tiers: dict[str, Iterable[int]], customers: Iterable[int]) -> None:
    """Replace the model table and the customers table (the exclusion)."""
    warehouse.replace_table("model", MODEL_COLUMNS, model_rows(tiers))
    warehouse.replace_table("customers", ["account_id"], [(account_id(n),) for n in customers])


def make_lists(prefix: str = "Tier") -> dict[str, str]:
    """A new list per tier: ``{tier: list id}``."""
    return {tier: make_list(f"{prefix} {tier}") for tier in TIERS}


def operator(warehouse: Warehouse, lists: dict[str, Any], **kwargs: Any) -> AccountAudienceSyncOperator:
    if "sql" not in kwargs and "accounts_path" not in kwargs:
        kwargs.setdefault("table", warehouse.name("model"))
    kwargs.setdefault("exclusions", [{"table": warehouse.name("customers")}])
    kwargs.setdefault("audience_column", "tier")
    kwargs.setdefault("column_map", COLUMN_MAP)
    kwargs.setdefault("sql_conn_id", CONN_ID)
    return AccountAudienceSyncOperator(
        task_id="audiences",
        audiences=lists,
        state_schema=warehouse.schema,
        max_attempts=1,
        **kwargs,
    )


def sync(warehouse: Warehouse, lists: dict[str, Any], run_id: str, **kwargs: Any) -> dict[str, Any]:
    result: dict[str, Any] = operator(warehouse, lists, **kwargs).execute(context(run_id))
    return result


def on_service(abm: Any, lists: dict[str, str]) -> dict[str, set[str]]:
    """Each tier's members as the service has them."""
    return {tier: member_ids(abm, list_id) for tier, list_id in lists.items()}


def ids(numbers: Iterable[int]) -> set[str]:
    return {account_id(n) for n in numbers}


def membership_posts(abm: Any) -> list[tuple[str, str, list[str]]]:
    """``(action, list id, account ids)`` of each add or remove request, in the order they arrived."""
    found = []
    for seen in abm.requests_seen():
        path = str(seen.get("path", "")).split("?", 1)[0]
        if seen.get("method") != "POST":
            continue
        for action in ("add", "remove"):
            if path.endswith(f"/accounts/{action}"):
                list_id = path.split("/accountLists/")[-1].split("/", 1)[0]
                accounts = [a["id"] for a in (seen.get("body") or {}).get("accounts", [])]
                found.append((action, list_id, accounts))
    return found


@contextmanager
def dying_at_the_first_addition(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Inside the block, a run dies (``SystemExit``) at its first add request: its removals are sent
    and recorded, its additions are not; the service is reachable again after it."""
    send = AbmHook.change_membership

    def dies_on_add(self: AbmHook, action: str, *args: Any, **kwargs: Any) -> Any:
        if action == "add":
            raise SystemExit("the worker died between the removals and the additions")
        return send(self, action, *args, **kwargs)

    monkeypatch.setattr(AbmHook, "change_membership", dies_on_add)
    try:
        yield
    finally:
        monkeypatch.setattr(AbmHook, "change_membership", send)


#: Run 1: account 3 is named by tier 1 and tier 2 (it goes to tier 1); 20 and 21 are customers.
FIRST = {"tier_1": range(1, 6), "tier_2": [3, *range(6, 16)], "tier_3": range(16, 31)}
FIRST_CUSTOMERS = [20, 21, 99]
#: Run 2: 7 promoted to tier 1, 2 demoted to tier 3, 8 becomes a customer, 25 leaves the model.
SECOND = {
    "tier_1": [1, 3, 4, 5, 7],
    "tier_2": [3, 6, *range(8, 16)],
    "tier_3": [2, *(n for n in range(16, 31) if n != 25)],
}
SECOND_CUSTOMERS = [8, 20, 21, 99]


def expected(tiers: dict[str, Any], customers: list[int]) -> dict[str, set[str]]:
    """Each tier's accounts: those whose highest tier it is, less the customers."""
    placed: set[int] = set()
    result = {}
    for tier in TIERS:
        mine = {n for n in tiers[tier] if n not in placed and n not in customers}
        placed |= set(tiers[tier])
        result[tier] = ids(mine)
    return result


def assert_one_tier_each(held: dict[str, set[str]], customers: list[int]) -> None:
    seen: dict[str, str] = {}
    for tier, members in held.items():
        for member in members:
            assert member not in seen, f"{member} is on {seen[member]} and {tier}"
            seen[member] = tier
    assert not set(seen) & ids(customers)
