"""The moves table: one row per account a run moves between lists, removes as excluded, or keeps off.

``<prefix>moves`` sits beside the list sync's state tables and is created by the audience sync only. A
move is written with the plan, in the same transaction (the plan's removal from one list of the
programme and addition to another of the same key), so the run's summary and log can say what moved
from which tier to which even after the plan's rows are gone; a resumed run reads the same rows. The
run log (``<prefix>log``) still holds each list's added and removed accounts with the service's answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.audiences import move_statements as statements
from abm_provider.accounts.audiences.move_statements import EXCLUDED_FROM, KEPT_OFF, MOVED, REFUSED, WAITING
from abm_provider.warehouse.schema import TableName

if TYPE_CHECKING:
    from datetime import datetime

    from abm_provider.accounts.audiences.tiering import Tiering
    from abm_provider.accounts.sync.database import StateDatabase
    from abm_provider.accounts.sync.state import StateTables


def moves_table(tables: StateTables) -> TableName:
    """``<prefix>moves``, beside the state tables."""
    return TableName(tables.members.schema, tables.members.name.removesuffix("members") + "moves")


@dataclass
class Moves:
    """A run's moves on the programme's lists, counted: ``moved[(from, to)]``, those that wait
    ``waiting[(from, to)]`` (not made: the account is still on ``from``), those whose addition the
    service refused ``refused[(from, to)]`` (not made: the account is on neither), and per list those
    removed as excluded and those kept off it."""

    moved: dict[tuple[str, str], int] = field(default_factory=dict)
    waiting: dict[tuple[str, str], int] = field(default_factory=dict)
    refused: dict[tuple[str, str], int] = field(default_factory=dict)
    excluded_from: dict[str, int] = field(default_factory=dict)
    kept_off: dict[str, int] = field(default_factory=dict)

    def in_order(self, list_ids: Sequence[str]) -> list[tuple[tuple[str, str], int]]:
        """``((from, to), accounts)`` of each move, in the programme's priority order of their lists
        (a list not of the programme last), so a summary and a log read the same way every run."""
        place = {list_id: i for i, list_id in enumerate(list_ids)}

        def order(item: tuple[tuple[str, str], int]) -> tuple[int, int, str, str]:
            (source, target), _ = item
            return place.get(source, len(place)), place.get(target, len(place)), source, target

        return sorted(self.moved.items(), key=order)

    def moved_in(self, list_id: str) -> int:
        """Accounts the run moves onto ``list_id`` from another list of the programme."""
        return sum(n for (_, to), n in self.moved.items() if to == list_id)

    def moved_out(self, list_id: str) -> int:
        """Accounts the run moves off ``list_id`` to another list of the programme."""
        return sum(n for (source, _), n in self.moved.items() if source == list_id)

    def waiting_for(self, list_id: str) -> int:
        """Accounts whose move onto ``list_id`` waits: the service refused their removal elsewhere."""
        return sum(n for (_, to), n in self.waiting.items() if to == list_id)

    def excluded(self, list_id: str) -> int:
        """Accounts of ``list_id`` the run removes, or keeps off it, because they are excluded."""
        return self.excluded_from.get(list_id, 0) + self.kept_off.get(list_id, 0)


@dataclass(frozen=True)
class MovesLog:
    """Writes and reads the moves table of one programme's run."""

    db: StateDatabase
    tables: StateTables
    run_id: str
    list_ids: Sequence[str]

    @property
    def table(self) -> str:
        return self.db.dialect.table_sql(moves_table(self.tables))

    def create_sql(self) -> str:
        return statements.create_moves(self.db.dialect, self.table)

    def write(self, tiering: Tiering, at: datetime) -> None:
        """Replace the run's moves with what its plan (just written, same transaction) does, from the
        run's tiered table and its work tables (the run's removals are copied into ``removed`` first,
        and, where it removes any, its additions into ``added``)."""
        excluded, tiered, removed, added, outranked = (
            tiering.excluded,
            tiering.tiered,
            tiering.removed,
            tiering.added,
            tiering.outranked,
        )
        db, dialect, state = self.db, self.db.dialect, self.db.state_sql(self.tables)
        run_id, lists = self.run_id, self.list_ids
        db.execute(statements.delete_moves(self.table, run_id, lists))
        db.execute(statements.delete_kept_moves(state, self.table, run_id, lists))
        if db.execute(statements.insert_removed(state, removed, run_id, lists)) != 0:
            # A run that removes nothing (a first run) moves nothing and excludes no member.
            db.execute(statements.insert_added(state, added, run_id, lists))
            db.execute(
                statements.insert_moved(
                    dialect, self.table, removed, added, tiered, outranked, run_id, lists, at
                )
            )
            db.execute(statements.insert_excluded_from(dialect, self.table, removed, excluded, run_id, at))
        db.execute(
            statements.insert_kept_off(dialect, self.table, removed, tiered, outranked, run_id, lists, at)
        )

    def read(self) -> Moves:
        """The run's moves, counted."""
        moves = Moves()
        for kind, source, target, count in self.db.rows(
            statements.move_counts(self.table, self.run_id, self.list_ids)
        ):
            if kind == MOVED:
                moves.moved[(str(source), str(target))] = int(count)
            elif kind == WAITING:
                moves.waiting[(str(source), str(target))] = int(count)
            elif kind == REFUSED:
                moves.refused[(str(source), str(target))] = int(count)
            elif kind == EXCLUDED_FROM:
                moves.excluded_from[str(source)] = int(count)
            elif kind == KEPT_OFF:
                moves.kept_off[str(target)] = int(count)
        return moves

    def any_refused(self, run_id: str) -> bool:
        """Whether ``run_id`` counts a refused account on any of the programme's lists: if not, none of
        its removals was refused, and no move of it waits (one row each, read before any is marked)."""
        state = self.db.state_sql(self.tables)
        return bool(self.db.value(statements.refused_in_run(state, run_id, self.list_ids)))

    def mark_waiting(self, run_id: str, to_list: str) -> int:
        """Mark ``run_id``'s moves onto ``to_list`` whose account the service refused to remove from the
        list it was to leave (and whose addition is not sent yet) as waiting; how many of the run's
        moves onto ``to_list`` wait, these and any marked by an earlier try."""
        with self.db.transaction():
            self.db.execute(
                statements.mark_waiting(self.db.state_sql(self.tables), self.table, run_id, to_list)
            )
        return int(self.db.value(statements.count_waiting(self.table, run_id, to_list)) or 0)

    def mark_refused(self, run_id: str, to_list: str) -> int:
        """Mark ``run_id``'s moves onto ``to_list`` whose addition the service refused (every addition
        there sent); how many."""
        with self.db.transaction():
            marked = self.db.execute(
                statements.mark_refused(self.db.state_sql(self.tables), self.table, run_id, to_list)
            )
        return max(int(marked or 0), 0)

    def waiting_rows(self, run_id: str, to_list: str, first: int, last: int) -> Mapping[int, str]:
        """The plan numbers of ``run_id``'s additions ``first`` to ``last`` on ``to_list`` that wait, each
        with the list its account is still on."""
        state = self.db.state_sql(self.tables)
        rows = self.db.rows(statements.waiting_rows(state, self.table, run_id, to_list, first, last))
        return {int(seq): str(source) for seq, source in rows}

    def sample(self, source: str, target: str, count: int) -> list[str]:
        """Up to ``count`` accounts moved from ``source`` to ``target``, as ``id[@org]``."""
        rows = self.db.rows(statements.move_sample(self.table, self.run_id, source, target, count))
        return [f"{i}@{org}" if org else str(i) for i, org in rows]

    def forget_before(self, before: datetime) -> Any:
        """Drop the programme's moves logged before ``before``; how many went."""
        return self.db.execute(statements.forget_moves(self.table, before, self.list_ids))
