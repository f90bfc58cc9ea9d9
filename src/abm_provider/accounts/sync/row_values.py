"""A source row as the list sync stages it: its values cleaned by the validator, or its reason and raw
values, and the hash rows are compared by between runs (which the warehouses compute too:
:func:`~abm_provider.accounts.sync.statements.staging.staged_hash_sql`)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.sync.state import KEY_LENGTH
from abm_provider.common.rejects import raw_json

if TYPE_CHECKING:
    from abm_provider.accounts.validation import AccountValidator, SourceRow


def row_hash(text: str) -> str:
    """The hash a row's values are compared by between runs: MD5, which the warehouses compute too."""
    return hashlib.md5(text.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()


def account_hash(account: Mapping[str, str]) -> str:
    """The hash of a valid account's values (the SQL path computes the same with ``md5_sql``)."""
    return row_hash(
        f"{account['id']}\x1f{account.get('name') or ''}\x1f{account.get('crmOrgId', '')}"
        f"\x1f{account.get('crmType') or ''}"
    )


def invalid_row_key(data: Any, validator: AccountValidator) -> tuple[str | None, str]:
    """The membership key an invalid row would have, so a member whose row went bad is not removed."""
    if not isinstance(data, Mapping):
        return None, ""
    raw_id = data.get(validator.column_map["id"])
    raw_org = data.get(validator.column_map["crmOrgId"])
    account_id = raw_id.strip() if isinstance(raw_id, str) and raw_id.strip() else None
    org = raw_org.strip() if isinstance(raw_org, str) else ""
    if (account_id is not None and len(account_id) > KEY_LENGTH) or len(org) > KEY_LENGTH:
        return None, ""  # too long to be a key of the state tables, so no member's key either
    return account_id, org


def staged_row(row: SourceRow, validator: AccountValidator) -> tuple[Any, ...]:
    """One source row as the stage holds it
    (:data:`~abm_provider.accounts.sync.statements.staging.STAGE_COLUMNS`)."""
    account, reason = validator.validate(row.data)
    if account is not None:
        org = account.get("crmOrgId", "")
        return (
            row.row_number,
            row.line,
            account["id"],
            org,
            account.get("crmType"),
            account.get("name"),
            account_hash(account),
            None,
            None,
        )
    raw = raw_json(row.data)
    account_id, org = invalid_row_key(row.data, validator)
    return (row.row_number, row.line, account_id, org, None, None, row_hash(raw), reason, raw)
