"""The column rules as SQL, for the loaders whose database checks staged rows itself.

DuckDB and PostgreSQL check every staged row in one statement; the generic path checks rows in
Python while it stages them, so it has no SQL form of the rules. A dialect that can is a
``SqlValidated``, and the load flow asks for the rules' SQL only of those.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from abm_provider.warehouse.dialects.base import Dialect
from abm_provider.warehouse.schema import Kind

if TYPE_CHECKING:
    from abm_provider.warehouse.checks import ColumnPlan


class SqlValidated(Dialect):
    """A dialect whose staged rows are checked in SQL, by the database that holds them."""

    @abstractmethod
    def valid_sql(self, column: str, kind: Kind) -> str:
        """SQL that is true when ``column`` (text, not NULL) satisfies the kind's rule."""

    def reason_sql(self, plan: ColumnPlan, keys: Sequence[str]) -> str:
        """A CASE that names the first broken rule of a staged row, or is NULL for a row that passes."""
        quote = self.quote
        # A quoted empty field ("") is staged as '' by the bulk readers but as NULL by the Python
        # fallbacks and the generic path; an empty key is missing on every path alike.
        whens = [
            f"WHEN {quote(k)} IS NULL OR {quote(k)} = '' THEN 'missing value in key column {k}'" for k in keys
        ]
        for name in plan.header:
            kind = plan.kinds[name]
            if kind.pattern is None:
                continue
            whens.append(
                f"WHEN {quote(name)} IS NOT NULL AND NOT ({self.valid_sql(quote(name), kind)}) "
                f"THEN 'column {name}: expected {kind.describe()}, got ' || {quote(name)}"
            )
        return f"CASE {' '.join(whens)} END" if whens else "CAST(NULL AS TEXT)"
