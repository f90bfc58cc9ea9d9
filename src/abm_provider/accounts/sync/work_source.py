"""A sync's source that is already in the state database: rows of a work table, numbered, read in place.

The audience sync (:mod:`abm_provider.accounts.audiences`) copies its one source into a work table of
the state connection, once, and hands each of its lists the rows assigned to it. Those rows keep the
record numbers they had in the user's source, so a refused row names the row the user wrote. The
stager reads such a source in the warehouse (:attr:`~abm_provider.accounts.sources.WarehouseQuery.numbered`),
or, where the rules cannot be run in SQL, page by page through the state connection itself: a work
table is temporary, and no other connection sees it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from abm_provider.accounts.sources import OpenedSource, WarehouseQuery
from abm_provider.accounts.sync.statements.binding import text
from abm_provider.accounts.sync.statements.staging import page_after
from abm_provider.accounts.validation import SourceRow

if TYPE_CHECKING:
    from abm_provider.accounts.sync.database import StateDatabase
    from abm_provider.warehouse.dialects import Dialect


@dataclass(frozen=True)
class StateQuerySource:
    """The rows of ``relation`` (a ``SELECT`` of a work table whose first column is the record number),
    with their ``columns``, on the state database ``db``."""

    db: StateDatabase
    relation: str
    columns: Sequence[str]
    description: str = "audience's rows"
    page: int = 50_000
    #: How many rows ``relation`` has, where the caller counted them already.
    rows: int | None = None

    def query_on(self, conn_id: str, dialect: Dialect) -> WarehouseQuery | None:
        """The rows as the state connection reads them in place (they are on no other)."""
        return WarehouseQuery(self.relation, None, is_table=True, numbered=True, rows=self.rows)

    @contextmanager
    def open(self) -> Iterator[OpenedSource]:
        """The rows, read a page at a time by record number on the state connection."""
        yield OpenedSource(self.columns, self._rows())

    def _rows(self) -> Iterator[SourceRow]:
        selected = ", ".join(self.db.dialect.quote(c) for c in self.columns)
        after = 0
        while True:
            rows = self.db.rows(page_after(text(f"({self.relation})"), selected, after, self.page))
            for record, *values in rows:
                yield SourceRow(int(record), None, dict(zip(self.columns, values, strict=True)))
            if len(rows) < self.page:
                return
            after = int(rows[-1][0])
