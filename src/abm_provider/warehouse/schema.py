"""Typed columns and natural keys of the export files, and the value rules every load path shares.

The three load paths (DuckDB, PostgreSQL, generic DB-API) must accept and reject exactly the same
values, or the same file would load differently depending on the warehouse. So each column kind
carries one regular expression that the databases evaluate in SQL and the generic path evaluates in
Python, plus the Python conversion the generic path binds. Regular expressions rather than the
databases' own casts because the casts disagree: DuckDB rounds ``1.005`` into ``DECIMAL(18,2)``,
PostgreSQL accepts ``' 7 '`` as a BIGINT, and neither is what the file format
(docs/service-behaviour.md "CSV files") promises.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from typing import Any

#: Columns the loader adds to every target table, so a reader can tell which execution wrote a row.
EXECUTION_ID_COLUMN = "_execution_id"
LOADED_AT_COLUMN = "_loaded_at"
LINEAGE_COLUMNS: tuple[str, ...] = (EXECUTION_ID_COLUMN, LOADED_AT_COLUMN)
#: The temporary table a file is staged in, one per connection.
STAGE_TABLE = "_abm_stage"

#: Header names become SQL identifiers, so only plain identifiers are accepted.
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Kind(Enum):
    """What a column holds; decides its SQL type, its accepted text and its Python value."""

    DATE = "date"
    COUNT = "count"
    MONEY = "money"
    TEXT = "text"

    @property
    def sql_type(self) -> str:
        """The column's standard SQL type (a dialect may spell it otherwise: ``Dialect.column_type``)."""
        return COLUMN_TYPES[self].sql

    def arrow_type(self) -> Any:
        """The column's pyarrow type, the same type as :attr:`sql_type` (the Parquet files' columns)."""
        import pyarrow as pa  # only the Parquet conversion and the pre-scan need it

        column = COLUMN_TYPES[self]
        factory: Callable[..., Any] = getattr(pa, column.arrow)
        return factory(*column.arrow_args)

    @property
    def pattern(self) -> str | None:
        """Full-match regular expression the text must satisfy; ``None`` accepts any text."""
        return _PATTERNS[self]

    def describe(self) -> str:
        return _DESCRIPTIONS[self]


@dataclass(frozen=True)
class ColumnType:
    """One column kind's type, written once: its standard SQL spelling and the pyarrow type that holds
    the same values (``arrow`` names the ``pyarrow`` factory, ``arrow_args`` its arguments)."""

    sql: str
    arrow: str
    arrow_args: tuple[int, ...] = ()


#: Money's precision and scale, in SQL and in Parquet alike.
MONEY_DIGITS, MONEY_PLACES = 18, 2

#: The types of the export files' columns: the warehouse tables' SQL types and the Parquet files'
#: Arrow types both come from here, so a file converted to Parquet holds what a load would store.
COLUMN_TYPES: Mapping[Kind, ColumnType] = {
    Kind.DATE: ColumnType("DATE", "date32"),
    Kind.COUNT: ColumnType("BIGINT", "int64"),
    Kind.MONEY: ColumnType(
        f"DECIMAL({MONEY_DIGITS},{MONEY_PLACES})", "decimal128", (MONEY_DIGITS, MONEY_PLACES)
    ),
    Kind.TEXT: ColumnType("TEXT", "string"),
}

# Years 0001-9999 (both databases and Python agree on that range); 18 digits always fit a BIGINT;
# DECIMAL(18,2) leaves 16 digits before the point.
_PATTERNS: dict[Kind, str | None] = {
    Kind.DATE: (
        r"(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})"  # year 0001-9999
        r"-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    ),
    Kind.COUNT: r"-?[0-9]{1,18}",
    Kind.MONEY: rf"-?[0-9]{{1,{MONEY_DIGITS - MONEY_PLACES}}}(\.[0-9]{{1,{MONEY_PLACES}}})?",
    Kind.TEXT: None,
}
_DESCRIPTIONS = {
    Kind.DATE: "a date YYYY-MM-DD",
    Kind.COUNT: "an integer",
    Kind.MONEY: f"a decimal with at most {MONEY_PLACES} places",
    Kind.TEXT: "text",
}


_CONVERTERS: dict[Kind, Callable[[str], Any]] = {
    Kind.DATE: dt.date.fromisoformat,
    Kind.COUNT: int,
    Kind.MONEY: Decimal,
    Kind.TEXT: str,
}
_COMPILED = {kind: re.compile(p) for kind, p in _PATTERNS.items() if p is not None}


def convert(kind: Kind, text: str) -> Any:
    """Return the Python value of ``text`` for the generic path; raise ``ValueError`` naming the rule."""
    compiled = _COMPILED.get(kind)
    if compiled is not None and not compiled.fullmatch(text):
        raise ValueError(f"expected {kind.describe()}")
    try:
        return _CONVERTERS[kind](text)
    except (ValueError, ArithmeticError) as exc:
        raise ValueError(f"expected {kind.describe()}") from exc


@dataclass(frozen=True)
class ExportSchema:
    """Columns (in file order) and natural key of one export type."""

    export_type: str
    columns: tuple[tuple[str, Kind], ...]
    natural_key: tuple[str, ...]

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)

    def kinds(self) -> dict[str, Kind]:
        return dict(self.columns)

    @property
    def day_column(self) -> str | None:
        """The date column of the natural key: the day a row is about, and the partition a load
        replaces; ``None`` when the key has none."""
        kinds = self.kinds()
        return next((name for name in self.natural_key if kinds.get(name) is Kind.DATE), None)


#: Columns both export types share: the day, the tactic, and what was delivered.
_DAY = (("date", Kind.DATE),)
_TACTIC = (("tactic_id", Kind.TEXT), ("tactic_name", Kind.TEXT))
_DELIVERY = (("impressions", Kind.COUNT), ("clicks", Kind.COUNT), ("spend", Kind.MONEY))

EXPORT_SCHEMAS: Mapping[str, ExportSchema] = {
    "TACTIC_PERFORMANCE": ExportSchema(
        export_type="TACTIC_PERFORMANCE",
        columns=(*_DAY, ("campaign_id", Kind.TEXT), ("campaign_name", Kind.TEXT), *_TACTIC, *_DELIVERY),
        natural_key=("date", "tactic_id"),
    ),
    "DISPLAY_TACTIC_ACCOUNT_PERFORMANCE": ExportSchema(
        export_type="DISPLAY_TACTIC_ACCOUNT_PERFORMANCE",
        columns=(
            *_DAY,
            *_TACTIC,
            ("account_id", Kind.TEXT),
            ("account_name", Kind.TEXT),
            ("crm_org_id", Kind.TEXT),
            *_DELIVERY,
            ("page_views", Kind.COUNT),
            ("engaged_visitors", Kind.COUNT),
        ),
        natural_key=("date", "tactic_id", "account_id"),
    ),
}


def export_column_kinds() -> dict[str, Kind]:
    """The kind of every column the export types document, by name (a name means the same in each)."""
    kinds: dict[str, Kind] = {}
    for schema in EXPORT_SCHEMAS.values():
        for name, kind in schema.columns:
            if kinds.setdefault(name, kind) is not kind:
                raise ValueError(f"column {name!r} has two kinds: {kinds[name].value} and {kind.value}")
    return kinds


def export_schema(export_type: str) -> ExportSchema:
    """Return the schema of a known export type, or raise naming the known ones."""
    try:
        return EXPORT_SCHEMAS[export_type]
    except KeyError:
        known = ", ".join(sorted(EXPORT_SCHEMAS))
        raise ValueError(f"export_type {export_type!r} is not known; known types: {known}") from None


def check_identifier(name: str, what: str) -> str:
    """Return ``name`` if it is a plain SQL identifier, else raise naming it (it is spliced into SQL)."""
    if not IDENTIFIER.fullmatch(name):
        raise ValueError(f"{what} {name!r} is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)")
    return name


#: Standard SQL's quoting of an identifier (``{}`` is the name).
STANDARD_QUOTE = '"{}"'


def quote(name: str, form: str = STANDARD_QUOTE) -> str:
    """Quote an identifier already checked by :func:`check_identifier`, as ``form`` says.

    The one quoting function: standard SQL's ``"`` by default (DuckDB's, PostgreSQL's, and what has
    no connection to ask, as :attr:`TableName.sql`), or a dialect's own form
    (:attr:`abm_provider.warehouse.dialects.base.Dialect.quote_format`, MySQL's backquote).
    """
    return form.format(name)


@dataclass(frozen=True)
class TableName:
    """A target table, optionally schema-qualified (``schema.table``)."""

    schema: str | None
    name: str

    @classmethod
    def parse(cls, text: str) -> TableName:
        parts = text.strip().split(".")
        if len(parts) > 2 or not all(parts):
            raise ValueError(f"table {text!r} must be 'table' or 'schema.table'")
        for part in parts:
            check_identifier(part, "table name part")
        return cls(parts[0], parts[1]) if len(parts) == 2 else cls(None, parts[0])

    def sibling(self, name: str) -> TableName:
        """Another table in the same schema (the ledger lives next to the data it describes)."""
        return TableName(self.schema, check_identifier(name, "table name"))

    @property
    def sql(self) -> str:
        return f"{quote(self.schema)}.{quote(self.name)}" if self.schema else quote(self.name)

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


def column_kinds(schema: ExportSchema, extra_columns: Sequence[str]) -> dict[str, Kind]:
    """Kinds of the schema's columns plus columns added on schema change (stored as text)."""
    kinds = schema.kinds()
    for name in extra_columns:
        kinds.setdefault(name, Kind.TEXT)
    return kinds
