"""The source staged in the warehouse (rules in SQL) and in Python stage the same rows, byte for byte.

A source that is a table on the state connection is validated and hashed by SQL where the database
has the rules (DuckDB, PostgreSQL, MySQL and MariaDB); every row the SQL does not prove plain goes
through the Python validator. Whichever way a row goes, the stage must hold what the Python path
writes for it: the same cleaned values, the same reason, the same hash, or the held and refused rows
of earlier runs would be sent again.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from sync_support import CONN_ID, ORG

from abm_provider.accounts.sources import SqlSource
from abm_provider.accounts.sync.database import StateDatabase
from abm_provider.accounts.sync.options import SyncOptions
from abm_provider.accounts.sync.row_values import account_hash
from abm_provider.accounts.sync.staging import Stager
from abm_provider.accounts.sync.statements.staging import STAGE_COLUMNS, stage_columns_sql, staged_hash_sql
from abm_provider.accounts.validation import AccountValidator
from abm_provider.warehouse.connections import sql_hook
from abm_provider.warehouse.schema import TableName
from support.warehouses import Warehouse

SOURCE_COLUMNS = ["account_id", "account_name", "crm_org_id", "crm_type"]
COLUMN_MAP = {"id": "account_id", "name": "account_name", "crmOrgId": "crm_org_id", "crmType": "crm_type"}
LONG = "a" * 255

#: Rows on both sides of each rule: the plain ones SQL stages, and every kind the validator must see.
ROWS: list[tuple[Any, ...]] = [
    ("001A", "Acme", ORG, "SALESFORCE"),
    ("001B", None, None, None),
    ("001C", "", "", ""),
    (" 001D", "Padded id", ORG, None),
    ("001E ", "Trailing space", ORG, None),
    ("00 1F", "Inner space", ORG, None),
    ("", "Empty id", ORG, None),
    (None, "No id", ORG, None),
    ("   ", "Blank id", ORG, None),
    (LONG, "Longest id", ORG, None),
    (LONG + "b", "Id too long", ORG, None),
    ("001\u00e9", "Accented id", ORG, None),
    ("001G", " Padded name ", ORG, None),
    ("001H", "Tab\tinside", ORG, None),
    ("001I", "Soci\u00e9t\u00e9 G\u00e9n\u00e9rale", ORG, None),
    ("001J", "Bell\x07name", ORG, None),
    ("001K", "x" * 256, ORG, None),
    ("001L", "x" * 255, ORG, None),
    ("001M", "   ", ORG, None),
    ("001N", "Nbsp end\u00a0", ORG, None),
    ("001O", "Org padded", f" {ORG} ", None),
    ("001P", "Lower type", ORG, "salesforce"),
    ("001Q", "Padded type", ORG, " SALESFORCE"),
    ("001R", "Other type", ORG, "HUBSPOT"),
    ("001S", "Blank type", ORG, "  "),
    ("001A", "Acme again", ORG, "SALESFORCE"),
    ("001T", "Line\nbreak", ORG, None),
    ("001U", "Unit\x1fsep", ORG, None),
    ("001V", "\u00c9cole", "", None),
]


def staged(db: StateDatabase, stage: str) -> list[tuple[Any, ...]]:
    """The stage's rows, each valid row's hash as the plan reads it (SQL staging leaves it to the plan)."""
    columns = [
        f"CASE WHEN s.reason IS NULL THEN {staged_hash_sql(db.dialect)} ELSE s.row_hash END"
        if c == "row_hash"
        else f"s.{c}"
        for c in STAGE_COLUMNS
    ]
    return db.rows(f"SELECT {', '.join(columns)} FROM {stage} s ORDER BY s.record")


def new_stage(db: StateDatabase) -> str:
    stage = f"test_stage_{uuid.uuid4().hex[:8]}"
    db.execute(f"CREATE TEMPORARY TABLE {stage} ({stage_columns_sql(db.dialect)})")
    return stage


@pytest.mark.parametrize(
    "validator",
    [
        AccountValidator(COLUMN_MAP),
        AccountValidator(COLUMN_MAP, default_crm_type="SALESFORCE", default_crm_org_id="00DDEFAULT"),
        AccountValidator({"id": "account_id"}, fields=("id", "name")),
    ],
    ids=["plain", "defaults", "id-and-name"],
)
def test_the_warehouse_and_python_stage_every_row_alike(
    warehouse: Warehouse, validator: AccountValidator, caplog: pytest.LogCaptureFixture
) -> None:
    warehouse.replace_table("targets", SOURCE_COLUMNS, ROWS, long_text=True)
    source = SqlSource(None, CONN_ID, table=TableName.parse(warehouse.name("targets")))
    db = StateDatabase(sql_hook(CONN_ID, "state_conn_id"))
    try:
        stager = Stager(
            db, SyncOptions(list_id="l", run_id="r", stage_rows=7), validator, logging.getLogger("t")
        )
        in_sql, in_python = new_stage(db), new_stage(db)
        with caplog.at_level(logging.INFO, logger="t"):
            assert stager.stage(source, in_sql).rows == len(ROWS)
        assert stager._stage_in_python(source, in_python) == len(ROWS)
        assert staged(db, in_sql) == staged(db, in_python)
    finally:
        db.close()
    used_sql = "staged in the warehouse" in caplog.text
    assert used_sql
    if used_sql:  # most rows are plain, and the SQL staged them: only the others reached Python
        assert "source rows the rules in SQL left to Python" in caplog.text


def test_a_plain_row_hashes_as_the_python_path_hashes_it(warehouse: Warehouse) -> None:
    """The hash of a plain row, read back, is the Python hash of its values (MD5 of the joined text)."""
    warehouse.replace_table("targets", SOURCE_COLUMNS, [("001A", "Acme", ORG, "SALESFORCE")])
    source = SqlSource(None, CONN_ID, table=TableName.parse(warehouse.name("targets")))
    db = StateDatabase(sql_hook(CONN_ID, "state_conn_id"))
    try:
        stage = new_stage(db)
        Stager(
            db, SyncOptions(list_id="l", run_id="r"), AccountValidator(COLUMN_MAP), logging.getLogger("t")
        ).stage(source, stage)
        (row,) = staged(db, stage)
    finally:
        db.close()
    account = {"id": "001A", "name": "Acme", "crmOrgId": ORG, "crmType": "SALESFORCE"}
    assert row[6] == account_hash(account)
    assert len(row[6]) == 32


def test_an_id_column_that_is_not_text_is_read_in_python_and_refused(warehouse: Warehouse) -> None:
    warehouse.execute(
        f"CREATE TABLE {warehouse.name('numbers')} (account_id INTEGER, account_name VARCHAR(20))"
    )
    warehouse.execute(f"INSERT INTO {warehouse.name('numbers')} VALUES (1, 'One')")
    source = SqlSource(None, CONN_ID, table=TableName.parse(warehouse.name("numbers")))
    db = StateDatabase(sql_hook(CONN_ID, "state_conn_id"))
    try:
        stage = new_stage(db)
        validator = AccountValidator({"id": "account_id", "name": "account_name"})
        Stager(db, SyncOptions(list_id="l", run_id="r"), validator, logging.getLogger("t")).stage(
            source, stage
        )
        (row,) = staged(db, stage)
    finally:
        db.close()
    assert row[7] == "id must be a string, got int 1"


def _sf(letter: str) -> str:
    """A well-formed account id (15 characters from ``001``), which the service knows."""
    return f"001{letter}{'0' * 11}"


#: The first source: plain rows, rows the SQL leaves to Python, and invalid ones.
FIRST: list[tuple[Any, ...]] = [
    (_sf("A"), "Acme", ORG, "SALESFORCE"),
    (_sf("B"), None, None, None),
    (_sf("C"), "", "", ""),
    (_sf("D"), "Dropped", ORG, None),
    (_sf("G"), "Padded later", ORG, None),
    (_sf("I"), "Soci\u00e9t\u00e9 G\u00e9n\u00e9rale", ORG, None),
    (_sf("L"), "x" * 255, ORG, None),
    (_sf("T"), "Line\nbreak", ORG, None),
    (_sf("V"), "\u00c9cole", "", None),
    (_sf("P"), "Lower type", ORG, "salesforce"),
    ("", "Empty id", ORG, None),
    (_sf("K"), "x" * 256, ORG, None),
]
#: The second: a name changed, a member's row gone bad, a padded id whose key is a member, a row
#: removed, a key given twice, and two new accounts; the invalid rows as they were.
CHANGED: list[tuple[Any, ...]] = [
    (_sf("A"), "Acme renamed", ORG, "SALESFORCE"),
    (_sf("B"), "\x07bad now", None, None),
    (_sf("C"), "", "", ""),
    (f" {_sf('G')}", "Padded later", ORG, None),
    (_sf("I"), "Soci\u00e9t\u00e9 G\u00e9n\u00e9rale", ORG, None),
    (_sf("L"), "x" * 255, ORG, None),
    (_sf("L"), "x" * 255, ORG, None),
    (_sf("T"), "Line\nbreak", ORG, None),
    (_sf("V"), "\u00c9cole", "", None),
    (_sf("W"), "New", ORG, "SALESFORCE"),
    (_sf("X"), "New too", None, None),
    (_sf("P"), "Lower type", ORG, "salesforce"),
    ("", "Empty id", ORG, None),
    (_sf("K"), "x" * 256, ORG, None),
]


def _plan_and_counts(warehouse: Warehouse, list_id: str, run_id: str) -> tuple[list[Any], list[Any]]:
    plan = warehouse.query(
        "SELECT action, seq, account_id, crm_org_id, crm_type, account_name, row_hash FROM "
        f"{warehouse.name('abm_sync_plan')} WHERE list_id = %s AND run_id = %s ORDER BY action, seq",
        [list_id, run_id],
    )
    counts = warehouse.query(
        "SELECT source_rows, to_add, to_remove, rejected, held FROM "
        f"{warehouse.name('abm_sync_runs')} WHERE list_id = %s AND run_id = %s",
        [list_id, run_id],
    )
    return [tuple(r) for r in plan], [tuple(r) for r in counts]


@pytest.mark.parametrize("given_as", ["table", "sql"])
def test_a_run_compared_with_the_members_first_plans_as_one_that_stages_every_row(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch, given_as: str
) -> None:
    """A source row equal to a member's recorded values is neither staged nor validated again; every
    other row is, and only the members no row equals may be removed. The plan, its counts and the
    rejects come out as when every row is staged."""
    from sync_support import make_list, sync

    from abm_provider.accounts.sync.staging import Stager

    list_id = make_list()
    options: dict[str, Any] = {"column_map": COLUMN_MAP, "max_rejected": None, "max_removals": None}
    if given_as == "sql":  # a query is numbered into a table once; a table is read where it is
        options["sql"] = f"SELECT * FROM {warehouse.name('targets')} WHERE account_name IS NULL OR 1 = 1"
    warehouse.replace_table("targets", SOURCE_COLUMNS, FIRST, long_text=True)
    first = sync(warehouse, list_id, "run_1", **options)
    assert (first["added"], first["rejected"]) == (9, 3)
    warehouse.replace_table("targets", SOURCE_COLUMNS, CHANGED, long_text=True)

    # A dry run's plan stays until the next run plans: each is read before the other is made.
    sync(warehouse, list_id, "compared", dry_run=True, **options)
    compared = _plan_and_counts(warehouse, list_id, "compared")
    with monkeypatch.context() as patched:
        staged_whole = Stager.stage
        patched.setattr(
            Stager, "stage", lambda self, source, stage, _members=None: staged_whole(self, source, stage)
        )
        sync(warehouse, list_id, "whole", dry_run=True, **options)
    assert compared == _plan_and_counts(warehouse, list_id, "whole")
    added = {row[2] for row in compared[0] if row[0] == "add"}
    removed = {row[2] for row in compared[0] if row[0] == "remove"}
    assert added == {_sf("W"), _sf("X")}
    # B's row went bad, so it stays; D left the source.
    assert removed == {_sf("D")}
