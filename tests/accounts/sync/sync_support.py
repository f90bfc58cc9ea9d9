"""The list-sync tests' own helpers, on the warehouses of ``support.warehouses`` (the ``SYNC`` suite).

A module of its own (not ``conftest``) so the tests import it by a name no other test folder uses;
tests outside this folder (the concurrency tests in ``tests/reliability``) import it as
``accounts.sync.sync_support``. It holds the ``warehouse`` fixture of the sync tests (DuckDB,
PostgreSQL and MariaDB, each test's own, as the Airflow connection ``abm_warehouse``) and the helpers
that build a list, run a sync and read the result.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from abm_provider.hooks.abm import AbmHook
from abm_provider.operators.account_lists import AccountListSyncOperator
from support.warehouses import SYNC, Warehouse, open_warehouse

CONN_ID = SYNC.conn_id


def open_sync_warehouse(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AbstractContextManager[Warehouse]:
    """A fresh warehouse of ``kind`` for a sync test, as ``abm_warehouse``; skips when the server is down."""
    return open_warehouse(kind, tmp_path, monkeypatch, SYNC)


@pytest.fixture(params=["duckdb", "postgres", "mariadb"])
def warehouse(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Warehouse]:
    """A sync test's warehouse: its own DuckDB file, schema of the test PostgreSQL, or MariaDB database."""
    with open_sync_warehouse(request.param, tmp_path, monkeypatch) as found:
        yield found


COLUMNS = ["account_id", "account_name", "crm_org_id"]
COLUMN_MAP = {"id": "account_id", "name": "account_name", "crmOrgId": "crm_org_id"}
ORG = "00D000000000001"
#: Well formed, but not an account id: the service reports it not found.
NOT_FOUND = "002000000000000099"


def account_id(n: int) -> str:
    return f"001{n:015d}"


def rows_for(numbers: range | list[int], org: str | None = ORG) -> list[tuple[str, str, str | None]]:
    return [(account_id(n), f"Account {n}", org) for n in numbers]


def context(run_id: str) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="sync_test", task_id="sync", run_id=run_id, try_number=1, map_index=-1)
    return {"ti": ti, "task_instance": ti, "run_id": run_id}


def make_list(name: str = "Targets") -> str:
    hook = AbmHook()
    folder = hook.ensure_folder("Sync tests")
    return str(hook.ensure_list(name, folder["folderId"])["listId"])


def source(warehouse: Warehouse, table: str = "targets") -> dict[str, str]:
    """The operator's argument that reads ``table`` of the warehouse (quoted as its dialect quotes)."""
    return {"table": warehouse.name(table)}


def operator(warehouse: Warehouse, list_id: str, **kwargs: Any) -> AccountListSyncOperator:
    if "table" in kwargs:
        kwargs.update(source(warehouse, kwargs.pop("table").removeprefix(f"{warehouse.schema}.")))
    elif "sql" not in kwargs:
        kwargs.update(source(warehouse))
    kwargs.setdefault("column_map", COLUMN_MAP)
    return AccountListSyncOperator(
        task_id="sync",
        list_id=list_id,
        sql_conn_id=CONN_ID,
        state_schema=warehouse.schema,
        max_attempts=1,
        **kwargs,
    )


def sync(warehouse: Warehouse, list_id: str, run_id: str, **kwargs: Any) -> dict[str, Any]:
    result: dict[str, Any] = operator(warehouse, list_id, **kwargs).execute(context(run_id))
    return result


def member_ids(abm: Any, list_id: str) -> set[str]:
    return {m["id"] for m in abm.members(list_id)}


def membership_requests(abm: Any) -> dict[str, int]:
    """Add and remove requests the service received since the log was last cleared."""
    counts = {"add": 0, "remove": 0}
    for seen in abm.requests_seen():
        path = str(seen.get("path", ""))
        for action in counts:
            if seen.get("method") == "POST" and path.endswith(f"/accounts/{action}"):
                counts[action] += 1
    return counts


def sent_ids(abm: Any, action: str = "add", *, accepted_only: bool = False) -> list[str]:
    """The account ids the service received in ``action`` requests since the log was cleared.

    With ``accepted_only``, only those in requests the service answered with a 2xx.
    """
    ids: list[str] = []
    for seen in abm.requests_seen():
        if accepted_only and not 200 <= int(seen.get("status") or 0) < 300:
            continue
        if seen.get("method") == "POST" and str(seen.get("path", "")).endswith(f"/accounts/{action}"):
            ids.extend(a["id"] for a in (seen.get("body") or {}).get("accounts", []))
    return ids


def clear_requests(abm: Any) -> None:
    abm.admin("DELETE", "/_admin/requests")


def state_ids(warehouse: Warehouse, list_id: str) -> set[str]:
    rows = warehouse.query(
        f"SELECT account_id FROM {warehouse.name('abm_sync_members')} WHERE list_id = %s", [list_id]
    )
    return {r[0] for r in rows}
