"""Each form of the sync's SQL a dialect can declare, run by whole syncs against the emulator.

The registered dialects run the sync suite on DuckDB (``qmark``, temporary tables, ``DELETE ... WHERE
EXISTS``), PostgreSQL (``format``) and MariaDB (``DELETE ... JOIN``). The forms no registered dialect
takes yet are run here by dialects made for the test, so a cloud warehouse that declares them starts
from SQL that works: the generic dialect on SQLite (the hook's placeholder); ordinary work tables and
``named`` values on SQLite; ordinary work tables in the state schema and ``pyformat`` values on
PostgreSQL. A dialect without multi-statement transactions is refused before anything runs.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sync_support import (
    COLUMN_MAP,
    COLUMNS,
    ORG,
    account_id,
    make_list,
    member_ids,
    open_sync_warehouse,
    rows_for,
    sync,
)

from abm_provider.accounts.sources import IterableSource
from abm_provider.accounts.sync import ListSync, StateTables, SyncOptions, database
from abm_provider.accounts.sync.database import StateDatabase
from abm_provider.accounts.validation import AccountValidator
from abm_provider.hooks.abm import AbmHook
from abm_provider.warehouse.dialects import check_declared
from abm_provider.warehouse.dialects.base import Dialect
from abm_provider.warehouse.dialects.generic import GenericDialect
from abm_provider.warehouse.dialects.postgres import PostgresDialect
from support.warehouses import SqliteTestHook, Warehouse


class OrdinaryNamedSqlite(GenericDialect):
    """SQLite as a warehouse without temporary tables whose driver takes ``:name`` values."""

    name = "ordinary_named_sqlite"
    options_type = GenericDialect.options_type
    capabilities = dataclasses.replace(
        GenericDialect.capabilities, temporary_tables=False, param_style="named"
    )

    def positional_marker(self) -> str:
        return "?"  # sqlite3 takes ? besides :name, and the loader's statements are positional


class OrdinaryPyformatPostgres(PostgresDialect):
    """PostgreSQL as a warehouse without temporary tables whose driver takes ``%(name)s`` values."""

    name = "ordinary_pyformat_postgres"
    options_type = PostgresDialect.options_type
    capabilities = dataclasses.replace(
        PostgresDialect.capabilities, temporary_tables=False, param_style="pyformat"
    )

    def positional_marker(self) -> str:
        return "%s"  # psycopg takes %s besides %(name)s


class NoTransactions(GenericDialect):
    """A warehouse that commits each statement by itself."""

    name = "no_transactions"
    options_type = GenericDialect.options_type
    capabilities = dataclasses.replace(GenericDialect.capabilities, multi_statement_transactions=False)


@pytest.fixture
def executed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The text of every statement the sync runs through its state database (its own, and the copy of
    a source query)."""
    seen: list[str] = []
    execute, run_query = StateDatabase.execute, StateDatabase.run_query

    def executed(self: StateDatabase, statement: Any, params: Any = ()) -> int:
        seen.append(statement.bound(self.style)[0] if hasattr(statement, "bound") else str(statement))
        return execute(self, statement, params)

    def copied(self: StateDatabase, text: str, parameters: Any) -> None:
        seen.append(text)
        run_query(self, text, parameters)

    monkeypatch.setattr(StateDatabase, "execute", executed)
    monkeypatch.setattr(StateDatabase, "run_query", copied)
    yield seen


def _use(monkeypatch: pytest.MonkeyPatch, cls: type[Dialect]) -> None:
    """The state database gets ``cls`` for whatever hook it is given."""
    check_declared(cls)  # the registry would take it
    monkeypatch.setattr(database, "dialect_for", lambda hook, **_: cls(hook))


def _sync_sqlite(path: Path, list_id: str, run_id: str, ids: list[int], **options: Any) -> dict[str, Any]:
    """A whole run of ``ListSync`` with its state in the SQLite file ``path``; the source is ``ids``, then
    a row repeating the first id's key and a row without an id."""
    rows = [dict(zip(COLUMNS, row, strict=True)) for row in rows_for(ids)]
    rows += [{**rows[0], "account_name": "Repeated"}, {"account_id": "", "account_name": "No id"}]
    db = StateDatabase(SqliteTestHook(path))
    try:
        sync_run = ListSync(
            db,
            StateTables.named(),
            SyncOptions(list_id=list_id, run_id=run_id, max_removals=None, max_rejected=None, **options),
            AccountValidator(COLUMN_MAP),
            AbmHook,
            logging.getLogger("test.forms"),
        )
        return sync_run.run(IterableSource(rows))
    finally:
        db.close()


def _synced_on_sqlite(tmp_path: Path) -> tuple[str, dict[str, Any], dict[str, Any]]:
    path = tmp_path / "state.sqlite"
    list_id = make_list()
    first = _sync_sqlite(path, list_id, "run_1", list(range(30)))
    second = _sync_sqlite(path, list_id, "run_2", list(range(10, 40)))
    resync = _sync_sqlite(path, list_id, "run_3", list(range(10, 40)), full_resync=True)
    assert (first["to_add"], first["added"], first["rejected"]) == (30, 30, 1)
    assert (second["to_add"], second["to_remove"], second["added"], second["removed"]) == (10, 10, 10, 10)
    assert second["rejected"] == 0 and second["held"] == 1  # the row without an id, refused before
    assert (resync["to_add"], resync["duplicates"], resync["state_count"]) == (30, 30, 30)
    tables = Warehouse("sqlite", "state_sqlite", path).tables()
    assert set(tables) == {f"abm_sync_{t}" for t in ("members", "plan", "rejects", "runs", "log")}
    return list_id, second, resync


def test_the_generic_dialect_syncs_through_its_hooks_placeholder(
    abm: Any, tmp_path: Path, executed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, GenericDialect)
    list_id, _, _ = _synced_on_sqlite(tmp_path)
    assert member_ids(abm, list_id) == {account_id(n) for n in range(10, 40)}
    assert any(text.startswith("CREATE TEMPORARY TABLE abm_sync_source_") for text in executed)
    assert any("list_id = ?" in text for text in executed)


def test_a_warehouse_without_temporary_tables_and_with_named_values_syncs(
    abm: Any, tmp_path: Path, executed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, OrdinaryNamedSqlite)
    list_id, _, _ = _synced_on_sqlite(tmp_path)
    assert member_ids(abm, list_id) == {account_id(n) for n in range(10, 40)}
    assert not any("TEMPORARY" in text for text in executed)
    assert any(text.startswith('CREATE TABLE "abm_sync_source_') for text in executed)
    assert any("list_id = :p1" in text for text in executed)
    assert not any("?" in text for text in executed)


@pytest.fixture
def postgres(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Warehouse]:
    """A schema of its own on the test PostgreSQL as ``abm_warehouse``."""
    with open_sync_warehouse("postgres", tmp_path, monkeypatch) as found:
        yield found


def test_work_tables_go_in_the_state_schema_where_the_warehouse_has_no_temporary_ones(
    abm: Any, postgres: Warehouse, executed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    warehouse = postgres
    _use(monkeypatch, OrdinaryPyformatPostgres)
    list_id = make_list()
    # The source is a table on the state connection: staged and compared with the members in SQL.
    warehouse.replace_table("targets", COLUMNS, rows_for(range(40)))
    first = sync(warehouse, list_id, "run_1")
    warehouse.replace_table("targets", COLUMNS, [*rows_for(range(10, 50)), ("", "No id", ORG)])
    second = sync(warehouse, list_id, "run_2", max_rejected=None)
    assert (first["added"], second["added"], second["removed"], second["rejected"]) == (40, 10, 10, 1)
    assert member_ids(abm, list_id) == {account_id(n) for n in range(10, 50)}
    for work in ("numbered", "diff"):  # the copy of the first run's source, the second's comparison
        assert any(t.startswith(f'CREATE TABLE "{warehouse.schema}"."abm_sync_{work}_') for t in executed)
    assert any("list_id = %(p1)s" in text for text in executed)
    left = [t for t in warehouse.tables() if re.fullmatch(r"abm_sync_.*_.*", t)]
    assert left == []  # every work table dropped


def test_a_warehouse_without_multi_statement_transactions_is_refused_naming_the_capability(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, NoTransactions)
    with pytest.raises(
        ValueError, match="no_transactions dialect declares multi_statement_transactions=False"
    ):
        StateDatabase(SqliteTestHook(tmp_path / "state.sqlite"))
    assert not (tmp_path / "state.sqlite").exists()  # refused before connecting
