"""The guards a plan must pass before anything is sent: how much it removes, and an empty source.

A mirror sync removes every recorded member whose key left the source. After a broken upstream job,
a truncated table or a wrong filter, that is most of the list. The reverse-ETL tools this sync
replaces stop on a drop in the record count; so does this one, before the first request:

- ``max_removals``: the removals one run may make, a count or a fraction of the recorded members
  (``None``: any number);
- ``allow_empty_source``: a run that removes fails on a source with no rows unless this is set.

A tripped guard keeps the plan (status ``blocked``) so it can be read, records nothing else, and
fails the task with :class:`~abm_provider.exceptions.SyncGuardTripped`. A dry run reports the guard
in its summary and log instead, which is what an approval step reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from abm_provider.exceptions import SyncGuardTripped

if TYPE_CHECKING:
    from abm_provider.accounts.sync.options import SyncOptions


@dataclass(frozen=True)
class Tripped:
    """A guard the plan did not pass: the argument that stopped it and why, in words."""

    guard: str
    reason: str
    override: str

    def error(self, options: SyncOptions, plan_table: str) -> SyncGuardTripped:
        """The task's failure: the figures, where the plan is, and how to let the run through."""
        return SyncGuardTripped(
            f"Sync of list {options.list_id} stopped before sending anything: {self.reason}. The plan is "
            f"kept in {plan_table} under run id {options.run_id!r}; nothing was sent or recorded. "
            f"If this change is meant, {self.override} (the example DAG takes it as a param).",
            guard=self.guard,
            run_id=options.run_id,
        )


def check_plan(options: SyncOptions, source_rows: int, to_remove: int, members: int) -> Tripped | None:
    """The first guard the plan trips, or ``None``.

    ``members`` is the recorded membership before the run, the base of a fractional ``max_removals``.
    """
    if not options.removes:
        return None
    if source_rows == 0 and not options.allow_empty_source:
        return Tripped(
            "allow_empty_source",
            f"the source returned no rows, and a {options.mode} run would remove all {members} "
            "recorded members",
            "re-run with allow_empty_source=True",
        )
    limit = options.max_removals
    if limit is None or to_remove == 0:
        return None
    if isinstance(limit, float):
        share = to_remove / members if members else 1.0
        if share <= limit:
            return None
        figures = f"{to_remove} of the {members} recorded members ({share:.1%})"
        allowed = f"max_removals={limit!r} ({limit:.0%})"
    else:
        if to_remove <= limit:
            return None
        figures = f"{to_remove} of the {members} recorded members"
        allowed = f"max_removals={limit!r}"
    return Tripped(
        "max_removals",
        f"the plan removes {figures}, more than {allowed} allows",
        "re-run with max_removals=None (or a limit above the plan's)",
    )
