"""How the programme's source becomes tiers: every kind of source and exclusion, audiences the programme
does not map, numeric audiences, refused rows and columns, on DuckDB, PostgreSQL and MariaDB."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from abm_provider.compat import AirflowFailException
from accounts.audiences.audience_support import make_lists, on_service, sync, write_model
from accounts.sync.sync_support import ORG, account_id
from support.warehouses import Warehouse


def ids(*numbers: int) -> set[str]:
    return {account_id(n) for n in numbers}


def _write_tiers(path: Path, tiers: Sequence[tuple[int, str]]) -> None:
    """The file source: each ``(account number, tier)``, then a row whose id the validator refuses."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Account Id", "Name", "Org", "Tier"])
        for n, tier in tiers:
            writer.writerow([account_id(n), f"Account {n}", ORG, tier])
        writer.writerow(["001 BAD", "Bad id", ORG, "silver"])  # refused, naming its row in the file


def test_a_file_source_with_file_and_query_exclusions_is_tiered_through_python(
    abm: Any, warehouse: Warehouse, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "tiers.csv"
    tiers = [(1, "gold"), (2, "gold"), (2, "silver"), (3, "silver"), (4, "silver"), (5, "silver")]
    _write_tiers(source, tiers)
    customers = tmp_path / "customers.csv"
    customers.write_text(f"id\n{account_id(4)}\n")
    write_model(warehouse, {"other": [5]}, [])  # account 5 is excluded by a query on the warehouse
    lists = {"gold": make_lists("File")["tier_1"], "silver": make_lists("File")["tier_2"]}
    from_file = {
        "accounts_path": str(source),
        "state_conn_id": "abm_warehouse",
        "audience_column": "Tier",
        "column_map": {"id": "Account Id", "name": "Name", "crmOrgId": "Org"},
        "max_rejected": None,
    }
    in_file = {"accounts_path": str(customers), "id_column": "id"}
    in_query = {
        "sql": f"SELECT account_id FROM {warehouse.name('model')} WHERE tier = 'other'",
        "id_column": "account_id",
    }
    summary = sync(warehouse, lists, "run-1", exclusions=[in_file, in_query], **from_file)
    assert on_service(abm, lists) == {"gold": ids(1, 2), "silver": ids(3)}
    rejected = warehouse.query(
        f"SELECT record, reason FROM {warehouse.name('abm_sync_rejects')} WHERE list_id = %s",
        [lists["silver"]],
    )
    assert [(int(r[0]), "whitespace" in r[1]) for r in rejected] == [(7, True)]  # the file's 7th row
    assert {e["audience"]: e["excluded"] for e in summary["lists"]} == {"gold": 0, "silver": 2}

    # The second run compares the file's rows with the members (where the database can): 3 is
    # promoted, and 5 no longer excluded.
    tiers[3] = (3, "gold")
    _write_tiers(source, tiers)
    capsys.readouterr()
    second = sync(warehouse, lists, "run-2", exclusions=[in_file], max_removals=None, **from_file)
    compared = "accounts changed" in capsys.readouterr().out
    assert compared is (warehouse.kind != "mariadb")
    assert on_service(abm, lists) == {"gold": ids(1, 2, 3), "silver": ids(5)}
    assert {(m["from"], m["to"]): m["accounts"] for m in second["moves"]} == {("silver", "gold"): 1}
    assert {e["audience"]: (e["rejected"], e["held"]) for e in second["lists"]} == {
        "gold": (0, 0),
        "silver": (0, 1),
    }


def test_numeric_audiences_unmapped_values_and_exclude_lists(
    abm: Any, warehouse: Warehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        (account_id(n), f"Account {n}", ORG, tier) for n, tier in ((1, 1), (2, 2), (3, 2), (4, 9), (5, 2))
    ]
    warehouse.execute(f"DROP TABLE IF EXISTS {warehouse.name('numbered')}")
    warehouse.execute(
        f"CREATE TABLE {warehouse.name('numbered')} (account_id VARCHAR(40), account_name VARCHAR(40), "
        "crm_org_id VARCHAR(40), tier INTEGER)"
    )
    for row in rows:
        warehouse.execute(f"INSERT INTO {warehouse.name('numbered')} VALUES (%s, %s, %s, %s)", list(row))
    # Another sync's list (kept on the same state tables) holds account 3: kept off the programme.
    other = make_lists("Other")["tier_1"]
    write_model(warehouse, {"tier_1": [3]}, [])
    sync(warehouse, {"tier_1": other}, "other-run", exclusions=[])
    lists = make_lists("Numeric")
    summary = sync(
        warehouse,
        {"1": lists["tier_1"], "2": lists["tier_2"]},
        "run-1",
        table=warehouse.name("numbered"),
        exclusions=[],
        exclude_lists=[other, "never-synced"],
    )
    assert on_service(abm, {"1": lists["tier_1"], "2": lists["tier_2"]}) == {"1": ids(1), "2": ids(2, 5)}
    assert summary["lists"][1]["excluded"] == 1
    log = capsys.readouterr().out  # Airflow's task logging writes there, not through caplog
    assert "exclude_lists names list never-synced, which has no members recorded" in log
    assert summary["totals"]["source_rows"] == 3  # the rows lists keep: tier 9 is on none, 3 excluded


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"audience_column": "segment"}, "no audience column 'segment'"),
        (
            {"sql": "SELECT account_id, account_name, crm_org_id, tier, tier AS abm_list FROM {model}"},
            "abm_list",
        ),
    ],
)
def test_a_source_the_programme_cannot_read_fails_before_anything_is_sent(
    abm: Any, warehouse: Warehouse, change: dict[str, str], message: str
) -> None:
    write_model(warehouse, {"tier_1": [1]}, [])
    lists = make_lists("Refused")
    if "sql" in change:
        change = {"sql": change["sql"].format(model=warehouse.name("model"))}
    with pytest.raises(AirflowFailException, match=message):
        sync(warehouse, lists, "run-1", **change)
    assert on_service(abm, lists) == {tier: set() for tier in lists}
