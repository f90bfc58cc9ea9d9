"""Account-list operators against the emulator, a real HTTP service in its own process.

Checked through the emulator's admin API, not the operators' own summaries: re-runs of the folder
and list operators create nothing new; 25,000 accounts from each source land every valid, known
account on the list; a second run reports them as duplicates; invalid and not-found rows are in the
rejects file with their record numbers and reasons.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk.exceptions import AirflowFailException

from abm_provider.common.rejects import REJECTS_HEADER, TooManyRejects
from abm_provider.operators.account_lists import (
    AddAccountsToListOperator,
    CreateAccountListFolderOperator,
    CreateAccountListOperator,
    RemoveAccountsFromListOperator,
)
from support.warehouses import duckdb_conn_env

ROWS = 25_000
ORG = "00D000000000001"  # one Salesforce org, as most users have
INVALID_KINDS = (
    ("", "empty id"),
    ("001 with space", "id contains whitespace"),
    ("0" * 300, "id is 300 characters"),
    ("HUBSPOT", "unknown crmType 'HUBSPOT'"),
)


def _context(tmp_path: Path, task_id: str = "task", try_number: int = 1) -> dict[str, Any]:
    ti = SimpleNamespace(
        dag_id="abm_test", task_id=task_id, run_id="manual__test", try_number=try_number, map_index=-1
    )
    return {"ti": ti, "task_instance": ti, "run_id": "manual__test"}


def _state(abm: Any) -> dict[str, Any]:
    return abm.admin("GET", "/_admin/state")


def _all(abm: Any, kind: str) -> list[dict[str, Any]]:
    """Folders or lists of the test key's account from the emulator's admin state, whatever its nesting."""
    state = _state(abm)
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == kind and isinstance(value, list):
                    found.extend(v for v in value if isinstance(v, dict))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(state)
    return found


def _member_ids(abm: Any, list_id: str) -> set[str]:
    members = abm.members(list_id)
    if isinstance(members, dict):
        members = members["members"]
    return {m["id"] for m in members}


def _make_list(abm: Any, tmp_path: Path, name: str = "Targets") -> str:
    folder = CreateAccountListFolderOperator(task_id="folder", folder_name="ABM tests").execute(
        _context(tmp_path)
    )
    created = CreateAccountListOperator(task_id="list", list_name=name, folder_id=folder["folderId"]).execute(
        _context(tmp_path)
    )
    return created["listId"]


def _rejects(path: str | None) -> list[dict[str, str]]:
    """The rejects file read with the standard library, not the provider's reader."""
    assert path is not None
    local = path.removeprefix("file://")
    with open(local, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    assert tuple(reader.fieldnames or ()) == REJECTS_HEADER == ("line", "record", "reason", "raw")
    return rows


# --- folders and lists -----------------------------------------------------------------------------


def test_folder_and_list_operators_reuse_on_rerun(abm, tmp_path):
    ctx = _context(tmp_path)
    first = CreateAccountListFolderOperator(task_id="f", folder_name="Q4 campaigns").execute(ctx)
    again = CreateAccountListFolderOperator(task_id="f", folder_name="Q4 campaigns").execute(ctx)
    assert set(first) == {"folderId", "displayName", "folderAccess"}
    assert again == first and first["displayName"] == "Q4 campaigns"
    assert len(_all(abm, "folders")) == 1

    lst = CreateAccountListOperator(task_id="l", list_name="Tier 1", folder_id=first["folderId"]).execute(ctx)
    lst_again = CreateAccountListOperator(
        task_id="l", list_name="Tier 1", folder_id=first["folderId"]
    ).execute(ctx)
    assert set(lst) == {"listId", "listName", "folderId"}
    assert lst_again == lst and lst["folderId"] == first["folderId"] and lst["listName"] == "Tier 1"
    assert len(_all(abm, "lists")) == 1

    # the same list name in another folder is a different list
    other = CreateAccountListFolderOperator(task_id="f2", folder_name="Other").execute(ctx)
    elsewhere = CreateAccountListOperator(
        task_id="l2", list_name="Tier 1", folder_id=other["folderId"]
    ).execute(ctx)
    assert elsewhere["listId"] != lst["listId"] and elsewhere["folderId"] == other["folderId"]
    assert len(_all(abm, "lists")) == 2


def test_if_exists_create_and_fail(abm, tmp_path):
    ctx = _context(tmp_path)
    first = CreateAccountListFolderOperator(task_id="f", folder_name="Dup").execute(ctx)
    second = CreateAccountListFolderOperator(task_id="f", folder_name="Dup", if_exists="create").execute(ctx)
    assert second["folderId"] != first["folderId"]
    assert len(_all(abm, "folders")) == 2
    # with two of that name, reuse picks the oldest, consistently
    assert CreateAccountListFolderOperator(task_id="f", folder_name="Dup").execute(ctx) == first
    with pytest.raises(AirflowFailException, match="already exists"):
        CreateAccountListFolderOperator(task_id="f", folder_name="Dup", if_exists="fail").execute(ctx)
    lst = CreateAccountListOperator(task_id="l", list_name="L", folder_id=first["folderId"]).execute(ctx)
    with pytest.raises(AirflowFailException, match="already exists"):
        CreateAccountListOperator(
            task_id="l", list_name="L", folder_id=first["folderId"], if_exists="fail"
        ).execute(ctx)
    assert len(_all(abm, "folders")) == 2 and len(_all(abm, "lists")) == 1
    assert lst["listId"]


# --- adding 25,000 accounts from each source -------------------------------------------------------


def _dataset() -> tuple[list[dict[str, Any]], set[str], dict[int, str], set[int]]:
    """Rows with invalid ones (every 97th) and ids the service does not know (every 89th).

    Returns the rows, the ids that must land, the expected reason start per invalid row number and
    the row numbers that must come back as not found.
    """
    rows: list[dict[str, Any]] = []
    valid: set[str] = set()
    invalid: dict[int, str] = {}
    not_found: set[int] = set()
    for i in range(ROWS):
        number = i + 1
        row = {
            "account_id": f"001{i:012d}",
            "account_name": f"Company {i}, Inc",
            "org": ORG,
            "crm_type": "SALESFORCE",
        }
        if i % 97 == 13:
            value, reason = INVALID_KINDS[(i // 97) % len(INVALID_KINDS)]
            if value == "HUBSPOT":
                row["crm_type"] = value
            else:
                row["account_id"] = value
            invalid[number] = reason
        elif i % 89 == 7:
            row["account_id"] = f"999{i:012d}"  # well formed, but not an id the CRM knows
            not_found.add(number)
        else:
            valid.add(row["account_id"])
        rows.append(row)
    return rows, valid, invalid, not_found


COLUMN_MAP = {"id": "account_id", "name": "account_name", "crmOrgId": "org", "crmType": "crm_type"}


def _write_source(kind: str, rows: list[dict[str, Any]], tmp_path: Path, monkeypatch) -> dict[str, Any]:
    if kind == "iterable":
        return {"accounts": (dict(r) for r in rows)}
    if kind == "dataframe":
        import pandas as pd

        return {"accounts": pd.DataFrame(rows)}
    if kind == "arrow":
        return {"accounts": pa.Table.from_pylist(rows)}
    if kind == "csv":
        path = tmp_path / "accounts.csv"
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        return {"accounts_path": str(path)}
    if kind == "parquet":
        path = tmp_path / "accounts.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=4000)
        return {"accounts_path": str(path)}
    import duckdb

    db = tmp_path / "crm.duckdb"
    with duckdb.connect(str(db)) as conn:
        # One Arrow scan: DuckDB's executemany takes about a second per thousand rows.
        table = pa.Table.from_pylist([{"n": n, **r} for n, r in enumerate(rows, 1)])
        conn.register("crm_rows", table)
        conn.execute(
            "CREATE OR REPLACE TABLE crm_accounts AS SELECT CAST(n AS INTEGER) AS n, "
            "CAST(account_id AS VARCHAR) AS account_id, CAST(account_name AS VARCHAR) AS account_name, "
            "CAST(org AS VARCHAR) AS org, CAST(crm_type AS VARCHAR) AS crm_type FROM crm_rows"
        )
    monkeypatch.setenv("AIRFLOW_CONN_CRM_DUCKDB", duckdb_conn_env(db))
    return {
        "sql": "SELECT account_id, account_name, org, crm_type FROM crm_accounts ORDER BY n",
        "sql_conn_id": "crm_duckdb",
    }


@pytest.mark.parametrize("kind", ["iterable", "dataframe", "arrow", "csv", "parquet", "sql"])
def test_add_25k_accounts_from_each_source(abm, tmp_path, monkeypatch, kind):
    rows, valid, invalid, not_found = _dataset()
    list_id = _make_list(abm, tmp_path)

    def run(try_number: int) -> dict[str, Any]:
        source = _write_source(kind, rows, tmp_path, monkeypatch)
        op = AddAccountsToListOperator(
            task_id="add",
            list_id=list_id,
            column_map=COLUMN_MAP,
            max_rejected=None,
            rejects_base=str(tmp_path / "state"),
            **source,
        )
        return op.execute(_context(tmp_path, "add", try_number))

    summary = run(1)
    assert _member_ids(abm, list_id) == valid
    assert summary["rows"] == ROWS
    assert summary["rejected"] == len(invalid)
    assert summary["sent"] == ROWS - len(invalid)
    assert summary["added"] == len(valid)
    assert summary["not_found"] == len(not_found)
    assert summary["duplicates"] == 0
    assert summary["batches"] == -(-summary["sent"] // 1000)
    assert summary["rejects_path"].endswith("/rejects/abm_test/manual__test/add/try_1.csv")

    rejects = _rejects(summary["rejects_path"])
    by_row = {int(r["record"]): r for r in rejects}
    assert len(rejects) == len(by_row) == len(invalid) + len(not_found)
    for number, reason in invalid.items():
        assert by_row[number]["reason"].startswith(reason), by_row[number]
        assert json.loads(by_row[number]["raw"]) == rows[number - 1]
    for number in not_found:
        assert by_row[number]["reason"].startswith("not found")
        assert json.loads(by_row[number]["raw"]) == rows[number - 1]
    if kind == "csv":
        assert all(int(r["line"]) == int(r["record"]) + 1 for r in rejects)
    else:
        assert all(r["line"] == "" for r in rejects)

    second = run(2)
    assert second["added"] == 0
    assert second["duplicates"] == len(valid)
    assert second["not_found"] == len(not_found)
    assert second["rejects_path"].endswith("/try_2.csv")
    assert _member_ids(abm, list_id) == valid


# --- remove, limits and pre-flight checks ----------------------------------------------------------


def test_remove_accounts(abm, tmp_path):
    list_id = _make_list(abm, tmp_path)
    ids = [f"001{i:012d}" for i in range(2500)]
    AddAccountsToListOperator(
        task_id="add", list_id=list_id, default_crm_org_id=ORG, accounts=[{"id": i} for i in ids]
    ).execute(_context(tmp_path))
    to_remove = [{"id": i, "name": 42} for i in ids[:1200]] + [{"id": None}]
    summary = RemoveAccountsFromListOperator(
        task_id="remove",
        list_id=list_id,
        default_crm_org_id=ORG,
        accounts=to_remove,
        max_rejected=1,
        rejects_base=str(tmp_path / "state"),
    ).execute(_context(tmp_path, "remove"))
    assert summary["removed"] == 1200 and summary["sent"] == 1200 and summary["batches"] == 2
    assert summary["rejected"] == 1
    assert "added" not in summary and "duplicates" not in summary
    assert _member_ids(abm, list_id) == set(ids[1200:])
    (reject,) = _rejects(summary["rejects_path"])
    assert (reject["line"], reject["record"], reject["reason"]) == ("", "1201", "missing id (null)")
    assert json.loads(reject["raw"]) == {"id": None}


def test_max_rejected_count_fails_fast(abm, tmp_path):
    list_id = _make_list(abm, tmp_path)
    accounts = [{"id": f"001{i:012d}"} for i in range(3000)]
    accounts[1499] = {"id": 1499}
    accounts[2499] = {"id": ""}
    with pytest.raises(
        TooManyRejects, match=r"2 records were rejected by record 2500, more than max_rejected=1"
    ) as err:
        AddAccountsToListOperator(
            task_id="add",
            list_id=list_id,
            default_crm_org_id=ORG,
            accounts=accounts,
            max_rejected=1,
            batch_size=500,
            rejects_base=str(tmp_path / "state"),
        ).execute(_context(tmp_path))
    assert isinstance(err.value, AirflowFailException)  # no retry: the same rows would fail again
    message = str(err.value)
    assert "e.g. record 1500: id must be a string, got int 1499; record 2500: empty id" in message
    assert message.endswith("/rejects/abm_test/manual__test/task/try_1.csv.")
    # the four full batches of 500 before the limit was passed were sent; nothing after them
    assert len(_member_ids(abm, list_id)) == 2000
    # the rejects of the failed try are kept, whole
    assert [r["record"] for r in _rejects(err.value.rejects_path)] == ["1500", "2500"]


def test_a_fraction_max_rejected_and_max_not_found_are_checked_at_the_end(abm, tmp_path):
    list_id = _make_list(abm, tmp_path)
    accounts = [{"id": f"001{i:012d}"} for i in range(3000)]
    accounts[1499] = {"id": 1499}
    accounts[2499] = {"id": ""}
    # 2 of 3000 is 0.067%: over a 0.05% share, only known once every row is read (and all sent)
    with pytest.raises(
        TooManyRejects, match=r"2 of 3000 records were rejected \(0.07%\), more than max_rejected=0.0005"
    ):
        AddAccountsToListOperator(
            task_id="add", list_id=list_id, default_crm_org_id=ORG, accounts=accounts, max_rejected=0.0005
        ).execute(_context(tmp_path, try_number=1))
    assert len(_member_ids(abm, list_id)) == 3000 - 2
    summary = AddAccountsToListOperator(
        task_id="add", list_id=list_id, default_crm_org_id=ORG, accounts=accounts, max_rejected=0.001
    ).execute(_context(tmp_path, try_number=2))
    assert summary["rejected"] == 2

    unknown = [{"id": "999000000000001"}, {"id": "999000000000002"}, {"id": f"001{0:012d}"}]
    with pytest.raises(
        TooManyRejects, match="2 of 3 accounts were not found by the service, more than max_not_found=1"
    ):
        AddAccountsToListOperator(
            task_id="add", list_id=list_id, default_crm_org_id=ORG, accounts=unknown, max_not_found=1
        ).execute(_context(tmp_path, try_number=4))
    with pytest.raises(TooManyRejects, match=r"more than max_not_found=0.5 allows \(50.00% of 3 records\)"):
        AddAccountsToListOperator(
            task_id="add", list_id=list_id, default_crm_org_id=ORG, accounts=unknown, max_not_found=0.5
        ).execute(_context(tmp_path, try_number=5))
    summary = AddAccountsToListOperator(
        task_id="add", list_id=list_id, default_crm_org_id=ORG, accounts=unknown, max_not_found=0.7
    ).execute(_context(tmp_path, try_number=6))
    assert summary["not_found"] == 2 and summary["rejects_path"]


def test_missing_id_column_fails_before_any_request(abm, tmp_path):
    list_id = _make_list(abm, tmp_path)
    path = tmp_path / "wrong.csv"
    path.write_text("AccountId,Name\n001000000000001,Acme\n")
    before = len(abm.requests_seen())
    with pytest.raises(AirflowFailException, match=r"no column \['id'\].*set column_map"):
        AddAccountsToListOperator(
            task_id="add", list_id=list_id, default_crm_org_id=ORG, accounts_path=str(path)
        ).execute(_context(tmp_path))
    seen = abm.requests_seen()
    adds = [r for r in seen[before:] if "/accounts/add" in str(r.get("path", ""))]
    assert adds == []
    assert _member_ids(abm, list_id) == set()


@pytest.mark.parametrize(
    ("rendered", "message"),
    [
        ({"column_map": {"ident": "account_id"}}, "ident"),
        ({"default_crm_org_id": "   "}, "default_crm_org_id is empty"),
    ],
)
def test_a_templated_argument_that_renders_bad_fails_without_retries(abm, tmp_path, rendered, message):
    """Checked at parse when literal; once rendered the value is final, so no task retry can help."""
    list_id = _make_list(abm, tmp_path)
    operator = AddAccountsToListOperator(
        task_id="add",
        list_id=list_id,
        accounts=[{"account_id": "001000000000001"}],
        column_map="{{ params.column_map }}",
        default_crm_org_id="{{ params.org }}",
    )
    operator.column_map, operator.default_crm_org_id = {"id": "account_id"}, None  # as rendered
    for name, value in rendered.items():
        setattr(operator, name, value)
    before = len(abm.requests_seen())
    with pytest.raises(AirflowFailException, match=message):
        operator.execute(_context(tmp_path))
    assert abm.requests_seen()[before:] == []


# --- requests in flight ------------------------------------------------------------------------------


@pytest.mark.parametrize("max_in_flight", [1, 4])
def test_requests_in_flight_change_speed_not_the_outcome(abm, tmp_path, max_in_flight):
    """Batches sent side by side give the same membership, counts and rejects as one at a time.

    Every third row of the source is unknown to the CRM; their not-found rejects come back from
    different requests, and must all be written, each with its own source row number.
    """
    list_id = _make_list(abm, tmp_path)
    rows = [
        {"id": f"001{i:012d}" if i % 3 else f"unknown-{i}", "name": f"Account {i}"} for i in range(1, 5001)
    ]
    operator = AddAccountsToListOperator(
        task_id="add",
        list_id=list_id,
        accounts=rows,
        default_crm_org_id=ORG,
        batch_size=250,
        max_in_flight=max_in_flight,
        rejects_base=str(tmp_path / "state"),
    )
    summary = operator.execute(_context(tmp_path))

    known = {r["id"] for r in rows if not r["id"].startswith("unknown")}
    assert _member_ids(abm, list_id) == known
    assert (summary["sent"], summary["added"], summary["batches"]) == (5000, len(known), 20)
    assert summary["not_found"] == 5000 - len(known)
    rejects = _rejects(summary["rejects_path"])
    assert sorted(int(r["record"]) for r in rejects) == [i for i in range(1, 5001) if i % 3 == 0]
    assert {r["reason"] for r in rejects} == {
        "not found: the service does not know this account (accountsNotFound)"
    }


def test_a_failed_request_stops_the_sync_with_the_error(abm, tmp_path):
    """A request that keeps failing ends the task with the API error; nothing after it is sent."""
    list_id = _make_list(abm, tmp_path)
    abm.inject_fault(
        method="POST", path=f"/accountLists/v2/accountLists/{list_id}/accounts/add", kind="status", status=401
    )
    operator = AddAccountsToListOperator(
        task_id="add",
        list_id=list_id,
        accounts=[{"id": f"001{i:012d}"} for i in range(1, 10_001)],
        default_crm_org_id=ORG,
        batch_size=100,
        max_in_flight=4,
        max_attempts=1,
        rejects_base=str(tmp_path / "state"),
    )
    with pytest.raises(Exception, match="401"):
        operator.execute(_context(tmp_path))
    sent = [
        r
        for r in abm.requests_seen()
        if r["method"] == "POST" and r["path"].endswith("/accounts/add") and r["origin"] == "api"
    ]
    # The failed request, and at most the few already in flight beside it, never the 100 batches.
    assert 1 <= len(sent) <= 8


@pytest.mark.parametrize(("status", "final"), [(404, True), (400, True), (503, False)])
def test_an_error_no_retry_can_fix_fails_the_task_without_retries(abm, tmp_path, status, final):
    """A 404 (no such list) or a 400 fails the task for good; a 5xx past max_attempts stays retryable."""
    list_id = _make_list(abm, tmp_path)
    abm.inject_fault(
        method="POST",
        path=f"/accountLists/v2/accountLists/{list_id}/accounts/remove",
        kind="status",
        status=status,
        count=5,
    )
    operator = RemoveAccountsFromListOperator(
        task_id="remove",
        list_id=list_id,
        accounts=[{"id": "001000000000001"}],
        max_attempts=1,
        rejects_base=str(tmp_path / "state"),
    )
    with pytest.raises(Exception, match=str(status)) as info:
        operator.execute(_context(tmp_path))
    assert isinstance(info.value, AirflowFailException) is final
    if final:
        assert f"remove accounts on list {list_id!r}" in str(info.value)


def test_max_in_flight_is_checked_when_the_dag_is_parsed():
    with pytest.raises(ValueError, match="max_in_flight must be between 1 and 8, got 0"):
        AddAccountsToListOperator(task_id="add", list_id="l-1", accounts=[], max_in_flight=0)


@pytest.mark.parametrize("fail", [False, True])
def test_accounts_stream_with_fewer_collector_passes_and_thresholds_come_back(abm, tmp_path, fail):
    """While rows stream the young threshold is raised (``common.collector``); after, it is as before."""
    import gc

    from abm_provider.common.collector import STREAMING_THRESHOLD

    list_id = _make_list(abm, tmp_path)
    if fail:
        path = f"/accountLists/v2/accountLists/{list_id}/accounts/add"
        abm.inject_fault(method="POST", path=path, kind="status", status=401)
    seen: list[tuple[int, int, int]] = []

    def accounts() -> Any:
        for i in range(1, 2_001):
            if i % 50 == 0:
                seen.append(gc.get_threshold())
            yield {"id": f"001{i:012d}"}

    before = gc.get_threshold()
    operator = AddAccountsToListOperator(
        task_id="add",
        list_id=list_id,
        accounts=accounts(),
        default_crm_org_id=ORG,
        batch_size=100,
        max_attempts=1,
        rejects_base=str(tmp_path / "state"),
    )
    if fail:
        with pytest.raises(Exception, match="401"):
            operator.execute(_context(tmp_path))
    else:
        assert operator.execute(_context(tmp_path))["sent"] == 2_000
    assert seen and all(t[0] >= STREAMING_THRESHOLD for t in seen)
    assert gc.get_threshold() == before


def test_create_operators_push_their_ids_under_their_own_keys(abm: Any, tmp_path: Path) -> None:
    """``create_folder.output["folder_id"]`` and ``create_list.output["list_id"]`` work in a DAG."""
    pushed: dict[str, Any] = {}
    context = _context(tmp_path)
    context["ti"].xcom_push = lambda key, value: pushed.__setitem__(key, value)
    folder = CreateAccountListFolderOperator(task_id="f", folder_name="Keys").execute(context)
    found = CreateAccountListOperator(task_id="l", list_name="Top", folder_id=folder["folderId"]).execute(
        context
    )
    assert pushed == {"folder_id": folder["folderId"], "list_id": found["listId"]}
    assert set(folder) == {"folderId", "displayName", "folderAccess"}
    assert set(found) == {"listId", "listName", "folderId"}
