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
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.sync.guards import Tripped, check_plan
from abm_provider.accounts.sync.sending import RECORD_ACCOUNTS
from abm_provider.accounts.sync.staging import (
    Staged,
    Stager,
    difference_table,
    stage_table_sql,
    staged_hash_sql,
)
from abm_provider.accounts.sync.state import (
    BLOCKED,
    DRY_RUN,
    INVALID_ACTION,
    NOT_FOUND_ACTION,
    SENDING,
    utc_now,
)
from abm_provider.accounts.sync.summary import member_count
from abm_provider.common.rejects import TooManyRejects, check_rejects, describe_reject

if TYPE_CHECKING:
    from abm_provider.accounts.sources import AccountSource
    from abm_provider.accounts.sync.clock import ServiceClock
    from abm_provider.accounts.sync.database import StateDatabase
    from abm_provider.accounts.sync.options import SyncOptions
    from abm_provider.accounts.sync.state import StateTables
    from abm_provider.accounts.validation import AccountValidator

#: Rows named in an error message or shown in the log per action.
_SAMPLE = 5


@dataclass(frozen=True)
class _Held:
    """Conditions on a source row ``s``: ``held`` when refused before with its values and still held,
    ``sendable`` when not; both take ``params``."""

    held: str
    sendable: str
    params: list[Any]


@dataclass(frozen=True)
class Planner:
    """Writes one run's plan, its new rejects and its row in the runs table."""

    db: StateDatabase
    tables: StateTables
    options: SyncOptions
    validator: AccountValidator
    clock: ServiceClock
    log: logging.Logger | Any

    def plan(self, source: AccountSource) -> Tripped | None:
        """Stage the source, compute the change in SQL, and commit plan, rejects and run row together.

        Returns the guard the plan tripped, if any: its plan is then kept, marked ``blocked``.
        """
        names = self.db.names(self.tables)
        stage = f"abm_sync_source_{uuid.uuid4().hex[:12]}"
        key, text = self.db.dialect.text_sql(255), self.db.dialect.text_sql(64)
        # Committed before staging: a source query the warehouse refuses to run wrapped rolls back
        # its own transaction only, and the source is then staged through Python into these.
        with self.db.transaction():
            self.db.execute(f"CREATE TEMPORARY TABLE {stage} ({stage_table_sql(self.db.dialect)})")
            self.db.execute(
                f"CREATE TEMPORARY TABLE {self._candidates(stage)} (record BIGINT, account_id {key}, "
                f"crm_org_id {key}, crm_type {key}, account_name {key}, row_hash {text})"
            )
        # A run that sends only the change compares the source with the members first, where it can;
        # a list with no members (a first run) has none to compare with, nor to leave out of the plan.
        members = names.members if not self.options.full_resync and self._has_members() else None
        try:
            staged = Stager(self.db, self.options, self.validator, self.log).stage(source, stage, members)
            self.db.analyze(stage)  # the diff joins it with the members: plan it for its real size
            with self.db.transaction():
                tripped, planned = self._write_plan(stage, staged, listed=members is not None)
            if planned > RECORD_ACCOUNTS:
                # Statistics from before a plan of several groups would have each group's read scan
                # the table; a plan of one group is read once.
                self.db.analyze(names.plan)
        finally:
            for table in (stage, self._candidates(stage), difference_table(stage)):
                self.db.execute(f"DROP TABLE IF EXISTS {table}")
        return tripped

    def _has_members(self) -> bool:
        """Whether the list has members by our record (a first run has none to compare with)."""
        return self._any(self.db.names(self.tables).members)

    def _any(self, table: str) -> bool:
        """Whether ``table`` has a row of this list."""
        mark = self.db.marker
        found = self.db.value(f"SELECT 1 FROM {table} WHERE list_id = {mark} LIMIT 1", [self.options.list_id])
        return found is not None

    def _keep_first_of_each_key(self, candidates: str) -> None:
        """Leave one row per key in ``candidates``: the first in the source.

        A source rarely repeats a key, so one grouping asks first (a window over every row would sort
        a million texts); only then are the later rows found, through a derived table, which MySQL
        and MariaDB materialise instead of grouping again for every row deleted.
        """
        repeated = self.db.value(
            f"SELECT 1 FROM {candidates} GROUP BY account_id, crm_org_id HAVING COUNT(*) > 1 LIMIT 1"
        )
        if repeated is None:
            return
        self.db.execute(
            f"DELETE FROM {candidates} WHERE record IN (SELECT d.record FROM (SELECT c.record, "
            "ROW_NUMBER() OVER (PARTITION BY c.account_id, c.crm_org_id ORDER BY c.record) AS nth "
            f"FROM {candidates} c) d WHERE d.nth > 1)"
        )

    @staticmethod
    def _candidates(stage: str) -> str:
        """The temporary table of the rows that may be added, beside the stage ``stage``."""
        return f"{stage}_new"

    def _refused(self) -> _Held:
        """Conditions on source row ``s``: refused before with the same values, and still held; or not.

        An account the service did not find is held until ``retry_not_found_after`` has passed. A list
        with no rejects holds nothing, and its rows are not each looked up in the rejects table.
        """
        mark = self.db.marker
        options = self.options
        rejects = self.db.names(self.tables).rejects
        if not self._any(rejects):
            return _Held("1 = 0", "1 = 1", [])
        held = f"SELECT 1 FROM {rejects} r WHERE r.list_id = {mark} AND r.row_hash = s.row_hash"
        if options.retry_not_found_after is None:
            return _Held(f"EXISTS ({held})", f"NOT EXISTS ({held})", [options.list_id])
        cutoff = self.clock.now() - timedelta(seconds=options.retry_not_found_after)
        held += f" AND (r.action <> {mark} OR r.recorded_at > {mark})"
        return _Held(f"EXISTS ({held})", f"NOT EXISTS ({held})", [options.list_id, NOT_FOUND_ACTION, cutoff])

    def _write_plan(self, stage: str, staged: Staged, *, listed: bool) -> tuple[Tripped | None, int]:
        """Replace this run's plan and row with the change between ``stage`` and the members.

        ``listed``: the list has members to leave out of the additions (not a first run, nor a full
        resync, which adds every row again). Returns the guard the plan tripped, if any, and how many
        rows the plan holds.
        """
        mark = self.db.marker
        names = self.db.names(self.tables)
        options = self.options
        source_rows = staged.rows
        run = [options.list_id, options.run_id]
        # The plans of stopped and dry runs go (a finished run deleted its own; a plan left unfinished
        # stays until it is completed). Named one by one, they are reached through the plan's index,
        # without passing over the entries a large finished plan left behind.
        stale = {options.run_id} | {
            str(r[0])
            for r in self.db.rows(
                f"SELECT run_id FROM {names.runs} WHERE list_id = {mark} AND status IN ({mark}, {mark})",
                [options.list_id, BLOCKED, DRY_RUN],
            )
        }
        self.db.execute(
            f"DELETE FROM {names.plan} WHERE list_id = {mark} AND run_id IN ({self.db.marks(len(stale))})",
            [options.list_id, *sorted(stale)],
        )
        self.db.execute(f"DELETE FROM {names.runs} WHERE list_id = {mark} AND run_id = {mark}", run)
        refused = self._refused()
        # The valid rows whose key is not a member yet (every valid row in a full resync), one per key
        # (its first in the source): made once, since the plan, the counts and the log all read it,
        # and small once a list is in step. A row staged in SQL gets its hash here, where only these
        # rows need one.
        member = (
            f"SELECT 1 FROM {names.members} m WHERE m.list_id = {mark} AND m.account_id = s.account_id "
            "AND m.crm_org_id = s.crm_org_id"
        )
        new_keys = f" AND NOT EXISTS ({member})" if listed else ""
        candidates = self._candidates(stage)
        if options.adds:
            self.db.execute(
                f"INSERT INTO {candidates} (record, account_id, crm_org_id, crm_type, account_name, "
                "row_hash) SELECT s.record, s.account_id, s.crm_org_id, s.crm_type, s.account_name, "
                f"{staged_hash_sql(self.db.dialect)} FROM {stage} s WHERE s.reason IS NULL{new_keys}",
                [options.list_id] if listed else [],
            )
            self._keep_first_of_each_key(candidates)
        # Rows that would be added, less those held as refused before (a full resync holds none).
        if options.full_resync:
            to_add, to_add_params = "1 = 1", []
            skipped, skipped_params = "1 = 0", []
        else:
            to_add, to_add_params = refused.sendable, [*refused.params]
            skipped, skipped_params = refused.held, [*refused.params]
        columns = "list_id, run_id, action, seq, account_id, crm_org_id, crm_type, account_name, row_hash"
        planned = {"add": 0, "remove": 0}
        if options.adds:
            planned["add"] = self.db.execute(
                f"INSERT INTO {names.plan} ({columns}) SELECT {mark}, {mark}, 'add', "
                "ROW_NUMBER() OVER (ORDER BY s.record), s.account_id, s.crm_org_id, "
                f"s.crm_type, s.account_name, s.row_hash FROM {candidates} s WHERE {to_add}",
                [*run, *to_add_params],
            )
        if options.removes:
            # Only members no source row equals can have left it, where staging found which those are.
            left = staged.members_left or names.members
            planned["remove"] = self.db.execute(
                f"INSERT INTO {names.plan} ({columns}) SELECT {mark}, {mark}, 'remove', "
                "ROW_NUMBER() OVER (ORDER BY m.account_id, m.crm_org_id), m.account_id, m.crm_org_id, "
                f"m.crm_type, m.account_name, m.row_hash FROM {left} m WHERE m.list_id = {mark} "
                f"AND NOT EXISTS (SELECT 1 FROM {stage} s WHERE s.account_id = m.account_id "
                "AND s.crm_org_id = m.crm_org_id)",
                [*run, options.list_id],
            )
        if min(planned.values()) < 0:  # the driver did not say how many rows each insert wrote
            counted = f"SELECT action, COUNT(*) FROM {names.plan} WHERE list_id = {mark} AND run_id = {mark}"
            counted += " GROUP BY action"
            planned = {"add": 0, "remove": 0} | dict(self.db.rows(counted, run))
        new_invalid = f"FROM {stage} s WHERE s.reason IS NOT NULL AND {refused.sendable}"
        held_invalid = f"FROM {stage} s WHERE s.reason IS NOT NULL AND {refused.held}"
        held_valid = f"FROM {candidates} s WHERE {skipped}" if options.adds else None
        rejected = self._count(new_invalid, refused.params)
        held = self._count(held_invalid, refused.params)
        if held_valid is not None:
            held += self._count(held_valid, skipped_params)
        self._check_rejected(rejected, source_rows, stage, refused)
        adding, removing = int(planned["add"]), int(planned["remove"])
        members = member_count(self.db, self.tables, options.list_id)
        tripped = check_plan(options, source_rows, removing, members)
        if options.dry_run:
            status = DRY_RUN
        elif tripped is not None:
            status = BLOCKED
        else:
            status = SENDING
            self._record_refusals(new_invalid, held_invalid, held_valid, refused.params, skipped_params)
        self.db.execute(
            f"INSERT INTO {names.runs} (list_id, run_id, mode, status, source_rows, to_add, to_remove, "
            "add_done, remove_done, added, removed, duplicates, not_found, rejected, held, started_at) "
            f"VALUES ({self.db.marks(7)}, 0, 0, 0, 0, 0, 0, {self.db.marks(3)})",
            [*run, options.mode, status, source_rows, adding, removing, rejected, held, utc_now()],
        )
        return tripped, adding + removing

    def _record_refusals(
        self,
        new_invalid: str,
        held_invalid: str,
        held_valid: str | None,
        refused_params: list[Any],
        skipped_params: list[Any],
    ) -> None:
        """Log the new invalid rows as ``invalid``, the held ones as ``held``; then record the new ones."""
        mark = self.db.marker
        names = self.db.names(self.tables)
        options = self.options
        run = [options.list_id, options.run_id]
        now = utc_now()
        logged = (
            f"INSERT INTO {names.log} (list_id, run_id, action, outcome, account_id, crm_org_id, reason, "
            f"record, logged_at) SELECT {mark}, {mark}, 'none', {mark}, s.account_id, s.crm_org_id, "
            f"{{reason}}, s.record, {mark} "
        )
        self.db.execute(
            logged.format(reason="s.reason") + new_invalid, [*run, "invalid", now, *refused_params]
        )
        why = (
            f"(SELECT MAX(r.reason) FROM {names.rejects} r WHERE r.list_id = {mark} "
            "AND r.row_hash = s.row_hash)"
        )
        self.db.execute(
            logged.format(reason=why) + held_invalid, [*run, "held", options.list_id, now, *refused_params]
        )
        if held_valid is not None:
            self.db.execute(
                logged.format(reason=why) + held_valid, [*run, "held", options.list_id, now, *skipped_params]
            )
        # Last: until the new invalid rows are rejects, the queries above cannot take them for held ones.
        self.db.execute(
            f"INSERT INTO {names.rejects} (list_id, run_id, action, account_id, crm_org_id, "
            f"row_hash, reason, record, line, raw, recorded_at) SELECT {mark}, {mark}, {mark}, s.account_id, "
            f"s.crm_org_id, s.row_hash, s.reason, s.record, s.line, s.raw, {mark} {new_invalid}",
            [*run, INVALID_ACTION, self.clock.now(), *refused_params],
        )

    def _count(self, rows: str, params: list[Any]) -> int:
        """``SELECT COUNT(*)`` of ``rows`` (a ``FROM ...`` clause)."""
        return int(self.db.value(f"SELECT COUNT(*) {rows}", params) or 0)

    def _check_rejected(self, rejected: int, source_rows: int, stage: str, refused: _Held) -> None:
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

    def _examples(self, stage: str, refused: _Held) -> list[str]:
        """The first invalid rows not refused before, for the error message."""
        rows = self.db.rows(
            f"SELECT record, reason FROM {stage} s WHERE s.reason IS NOT NULL AND {refused.sendable} "
            f"ORDER BY record LIMIT {_SAMPLE}",
            refused.params,
        )
        return [describe_reject(reason, record) for record, reason in rows]

    def log_plan(self, summary: Mapping[str, Any]) -> None:
        """Counts and a sample of each action, so a dry run (or a surprise) is readable in the log."""
        mark = self.db.marker
        names = self.db.names(self.tables)
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
                f"SELECT account_id, crm_org_id FROM {names.plan} WHERE list_id = {mark} AND run_id = {mark} "
                f"AND action = {mark} ORDER BY seq LIMIT {_SAMPLE}",
                [options.list_id, options.run_id, action],
            )
            if sample:
                shown = [f"{i}@{org}" if org else str(i) for i, org in sample]
                self.log.info("  e.g. to %s: %s", action, ", ".join(shown))
