"""Account rows checked and batched for the Account Lists requests: validation, the column map, batches.

A source (:mod:`abm_provider.accounts.sources`) yields one :class:`SourceRow` at a time; the
:class:`AccountValidator` turns a row into the request payload or a reason a person can act on, and
:func:`iter_batches` groups valid accounts into batches of at most the API limit while invalid rows go
straight to the rejects writer (:mod:`abm_provider.common.rejects`). Nothing here talks to the API,
which keeps it testable without a server.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from abm_provider.common.arguments import check_text, check_whole
from abm_provider.hooks.endpoints import MAX_ACCOUNTS_PER_REQUEST as MAX_BATCH_SIZE
from abm_provider.hooks.endpoints import check_batch_size

__all__ = ["MAX_BATCH_SIZE", "check_batch_size"]

#: Fields of an account in the Account Lists v2 requests, in request order.
API_FIELDS: tuple[str, ...] = ("id", "name", "crmOrgId", "crmType")
#: Fields a remove request carries (the API takes no name there).
REMOVE_FIELDS: tuple[str, ...] = ("id", "crmOrgId", "crmType")
#: What the service assumes when a request leaves ``crmType`` out.
DEFAULT_CRM_TYPE = "SALESFORCE"
#: The only crmType the service documents; anything else would be refused or silently not found.
KNOWN_CRM_TYPES: frozenset[str] = frozenset({"SALESFORCE"})
#: Longest id/name/crmOrgId accepted. Salesforce ids are 15 or 18 characters; the limit is generous
#: so valid ids of other CRMs pass, while a wrong delimiter (a whole line in one field) is caught here
#: instead of failing a whole 1000-account request.
DEFAULT_MAX_FIELD_LENGTH = 255
#: The reason a not-found account is written with: the service's own word for it, for a search.
NOT_FOUND_REASON = "not found: the service does not know this account (accountsNotFound)"

_ID_FORBIDDEN = re.compile(r"[\s\x00-\x1f\x7f]")
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class SourceRow(NamedTuple):
    """One row as read from a source, with where it came from so a reject can point back at it.

    ``row_number`` is 1-based among data rows (a CSV header is not counted; it is the rejects file's
    ``record``). ``line`` is the physical
    line a CSV record starts on (records may span lines when a quoted value holds a newline); it is
    ``None`` for sources without lines. ``data`` is the row exactly as read, normally a mapping of
    source column names to values. A named tuple because one is built per source row: it is several
    times cheaper to make than a frozen dataclass, and as immutable.
    """

    row_number: int
    line: int | None
    data: Any


class MalformedRecord(list):  # type: ignore[type-arg]
    """The fields of a CSV record with the wrong number of fields, kept as read for the rejects file.

    A list subclass so the rejects writer records the original fields as a JSON array, while the
    validator recognises it and uses :meth:`reason`.
    """

    def __init__(self, values: list[str], expected: int) -> None:
        super().__init__(values)
        self.expected = expected

    def reason(self) -> str:
        """Say how the record is malformed, which is what the reader of the rejects file needs."""
        return f"malformed CSV record: expected {self.expected} fields, got {len(self)}"


@dataclass(frozen=True, slots=True)
class InvalidRow:
    """A row that is not sent, with the reason a person can act on."""

    row: SourceRow
    reason: str


def normalise_column_map(column_map: Mapping[str, str] | None) -> dict[str, str]:
    """Merge a user's ``{api_field: source_column}`` map onto the identity map, rejecting typos early.

    A misspelt API field (``"crmorgid"``) would otherwise be ignored and every account sent without
    that field, so unknown keys are an error at DAG parse time.
    """
    merged = {name: name for name in API_FIELDS}
    if not column_map:
        return merged
    unknown = sorted(set(column_map) - set(API_FIELDS))
    if unknown:
        raise ValueError(f"column_map has unknown keys {unknown}; its keys must be among {list(API_FIELDS)}")
    for api_field, column in column_map.items():
        if not isinstance(column, str) or not column:
            raise ValueError(f"column_map[{api_field!r}] must be a non-empty column name, got {column!r}")
        merged[api_field] = column
    return merged


class AccountValidator:
    """Turns a source row into the account payload for a request, or a reason it cannot be sent.

    The service answers ``400`` for a whole request when one account in it is malformed, which would
    fail 999 good accounts with it, and it reports an unknown id as "not found" only when the id is
    at least well formed. So every row is checked here first, and each problem gets a reason a person
    can fix the source from.
    """

    def __init__(
        self,
        column_map: Mapping[str, str] | None = None,
        *,
        fields: Sequence[str] = API_FIELDS,
        default_crm_type: str | None = None,
        crm_types: Iterable[str] = KNOWN_CRM_TYPES,
        max_field_length: int = DEFAULT_MAX_FIELD_LENGTH,
        default_crm_org_id: str | None = None,
    ) -> None:
        self.column_map = normalise_column_map(column_map)
        if default_crm_org_id is not None:
            default_crm_org_id = check_text(default_crm_org_id, "default_crm_org_id").strip()
        self.default_crm_org_id = default_crm_org_id
        self.fields = tuple(fields)
        self.crm_types = frozenset(crm_types)
        if default_crm_type is not None and default_crm_type not in self.crm_types:
            raise ValueError(
                f"default_crm_type {default_crm_type!r} is not a known crmType {sorted(self.crm_types)}"
            )
        self.default_crm_type = default_crm_type
        self.max_field_length = check_whole(max_field_length, "max_field_length", 1)
        self.id_column = self.column_map["id"]
        self._optional = [(f, self.column_map[f]) for f in ("name", "crmOrgId") if f in self.fields]
        # Only ``id`` is required by the service: it fills a missing crmOrgId with the customer's CRM
        # org and a missing crmType with SALESFORCE. ``default_crm_org_id`` still fills a missing org
        # here, for callers who key their own records by the org they sent.
        self._org_default = self.default_crm_org_id if "crmOrgId" in self.fields else None
        self._crm_type_column = self.column_map["crmType"] if "crmType" in self.fields else None

    def missing_columns(self, columns: Sequence[str]) -> list[str]:
        """Source columns the mapping needs that a source with a fixed column set lacks.

        Only the id column is required; the others are optional in the API, but a mapping that names
        a column the source does not have is almost always a typo, so those are reported too.
        """
        present = set(columns)
        needed = [self.column_map[f] for f in self.fields]
        explicit = [c for f, c in self.column_map.items() if f in self.fields and c != f]
        return [
            c for c in dict.fromkeys(needed) if c not in present and (c == self.id_column or c in explicit)
        ]

    def check_columns(self, columns: Sequence[str] | None, description: str) -> None:
        """Raise ``ValueError`` naming the missing columns and the fix, before anything is sent."""
        missing = self.missing_columns(columns) if columns is not None else []
        if missing:
            raise ValueError(
                f"The {description} has no column {missing} (columns: {list(columns or [])}); "
                "set column_map, e.g. column_map={'id': '<your id column>'}"
            )

    def validate(self, data: Any) -> tuple[dict[str, str] | None, str | None]:
        """Return ``(account, None)`` for a sendable row, or ``(None, reason)``."""
        # ``type(x) is ...`` first: this runs for every row, and ABC isinstance checks cost several
        # times more than the rest of the validation together.
        if type(data) is not dict:
            if isinstance(data, MalformedRecord):
                return None, data.reason()
            if not isinstance(data, Mapping):
                return None, f"row is not a mapping of column names to values (got {type(data).__name__})"
        raw_id = data.get(self.id_column)
        if raw_id is None:
            if self.id_column not in data:
                return None, f"missing id (no column {self.id_column!r})"
            return None, "missing id (null)"
        if type(raw_id) is not str and not isinstance(raw_id, str):
            return None, f"id must be a string, got {type(raw_id).__name__} {raw_id!r}"
        account_id = raw_id.strip()
        if not account_id:
            return None, "empty id"
        if len(account_id) > self.max_field_length:
            return (
                None,
                f"id is {len(account_id)} characters, over the limit of {self.max_field_length}",
            )
        # isalnum() is a fast, exact pass for the usual ids (no whitespace or control character can
        # be alphanumeric); the pattern decides the rest.
        if not account_id.isalnum() and _ID_FORBIDDEN.search(account_id):
            return None, "id contains whitespace or control characters"
        account = {"id": account_id}
        for api_field, column in self._optional:
            value = data.get(column)
            if value is None:
                continue
            if type(value) is not str and not isinstance(value, str):
                return None, f"{api_field} must be a string, got {type(value).__name__} {value!r}"
            value = value.strip()
            if not value:
                continue
            if len(value) > self.max_field_length:
                return None, (
                    f"{api_field} is {len(value)} characters, over the limit of {self.max_field_length}"
                )
            # A printable string holds no control character; only the others need the pattern.
            if not value.isprintable() and _CONTROL_CHARS.search(value):
                return None, f"{api_field} contains control characters"
            account[api_field] = value
        if self._crm_type_column is not None:
            crm_type = data.get(self._crm_type_column)
            if crm_type is None or (isinstance(crm_type, str) and not crm_type.strip()):
                if self.default_crm_type is not None:
                    account["crmType"] = self.default_crm_type
            elif not isinstance(crm_type, str):
                return None, f"crmType must be a string, got {type(crm_type).__name__} {crm_type!r}"
            elif crm_type.strip() not in self.crm_types:
                return None, f"unknown crmType {crm_type!r} (expected one of {sorted(self.crm_types)})"
            else:
                account["crmType"] = crm_type.strip()
        if self._org_default is not None and "crmOrgId" not in account:
            account["crmOrgId"] = self._org_default
        return account, None


def iter_batches(
    rows: Iterable[SourceRow],
    validator: AccountValidator,
    batch_size: int,
    on_invalid: Callable[[InvalidRow], None],
) -> Iterator[list[tuple[dict[str, str], SourceRow]]]:
    """Yield lists of at most ``batch_size`` valid accounts, each with the row it came from.

    Invalid rows are handed to ``on_invalid`` as they are met (so they reach the rejects file in
    source order and the caller can stop early), never batched. Keeping the source row next to its
    account is what lets a "not found" answer be written back with the original row and its number.
    """
    check_batch_size(batch_size)
    batch: list[tuple[dict[str, str], SourceRow]] = []
    validate = validator.validate
    for row in rows:
        account, reason = validate(row.data)
        if account is None:
            on_invalid(InvalidRow(row, reason or "invalid"))
            continue
        batch.append((account, row))
        if len(batch) >= batch_size:
            yield batch
            batch = []
    if batch:
        yield batch
