"""The guards of a programme: counted over all of its lists, then over each, before anything is sent.

A list sync's guards see one list. A programme's plan moves accounts between lists, so one list's
removals are often another's additions, and a fault upstream (a tier's filter broken, the model table
half loaded) shows on one list while its neighbours look fine. The programme's plan is checked whole,
in the transaction that writes it, before the first request:

- the programme: its removals against all of its recorded members (``max_removals``: a fraction of
  them, or a count of removals over all lists), and a source with no rows (``allow_empty_source``);
- each list: its removals against its own members, and a tier with members that no source row names
  any more (a list with neither members nor rows has nothing to lose). A tier whose rows are all
  outranked by a higher audience or excluded is not empty: its accounts moved or left on purpose, and
  ``max_removals`` decides, as for any re-tiering.

The first guard tripped stops every list: each plan is kept, marked ``blocked``, and nothing is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from abm_provider.accounts.sync.guards import Tripped, check_plan
from abm_provider.exceptions import SyncGuardTripped

if TYPE_CHECKING:
    from abm_provider.accounts.sync.options import SyncOptions
    from abm_provider.accounts.sync.plan import Written

#: Where a guard counted across the programme tripped.
PROGRAMME = "the programme"


@dataclass(frozen=True)
class ProgrammeTrip:
    """A guard the programme's plan did not pass, and where: the programme, or one audience's list."""

    where: str
    tripped: Tripped

    @property
    def guard(self) -> str:
        """The argument that stopped the run: ``"max_removals"`` or ``"allow_empty_source"``."""
        return self.tripped.guard

    def error(self, run_id: str, plan_table: str) -> SyncGuardTripped:
        """The task's failure: where, the figures, where the plans are, and how to let the run through."""
        return SyncGuardTripped(
            f"Audience sync stopped before sending anything on any list: {self.where}: "
            f"{self.tripped.reason}. Every list's plan is kept in {plan_table} under run id {run_id!r}; "
            f"nothing was sent or recorded. If this change is meant, {self.tripped.override}.",
            guard=self.guard,
            run_id=run_id,
        )


def check_programme(
    options: SyncOptions, source_rows: int, lists: Sequence[tuple[str, SyncOptions, Written, int]]
) -> ProgrammeTrip | None:
    """The first guard the programme's plan trips, or ``None``.

    ``lists``: each audience's value, its list's options, its written plan (with the list's members
    before the run) and the source rows that name the audience (the list keeps those its accounts
    name no higher audience with, and not excluded); ``source_rows``: the rows of the programme's
    whole source.
    """
    removing = sum(written.to_remove for _, _, written, _ in lists)
    members = sum(written.members for _, _, written, _ in lists)
    tripped = check_plan(options, source_rows, removing, members)
    if tripped is not None:
        return ProgrammeTrip(PROGRAMME, tripped)
    for value, list_options, written, naming in lists:
        if written.members == 0 and naming == 0:
            continue
        where = f"audience {value!r} (list {list_options.list_id})"
        if naming == 0 and list_options.removes and not list_options.allow_empty_source:
            return ProgrammeTrip(where, _emptied(list_options, written.members))
        tripped = check_plan(list_options, naming, written.to_remove, written.members)
        if tripped is not None:
            return ProgrammeTrip(where, tripped)
    return None


def _emptied(options: SyncOptions, members: int) -> Tripped:
    """An audience no source row names while its list has members: the source has rows (the programme
    passed), so the tier alone is empty, and both guards stand between it and an empty list."""
    return Tripped(
        "allow_empty_source",
        f"no source row names this audience, and a {options.mode} run would remove all {members} recorded "
        "members of its list",
        "re-run with allow_empty_source=True, and with max_removals=None too where emptying the list "
        "removes more than max_removals allows",
    )
