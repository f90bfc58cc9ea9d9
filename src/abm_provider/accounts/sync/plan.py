"""A sync run's plan: the source staged in the warehouse and diffed in SQL against the state tables.

The source is staged once in a temporary table on the state connection, each row validated and
hashed (:mod:`~abm_provider.accounts.sync.staging`: in SQL when the source is on that connection). The
change is then computed in SQL, so memory stays flat whatever the source's size:

- accounts whose membership key ``(id, crmOrgId)`` is not on the list by our record are added
  (except in ``remove_only`` mode), unless a row with the same values was refused before (those are
  skipped, counted as ``held``); an account the service did not find is held only until
  ``retry_not_found_after`` has passed on the service's clock;
- with ``full_resync``, every valid source row is added again, member or not, held or not, so the
  recorded membership is rebuilt from the service's answers;
- in ``mirror`` and ``remove_only`` modes, members whose key left the source are removed;
- rows that fail validation are recorded in the rejects table with their reason.

The plan is then checked by the guards (:mod:`~abm_provider.accounts.sync.guards`). The plan, the new
rejects, the run log's ``invalid`` and ``held`` rows and the run's row commit together, so a crash
leaves either no plan or a whole one; a plan a guard stopped is kept with nothing else recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.sync.guards import Tripped, check_plan
from abm_provider.accounts.sync.sending import RECORD_ACCOUNTS
from abm_provider.accounts.sync.staging import Staged, Stager
from abm_provider.accounts.sync.state import BLOCKED, DRY_RUN, INVALID_ACTION, SENDING, utc_now
from abm_provider.accounts.sync.statements import plan as statements
from abm_provider.accounts.sync.statements.binding import Sql, text
from abm_provider.accounts.sync.statements.runs import count_rows
from abm_provider.accounts.sync.statements.staging import stage_columns_sql
from abm_provider.accounts.sync.statements.tables import WorkTables, create_work_table, drop_table
from abm_provider.accounts.sync.summary import member_count
from abm_provider.common.rejects import TooManyRejects, check_rejects, describe_reject

if TYPE_CHECKING:
    from abm_provider.accounts.sources import AccountSource
    from abm_provider.accounts.sync.clock import ServiceClock
    from abm_provider.accounts.sync.database import StateDatabase
    from abm_provider.accounts.sync.options import SyncOptions
    from abm_provider.accounts.sync.state import StateTables
    from abm_provider.accounts.sync.statements.tables import StateSql
    from abm_provider.accounts.sync.work_source import StateQuerySource
    from abm_provider.accounts.validation import AccountValidator

#: Rows named in an error message or shown in the log per action.
_SAMPLE = 5


@dataclass(frozen=True)
class Prepared:
    """A source staged for one list's plan: its work tables, what staging found, whether the list has
    members to leave out of the additions (not a first run, nor a full resync), the members the plan
    may remove, and whether the caller knows that no key occurs twice in the source (``unique``)."""

    work: WorkTables
    staged: Staged
    listed: bool
    members: Sql
    unique: bool = False


@dataclass(frozen=True)
class Written:
    """A plan written and not yet committed: its counts, the members before it, and the refusals
    (new invalid rows, held invalid rows, held valid rows) its run records when it goes on to send."""

    source_rows: int
    to_add: int
    to_remove: int
    rejected: int
    held: int
    members: int
    refusals: tuple[Sql, Sql, Sql | None]


@dataclass(frozen=True)
class Planner:
    """Writes one run's plan, its new rejects and its row in the runs table."""

    db: StateDatabase
    tables: StateTables
    options: SyncOptions
    validator: AccountValidator
    clock: ServiceClock
    log: logging.Logger | Any

    @cached_property
    def state(self) -> StateSql:
        """The state tables as the statements name them on this database."""
        return self.db.state_sql(self.tables)

    def plan(self, source: AccountSource | StateQuerySource) -> Tripped | None:
        """Stage the source, compute the change in SQL, and commit plan, rejects and run row together.

        Returns the guard the plan tripped, if any: its plan is then kept, marked ``blocked``.
        """
        prepared = self.prepare(source)
        try:
            with self.db.transaction():
                written = self.write(prepared)
                tripped = check_plan(self.options, written.source_rows, written.to_remove, written.members)
                self.finish(written, tripped is not None)
            self.settle(written)
        finally:
            self.drop(prepared)
        return tripped

    def prepare(
        self, source: AccountSource | StateQuerySource, members: Sql | None = None, *, unique: bool = False
    ) -> Prepared:
        """Stage the source into new work tables, each in a transaction of its own (:meth:`drop` them).

        ``members``: the members the source is compared with and the plan may remove, a relation of
        member rows; by default the members table, every member of the list. The audience sync gives
        the members of the accounts it found changed, with the source rows of those accounts only.
        ``unique``: the caller found no key twice in the source (the audience sync's tiering groups
        every key already), so the plan does not group the staged rows again to ask.
        """
        dialect = self.db.dialect
        work = WorkTables.new(dialect, self.tables.members.schema)
        # Committed before staging: a source query the warehouse refuses to run wrapped rolls back
        # its own transaction only, and the source is then staged through Python into these.
        with self.db.transaction():
            self.db.execute(create_work_table(dialect, work.stage, stage_columns_sql(dialect)))
            self.db.execute(
                create_work_table(dialect, work.candidates, statements.candidate_columns(dialect))
            )
        members = self.state.members if members is None else members
        prepared = Prepared(work, Staged(0), listed=False, members=members)
        try:
            # A run that sends only the change compares the source with the members first, where it
            # can; a list with no members (a first run) has none to compare with, nor to leave out.
            listed = not self.options.full_resync and self._has_members()
            stager = Stager(self.db, self.options, self.validator, self.log, work)
            staged = stager.stage(source, work.stage, members if listed else None)
            self.db.analyze(work.stage)  # the diff joins it with the members: plan it for its real size
        except BaseException:
            self.drop(prepared)
            raise
        return Prepared(work, staged, listed=listed, members=members, unique=unique)

    def settle(self, *written: Written) -> None:
        """After the plans' commit: statistics for plans their reads would otherwise scan whole.

        Several plans committed together into the one plan table (an audience sync's lists) need its
        statistics refreshed once, not once each.
        """
        if any(w.to_add + w.to_remove > RECORD_ACCOUNTS for w in written):
            # Statistics from before a plan of several groups would have each group's read scan the
            # table; a plan of one group is read once.
            self.db.analyze(self.db.names(self.tables).plan)

    def drop(self, prepared: Prepared) -> None:
        """Drop the work tables :meth:`prepare` made."""
        work = prepared.work
        for table in (work.stage, work.candidates, work.difference):
            self.db.execute(drop_table(table))

    def _has_members(self) -> bool:
        """Whether the list has members by our record (a first run has none to compare with)."""
        return self._any(self.state.members)

    def _any(self, table: Sql) -> bool:
        """Whether ``table`` has a row of this list."""
        return self.db.value(statements.has_rows(table, self.options.list_id)) is not None

    def _keep_first_of_each_key(self, candidates: str, repeats: bool | None) -> None:
        """Leave one row per key in ``candidates``: the first in the source.

        A source rarely repeats a key, so one grouping asks first (a window over every row would sort
        a million texts), unless ``repeats`` already says; only then are the later rows found and
        deleted.
        """
        if repeats is None:
            repeats = self.db.value(statements.repeated_key(candidates)) is not None
        if repeats:
            self.db.execute(statements.drop_repeated_keys(candidates))

    def _valid_rows_repeat(self, prepared: Prepared, to_add: statements.Held) -> bool | None:
        """Whether a key occurs twice among the valid staged rows, for a plan that adds every one of
        them as it stands: no members to leave out (a first run, a full resync) and nothing held back
        as refused before. ``None`` for any other plan, which is not asked.

        With no key twice, the additions are planned from the stage itself, not copied into the
        candidates first: on a first run that is a copy of every source row saved. With one, the
        candidates are every valid row, so they repeat it too and are not asked again.
        """
        if prepared.listed or to_add is not statements.NOTHING_HELD:
            return None
        if prepared.unique:
            return False
        return self.db.value(statements.repeated_key(prepared.work.stage, valid_only=True)) is not None

    def _refused(self) -> statements.Held:
        """Conditions on source row ``s``: refused before with the same values, and still held; or not.

        An account the service did not find is held until ``retry_not_found_after`` has passed. A list
        with no rejects holds nothing, and its rows are not each looked up in the rejects table.
        """
        options = self.options
        if not self._any(self.state.rejects):
            return statements.NOTHING_HELD
        after = options.retry_not_found_after
        cutoff = None if after is None else self.clock.now() - timedelta(seconds=after)
        return statements.held_back(self.state, options.list_id, cutoff)

    def write(self, prepared: Prepared, members: int | None = None) -> Written:
        """Replace this run's plan with the change between the stage and the members; say how big it is.

        ``members``: the list's recorded members, where the caller counted them (an audience sync
        counts all of its lists at once); else counted here, for the guards.
        Inside the caller's transaction, which :meth:`finish` ends. Raises ``TooManyRejects`` past
        ``max_rejected`` (a dry run only warns).
        """
        work, staged = prepared.work, prepared.staged
        state, options = self.state, self.options
        list_id, run_id = options.list_id, options.run_id
        # The plans of stopped and dry runs go (a finished run deleted its own; a plan left unfinished
        # stays until it is completed). Named one by one, they are reached through the plan's index,
        # without passing over the entries a large finished plan left behind.
        stale = {run_id} | {str(r[0]) for r in self.db.rows(statements.stale_runs(state, list_id))}
        self.db.execute(statements.delete_plans(state, list_id, sorted(stale)))
        self.db.execute(statements.delete_run(state, list_id, run_id))
        refused = self._refused()
        # Rows that would be added, less those held as refused before (a full resync holds none).
        to_add = statements.NOTHING_HELD if options.full_resync else refused
        planned = {"add": 0, "remove": 0}
        held_valid: Sql | None = None
        repeats = self._valid_rows_repeat(prepared, to_add) if options.adds else None
        if repeats is False:
            planned["add"] = self.db.execute(
                statements.insert_staged_additions(state, work.stage, list_id, run_id)
            )
        elif options.adds:
            # The valid rows whose key is not a member yet (every valid row in a full resync), one per
            # key (its first in the source): made once, since the plan, the counts and the log all
            # read it, and small once a list is in step.
            self.db.execute(
                statements.insert_candidates(
                    state, work.candidates, work.stage, list_id, listed=prepared.listed
                )
            )
            self._keep_first_of_each_key(work.candidates, repeats)
            planned["add"] = self.db.execute(
                statements.insert_additions(state, work.candidates, list_id, run_id, to_add.sendable)
            )
            held_valid = statements.candidate_rows(work.candidates, to_add.held)
        if options.removes:
            # Only members no source row equals can have left it, where staging found which those are.
            left = staged.members_left or prepared.members
            planned["remove"] = self.db.execute(
                statements.insert_removals(state, left, work.stage, list_id, run_id)
            )
        if min(planned.values()) < 0:  # the driver did not say how many rows each insert wrote
            planned = {"add": 0, "remove": 0} | dict(
                self.db.rows(statements.planned_counts(state, list_id, run_id))
            )
        new_invalid = statements.invalid_rows(work.stage, refused.sendable)
        held_invalid = statements.invalid_rows(work.stage, refused.held)
        rejected = self._count(new_invalid)
        held = self._count(held_invalid) + (self._count(held_valid) if held_valid is not None else 0)
        self._check_rejected(rejected, staged.rows, work.stage, refused)
        return Written(
            source_rows=staged.rows,
            to_add=int(planned["add"]),
            to_remove=int(planned["remove"]),
            rejected=rejected,
            held=held,
            members=member_count(self.db, self.tables, list_id) if members is None else members,
            refusals=(new_invalid, held_invalid, held_valid),
        )

    def finish(self, written: Written, blocked: bool) -> None:
        """Write the run's row (``blocked``: a guard stopped it) and, for a run that goes on to send,
        log and record its refusals. Inside the caller's transaction, after :meth:`write`."""
        options = self.options
        if options.dry_run:
            status = DRY_RUN
        elif blocked:
            status = BLOCKED
        else:
            status = SENDING
            self._record_refusals(*written.refusals, rejected=written.rejected)
        self.db.execute(
            statements.insert_run(
                self.state,
                options.list_id,
                options.run_id,
                mode=options.mode,
                status=status,
                counts={
                    "source_rows": written.source_rows,
                    "to_add": written.to_add,
                    "to_remove": written.to_remove,
                    "rejected": written.rejected,
                    "held": written.held,
                },
                started_at=utc_now(),
            )
        )

    def _record_refusals(
        self, new_invalid: Sql, held_invalid: Sql, held_valid: Sql | None, *, rejected: int
    ) -> None:
        """Log the new invalid rows as ``invalid``, the held ones as ``held``; then record the new ones
        (``rejected`` of them: with none, the service's clock that times them is not read)."""
        state, options = self.state, self.options
        list_id, run_id = options.list_id, options.run_id
        now = utc_now()
        self.db.execute(
            statements.log_rows(state, new_invalid, list_id, run_id, "invalid", text("s.reason"), now)
        )
        why = statements.held_reason(state, list_id)
        for held in (held_invalid, held_valid):
            if held is not None:
                self.db.execute(statements.log_rows(state, held, list_id, run_id, "held", why, now))
        # Last: until the new invalid rows are rejects, the queries above cannot take them for held ones.
        if rejected:
            self.db.execute(
                statements.insert_rejects(
                    state, new_invalid, list_id, run_id, INVALID_ACTION, self.clock.now()
                )
            )

    def _count(self, rows: Sql) -> int:
        """How many rows ``rows`` (a ``FROM ...`` clause) holds."""
        return int(self.db.value(count_rows(rows)) or 0)

    def _check_rejected(self, rejected: int, source_rows: int, stage: str, refused: statements.Held) -> None:
        """Fail past ``max_rejected``; a dry run only warns, so a preview shows the whole plan.

        Nothing is recorded when this raises, so the next run meets the same rows and fails the same
        way until the source is fixed or the limit raised.
        """
        try:
            check_rejects(
                rejected,
                self.options.max_rejected,
                total=source_rows,
                what="source rows are invalid",
                examples=self._examples(stage, refused),
                rejects_path=None,
                outcome="Nothing was sent or recorded.",
            )
        except TooManyRejects as err:
            if not self.options.dry_run:
                raise
            self.log.warning("%s (dry run: reported, not enforced)", err)

    def _examples(self, stage: str, refused: statements.Held) -> list[str]:
        """The first invalid rows not refused before, for the error message."""
        rows = self.db.rows(statements.examples(stage, refused.sendable, _SAMPLE))
        return [describe_reject(reason, record) for record, reason in rows]

    def log_plan(self, summary: Mapping[str, Any]) -> None:
        """Counts and a sample of each action, so a dry run (or a surprise) is readable in the log."""
        options = self.options
        self.log.info(
            "Plan for list %s (%s%s): %d to add, %d to remove, %d rejected now, %d skipped as refused "
            "before, from %d source rows",
            options.list_id,
            options.mode,
            ", dry run" if options.dry_run else "",
            summary["to_add"],
            summary["to_remove"],
            summary["rejected"],
            summary["held"],
            summary["source_rows"],
        )
        for action in ("add", "remove"):
            sample = self.db.rows(
                statements.sample(self.state, options.list_id, options.run_id, action, _SAMPLE)
            )
            if sample:
                shown = [f"{i}@{org}" if org else str(i) for i, org in sample]
                self.log.info("  e.g. to %s: %s", action, ", ".join(shown))
