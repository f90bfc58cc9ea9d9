"""What an audience sync returns: an entry per list, the moves between them, and the programme's totals.

Read back from the runs table and the moves table, as the list sync's summary is, so a run resumed
after a crash reports the whole run. Counts and flags only, never an account: it goes to XCom.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.sync.summary import SUMMARY_KEYS, member_counts, read_summary

if TYPE_CHECKING:
    from abm_provider.accounts.audiences.guards import ProgrammeTrip
    from abm_provider.accounts.audiences.moves import Moves
    from abm_provider.accounts.sync.database import StateDatabase
    from abm_provider.accounts.sync.options import SyncOptions
    from abm_provider.accounts.sync.state import StateTables

#: The counts of each list's entry that the totals add up: the list sync's, and the audience's own.
TOTALLED: tuple[str, ...] = (
    *(key for key in SUMMARY_KEYS if key != "dry_run"),
    "held",
    "source_rows",
    "state_count",
    "moved_in",
    "waiting",
    "excluded",
)


def programme_summary(
    db: StateDatabase,
    tables: StateTables,
    tiers: Sequence[tuple[str, SyncOptions]],
    moves: Moves,
    tripped: ProgrammeTrip | None,
) -> dict[str, Any]:
    """``{"lists": [...], "moves": [...], "totals": {...}, "run_id", "mode", "dry_run", "guard",
    "guard_at"}``; ``tiers``: each audience's value and its list's options, in priority order."""
    lists: list[dict[str, Any]] = []
    members = member_counts(db, tables, [options.list_id for _, options in tiers])
    for value, options in tiers:
        entry = read_summary(db, tables, options, state_count=members[options.list_id])
        entry.pop("guard", None)  # the programme's guard decides, below
        for key in ("run_id", "mode"):
            entry.pop(key, None)
        list_id = options.list_id
        entry.update(
            audience=value,
            moved_in=moves.moved_in(list_id),
            moved_out=moves.moved_out(list_id),
            waiting=moves.waiting_for(list_id),
            excluded=moves.excluded(list_id),
        )
        lists.append(entry)
    value_of = {options.list_id: value for value, options in tiers}
    moved = [
        {
            "from": value_of.get(source, source),
            "to": value_of.get(target, target),
            "from_list": source,
            "to_list": target,
            "accounts": count,
        }
        for (source, target), count in moves.in_order([options.list_id for _, options in tiers])
    ]
    totals = {key: sum(int(entry[key]) for entry in lists) for key in TOTALLED}
    totals["moved"] = totals.pop("moved_in")
    first = tiers[0][1]
    return {
        "lists": lists,
        "moves": moved,
        "totals": totals,
        "run_id": first.run_id,
        "mode": first.mode,
        "dry_run": any(entry["dry_run"] for entry in lists),
        "guard": None if tripped is None else tripped.guard,
        "guard_at": None if tripped is None else tripped.where,
    }
