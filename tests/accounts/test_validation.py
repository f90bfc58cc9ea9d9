"""``abm_provider.accounts.validation``: a row to an account payload or a reason, the column map, batches.

No emulator here: these pin the behaviour the operators build on, so a failure points at the piece.
"""

from __future__ import annotations

import pytest

from abm_provider.accounts.sources import (
    IterableSource,
)
from abm_provider.accounts.validation import AccountValidator, SourceRow, iter_batches, normalise_column_map

GOOD = "001000000000001"

# --- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "reason_start"),
    [
        ({"name": "x"}, "missing id (no column 'id')"),
        ({"id": None}, "missing id (null)"),
        ({"id": 1234}, "id must be a string, got int"),
        ({"id": ""}, "empty id"),
        ({"id": "   "}, "empty id"),
        ({"id": "0" * 256}, "id is 256 characters"),
        ({"id": "001 000"}, "id contains whitespace"),
        ({"id": "001\x00abc"}, "id contains whitespace or control"),
        ({"id": "001\u00a0abc"}, "id contains whitespace or control"),
        ({"id": "001-\u2028x"}, "id contains whitespace or control"),
        ({"id": GOOD, "name": 5}, "name must be a string, got int"),
        ({"id": GOOD, "crmOrgId": ["a"]}, "crmOrgId must be a string, got list"),
        ({"id": GOOD, "name": "a\x01b"}, "name contains control characters"),
        ({"id": GOOD, "name": "Zoë \x7f"}, "name contains control characters"),
        ({"id": GOOD, "crmType": "HUBSPOT"}, "unknown crmType 'HUBSPOT'"),
        ({"id": GOOD, "crmType": "salesforce"}, "unknown crmType 'salesforce'"),
        ({"id": GOOD, "crmType": 3}, "crmType must be a string, got int"),
        (["001", "x"], "row is not a mapping"),
    ],
)
def test_validator_rejects_with_reason(row, reason_start):
    account, reason = AccountValidator(default_crm_org_id="00D1").validate(row)
    assert account is None
    assert reason is not None and reason.startswith(reason_start), reason


@pytest.mark.parametrize("account_id", ["001-abc_X.1", "Ünïcode-ID", "a/b:c"])
@pytest.mark.parametrize("name", ["Acme\tInc", "Café\nLyon", "Zoë – “Tier 1”"])
def test_validator_accepts_ids_and_names_the_fast_checks_pass_to_the_pattern(account_id, name):
    """Not alphanumeric, or not printable, is not yet wrong: tabs and newlines are allowed in names."""
    account, reason = AccountValidator(default_crm_org_id="00D1").validate({"id": account_id, "name": name})
    assert reason is None and account is not None
    assert (account["id"], account["name"]) == (account_id, name)


def test_validator_needs_only_an_id_and_trims():
    """The service fills a missing crmOrgId (the customer's org) and crmType (SALESFORCE) itself."""
    validator = AccountValidator()
    assert validator.default_crm_type is None and validator.default_crm_org_id is None
    assert validator.validate({"id": GOOD}) == ({"id": GOOD}, None)
    row = {"id": f"  {GOOD} ", "name": " Acme, Inc ", "crmOrgId": "", "crmType": " ", "x": 1}
    assert validator.validate(row) == ({"id": GOOD, "name": "Acme, Inc"}, None)
    account, _ = validator.validate({"id": GOOD, "crmType": "SALESFORCE", "crmOrgId": " 00D1 "})
    assert account == {"id": GOOD, "crmOrgId": "00D1", "crmType": "SALESFORCE"}


def test_validator_defaults_fill_only_what_a_row_lacks():
    validator = AccountValidator(default_crm_org_id=" 00D9 ", default_crm_type="SALESFORCE")
    row = {"id": f"  {GOOD} ", "name": " Acme, Inc ", "crmOrgId": "", "x": 1}
    account, reason = validator.validate(row)
    assert reason is None
    assert account == {"id": GOOD, "name": "Acme, Inc", "crmOrgId": "00D9", "crmType": "SALESFORCE"}
    account, _ = validator.validate({"id": GOOD, "crmOrgId": "00D1"})
    assert account == {"id": GOOD, "crmOrgId": "00D1", "crmType": "SALESFORCE"}
    # the org default is not sent where the request has no crmOrgId field
    remove = AccountValidator(fields=("id", "crmType"), default_crm_org_id="00D9")
    assert remove.validate({"id": GOOD}) == ({"id": GOOD}, None)
    with pytest.raises(ValueError, match="default_crm_type 'HUBSPOT' is not a known crmType"):
        AccountValidator(default_crm_type="HUBSPOT")


def test_validator_column_map_and_remove_fields():
    validator = AccountValidator(
        {"id": "account_id", "name": "account_name"}, fields=("id", "crmOrgId", "crmType")
    )
    account, reason = validator.validate({"account_id": GOOD, "account_name": 7, "crmOrgId": "org"})
    # name is not part of a remove request, so a bad name does not stop the removal
    assert reason is None
    assert account == {"id": GOOD, "crmOrgId": "org"}
    assert validator.validate({"id": GOOD})[1] == "missing id (no column 'account_id')"


def test_column_map_rejects_unknown_fields_and_reports_missing_columns():
    with pytest.raises(ValueError, match="unknown keys \\['crmorgid'\\]"):
        normalise_column_map({"crmorgid": "org"})
    with pytest.raises(ValueError, match="non-empty column name"):
        normalise_column_map({"id": ""})
    validator = AccountValidator({"id": "acct", "name": "nm"})
    assert validator.missing_columns(["acct", "nm"]) == []
    assert validator.missing_columns(["id", "name"]) == ["acct", "nm"]
    # default columns that are absent are fine: only id is required
    assert AccountValidator().missing_columns(["id"]) == []


# --- batching --------------------------------------------------------------------------------------


def test_iter_batches_splits_and_routes_invalid_rows_in_order():
    rows = []
    for n in range(1, 2351):
        data = {"id": f"001{n:012d}"} if n % 500 else {"id": None}
        rows.append(SourceRow(n, None, data))
    invalid = []
    batches = list(iter_batches(rows, AccountValidator(default_crm_org_id="00D1"), 1000, invalid.append))
    assert [len(b) for b in batches] == [1000, 1000, 346]
    assert [i.row.row_number for i in invalid] == [500, 1000, 1500, 2000]
    assert all(i.reason == "missing id (null)" for i in invalid)
    # each account keeps the row it came from
    account, row = batches[1][0]
    assert account["id"] == f"001{row.row_number:012d}"
    with pytest.raises(ValueError, match="between 1 and 1000"):
        list(iter_batches(rows, AccountValidator(), 1001, invalid.append))


def test_iter_batches_reads_lazily_one_batch_ahead_at_most():
    consumed = 0

    def endless():
        nonlocal consumed
        n = 0
        while True:
            n += 1
            consumed += 1
            yield {"id": f"001{n:012d}"}

    with IterableSource(endless()).open() as opened:
        batches = iter_batches(opened.rows, AccountValidator(default_crm_org_id="00D1"), 250, lambda _: None)
        first = next(batches)
        assert len(first) == 250
        assert consumed == 250
        next(batches)
        assert consumed == 500
