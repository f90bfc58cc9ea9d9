"""Recording what the service answered: a few batches per transaction, with the run's progress.

The answered batches of a group (``RECORD_ACCOUNTS`` accounts' worth, see
:mod:`~abm_provider.accounts.sync.sending`, or fewer at the end of an action or when sending fails)
change the members table, write their run-log rows and move the run's ``add_done`` or
``remove_done`` in one transaction, so the record never says a batch is done without its members,
nor the other way round. A retry or a re-run after a kill resumes after the last group recorded
here; at most the batches answered since then and those in flight at the crash are sent again,
which the service answers as duplicates (a removal, as not on the list).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.sync.state import DONE, LOG_COLUMNS, NOT_FOUND_ACTION, REFUSED_ACTION, utc_now
from abm_provider.accounts.validation import NOT_FOUND_REASON
from abm_provider.common.rejects import raw_json

if TYPE_CHECKING:
    from abm_provider.accounts.sync.clock import ServiceClock
    from abm_provider.accounts.sync.database import StateDatabase
    from abm_provider.accounts.sync.options import SyncOptions
    from abm_provider.accounts.sync.splitting import SplitResult
    from abm_provider.accounts.sync.state import StateTables

#: A plan row as read back to be sent: ``(account_id, crm_org_id, crm_type, account_name, row_hash)``.
PlanRow = tuple[Any, ...]


def _positions_by_id(rows: Sequence[PlanRow], echoed: Sequence[dict[str, Any]]) -> set[int]:
    """The positions in ``rows`` of the accounts the service echoed back (matched by id, in order).

    The service echoes an account with its org and type filled in, so only the id is compared; two
    rows of one id (in two orgs) are matched in turn.
    """
    by_id: dict[str, list[int]] = {}
    for position, row in enumerate(rows):
        by_id.setdefault(str(row[0]), []).append(position)
    found: set[int] = set()
    for item in echoed:
        positions = by_id.get(str(item.get("id", "")))
        if positions:
            found.add(positions.pop(0))
    return found


def _other_than(seqs: set[int]) -> str:
    """A condition on plan row ``p`` leaving out the rows numbered ``seqs``."""
    return f" AND p.seq NOT IN ({', '.join(str(seq) for seq in sorted(seqs))})" if seqs else ""


def _sent_outcome(result_applied: int, result_duplicates: int) -> tuple[str, str | None]:
    """The outcome of the accounts of an add batch that the service accepted, and a note if unsure.

    The service counts duplicates per request but does not say which accounts they were, so a batch
    with both is logged ``added`` with the counts as its reason.
    """
    if result_duplicates == 0:
        return "added", None
    if result_applied == 0:
        return "duplicate", "already on the list"
    note = (
        f"the request added {result_applied} and found {result_duplicates} already on the list; "
        "the service does not say which"
    )
    return "added", note


@dataclass(frozen=True)
class Answered:
    """One sent batch: plan rows ``start`` to ``end`` of an action, the rows, and the service's answer."""

    start: int
    end: int
    rows: list[PlanRow]
    sent: SplitResult

    @property
    def refused(self) -> dict[int, str]:
        """The plan numbers of the accounts the service refused with ``400``, with its reason."""
        return {self.start + position: reason for position, reason in self.sent.refused}

    def unmatched(self) -> set[int]:
        """The plan numbers of the accepted accounts the service echoed back as not found (not removed).

        An add echoes the accounts it did not find; a removal, those it did not find on the list.
        """
        refused = dict(self.sent.refused)
        accepted = [i for i in range(len(self.rows)) if i not in refused]
        echoed = _positions_by_id([self.rows[i] for i in accepted], self.sent.result.not_found)
        return {self.start + accepted[i] for i in echoed}


def _exceptions(answered: Sequence[Answered]) -> Iterator[tuple[int, PlanRow, str | None, dict[str, Any]]]:
    """The rows of ``answered`` whose outcome is not their batch's, in plan order.

    Each as ``(plan number, row, the service's refusal reason or None, what it echoed back)``: a
    ``400`` refusal has a reason; an account echoed back (not found, or not on the list) has none.
    """
    for batch in answered:
        refused, unmatched = batch.refused, batch.unmatched()
        echoed = {str(item.get("id", "")): item for item in batch.sent.result.not_found}
        for seq in sorted(refused.keys() | unmatched):
            row = batch.rows[seq - batch.start]
            yield seq, row, refused.get(seq), echoed.get(str(row[0]), {"id": row[0]})


def _segments(answered: Sequence[Answered], outcome: Callable[[Answered], Any]) -> list[tuple[int, int, Any]]:
    """Consecutive batches that share ``outcome(batch)`` as ``(first plan number, last, outcome)``."""
    segments: list[tuple[int, int, Any]] = []
    for batch in answered:
        value = outcome(batch)
        if segments and segments[-1][2] == value:
            segments[-1] = (segments[-1][0], batch.end, value)
        else:
            segments.append((batch.start, batch.end, value))
    return segments


@dataclass(frozen=True)
class Recorder:
    """Writes the answers of one list's batches into its state tables and its run log."""

    db: StateDatabase
    tables: StateTables
    options: SyncOptions
    clock: ServiceClock

    @property
    def list_id(self) -> str:
        return self.options.list_id

    def record_added(self, run_id: str, answered: Sequence[Answered], *, replaces_not_found: bool) -> None:
        """Record the answered add batches (consecutive in the plan) as members, less the refused.

        An account not found, or refused with ``400``, becomes a reject of this run, so it is neither a
        member nor sent again (an account not found is, once ``retry_not_found_after`` has passed).
        When ``replaces_not_found``, a not-found reject of an earlier run for the same values is
        replaced: the account was just sent again.
        """
        mark = self.db.marker
        names = self.db.names(self.tables)
        now, service_now = utc_now(), self.clock.now()
        first, last = answered[0].start, answered[-1].end
        rejects: list[list[Any]] = []
        log: list[tuple[Any, ...]] = []  # the exceptions; the accepted rows are logged from the plan
        exceptions: set[int] = set()
        for seq, (account_id, org, _crm_type, _name, values), reason, echoed in _exceptions(answered):
            exceptions.add(seq)
            if reason is not None:
                rejects.append([self.list_id, run_id, REFUSED_ACTION, account_id, org, values, reason, None])
                log.append((self.list_id, run_id, "add", "invalid", account_id, org, reason, None, now))
            else:
                rejects.append(
                    [
                        self.list_id,
                        run_id,
                        NOT_FOUND_ACTION,
                        account_id,
                        org,
                        values,
                        NOT_FOUND_REASON,
                        raw_json(echoed),
                    ]
                )
                log.append((self.list_id, run_id, "add", "not_found", account_id, org, None, None, now))
        plan_rows = (
            f"SELECT p.row_hash FROM {names.plan} p WHERE p.list_id = {mark} AND p.run_id = {mark} "
            f"AND p.action = 'add' AND p.seq BETWEEN {mark} AND {mark}"
        )
        # A plan holds each key once, and it left out the members when it was made under the list's
        # lock, which this run still holds (earlier unfinished runs are completed before a run plans):
        # so only a full resync, which plans members too, can meet one here. Each check scans the
        # growing members table on a database that joins by hashing.
        new_only = (
            ""
            if not self.options.full_resync
            else (
                f" AND NOT EXISTS (SELECT 1 FROM {names.members} m WHERE m.list_id = p.list_id "
                "AND m.account_id = p.account_id AND m.crm_org_id = p.crm_org_id)"
            )
        )
        with self.db.transaction():
            if replaces_not_found:
                self.db.execute(
                    f"DELETE FROM {names.rejects} WHERE list_id = {mark} AND action = {mark} "
                    f"AND run_id <> {mark} "
                    f"AND row_hash IN ({plan_rows})",
                    [self.list_id, NOT_FOUND_ACTION, run_id, self.list_id, run_id, first, last],
                )
            self.db.executemany(
                f"INSERT INTO {names.rejects} (list_id, run_id, action, account_id, crm_org_id, "
                f"row_hash, reason, raw, recorded_at) VALUES ({self.db.marks(9)})",
                [[*r, service_now] for r in rejects],
            )
            if self.options.full_resync and rejects:
                self._forget_refused_members(run_id, first, last)
            self.db.execute(
                f"INSERT INTO {names.members} (list_id, account_id, crm_org_id, crm_type, account_name, "
                "row_hash, run_id, synced_at) SELECT p.list_id, p.account_id, p.crm_org_id, p.crm_type, "
                f"p.account_name, p.row_hash, p.run_id, {mark} FROM {names.plan} p WHERE p.list_id = {mark} "
                f"AND p.run_id = {mark} AND p.action = 'add' AND p.seq BETWEEN {mark} AND {mark}{new_only}"
                f"{_other_than(exceptions)}",
                [now, self.list_id, run_id, first, last],
            )
            outcomes = _segments(
                answered, lambda b: _sent_outcome(b.sent.result.applied, b.sent.result.duplicates)
            )
            for start, end, (outcome, note) in outcomes:
                self._log_from_plan(run_id, "add", start, end, _other_than(exceptions), outcome, note, now)
            self._log_rows(log)
            self._drop_recorded(run_id, "add", first, last)
            self.db.execute(
                f"UPDATE {names.runs} SET add_done = {mark}, added = added + {mark}, "
                f"duplicates = duplicates + {mark}, not_found = not_found + {mark}, "
                f"rejected = rejected + {mark} WHERE list_id = {mark} AND run_id = {mark}",
                [
                    last,
                    sum(b.sent.result.applied for b in answered),
                    sum(b.sent.result.duplicates for b in answered),
                    sum(1 for row in log if row[3] == "not_found"),
                    sum(1 for row in log if row[3] == "invalid"),
                    self.list_id,
                    run_id,
                ],
            )

    def has_old_not_found(self, run_id: str) -> bool:
        """Whether the list has not-found rejects of other runs, which a re-sent account replaces.

        Asked once before a run sends: its sending only ever removes such rejects.
        """
        mark = self.db.marker
        rejects = self.db.names(self.tables).rejects
        found = self.db.value(
            f"SELECT 1 FROM {rejects} WHERE list_id = {mark} AND action = {mark} "
            f"AND run_id <> {mark} LIMIT 1",
            [self.list_id, NOT_FOUND_ACTION, run_id],
        )
        return found is not None

    def _forget_refused_members(self, run_id: str, start: int, end: int) -> None:
        """Drop members the service just refused or did not find: a full resync rebuilds from answers."""
        mark = self.db.marker
        names = self.db.names(self.tables)
        members = names.members
        self.db.execute(
            self.db.dialect.delete_matching_sql(
                members,
                f"{members}.list_id = {mark}",
                f"{names.plan} p",
                f"p.list_id = {members}.list_id AND p.run_id = {mark} AND p.action = 'add' "
                f"AND p.seq BETWEEN {mark} AND {mark} AND p.account_id = {members}.account_id "
                f"AND p.crm_org_id = {members}.crm_org_id AND EXISTS (SELECT 1 FROM {names.rejects} r "
                "WHERE r.list_id = p.list_id AND r.run_id = p.run_id AND r.row_hash = p.row_hash)",
            ),
            [self.list_id, run_id, start, end],
        )

    def record_removed(self, run_id: str, answered: Sequence[Answered]) -> None:
        """Drop the answered removal batches (consecutive in the plan) from the members, less the refused.

        The service answers a removal with the accounts it removed; one it did not report was not on
        the list (logged ``duplicate``: the list already was as asked). One refused with ``400`` stays
        a member, and the next run plans its removal again.
        """
        mark = self.db.marker
        names = self.db.names(self.tables)
        members = names.members
        now = utc_now()
        first, last = answered[0].start, answered[-1].end
        log: list[tuple[Any, ...]] = []  # the exceptions; the removed rows are logged from the plan
        kept: set[int] = set()
        absent: set[int] = set()
        for seq, (account_id, org, *_rest), reason, _echoed in _exceptions(answered):
            if reason is not None:
                kept.add(seq)
                outcome = "invalid"
            else:
                absent.add(seq)
                outcome, reason = "duplicate", "not on the list"
            log.append((self.list_id, run_id, "remove", outcome, account_id, org, reason, None, now))
        with self.db.transaction():
            self.db.execute(
                self.db.dialect.delete_matching_sql(
                    members,
                    f"{members}.list_id = {mark}",
                    f"{names.plan} p",
                    f"p.list_id = {members}.list_id AND p.run_id = {mark} AND p.action = 'remove' "
                    f"AND p.seq BETWEEN {mark} AND {mark} AND p.account_id = {members}.account_id "
                    f"AND p.crm_org_id = {members}.crm_org_id{_other_than(kept)}",
                ),
                [self.list_id, run_id, first, last],
            )
            self._log_from_plan(
                run_id, "remove", first, last, _other_than(kept | absent), "removed", None, now
            )
            self._log_rows(log)
            self._drop_recorded(run_id, "remove", first, last)
            self.db.execute(
                f"UPDATE {names.runs} SET remove_done = {mark}, removed = removed + {mark}, "
                f"rejected = rejected + {mark} "
                f"WHERE list_id = {mark} AND run_id = {mark}",
                [last, sum(b.sent.result.applied for b in answered), len(kept), self.list_id, run_id],
            )

    def _log_from_plan(
        self,
        run_id: str,
        action: str,
        start: int,
        end: int,
        except_these: str,
        outcome: str,
        reason: str | None,
        now: datetime,
    ) -> None:
        """Log plan rows ``start`` to ``end`` of ``action`` with one outcome, in SQL.

        Most rows of a batch share their outcome; writing them from the plan table keeps a thousand
        rows a batch from travelling back to the database. ``except_these`` leaves out the others.
        """
        mark = self.db.marker
        names = self.db.names(self.tables)
        self.db.execute(
            f"INSERT INTO {names.log} ({', '.join(c for c in LOG_COLUMNS if c != 'record')}) SELECT "
            f"p.list_id, p.run_id, p.action, {self.db.dialect.text_param()}, p.account_id, p.crm_org_id, "
            f"{self.db.dialect.text_param()}, {mark} FROM {names.plan} p WHERE p.list_id = {mark} "
            f"AND p.run_id = {mark} "
            f"AND p.action = {mark} AND p.seq BETWEEN {mark} AND {mark}{except_these}",
            [outcome, reason, now, self.list_id, run_id, action, start, end],
        )

    def _log_rows(self, log: list[tuple[Any, ...]]) -> None:
        """Log the few rows whose outcome differs from their batch's."""
        names = self.db.names(self.tables)
        marks = self.db.marks(len(LOG_COLUMNS))
        self.db.executemany(f"INSERT INTO {names.log} ({', '.join(LOG_COLUMNS)}) VALUES ({marks})", log)

    def _drop_recorded(self, run_id: str, action: str, first: int, last: int) -> None:
        """Delete plan rows ``first`` to ``last`` of ``action``: recorded, they are never read again.

        Dropped with each group, in its transaction, rather than all at once when the run is done: a
        first run's million plan rows then go while the service is answering the next group, not
        after the last one.
        """
        mark = self.db.marker
        plan = self.db.names(self.tables).plan
        self.db.execute(
            f"DELETE FROM {plan} WHERE list_id = {mark} AND run_id = {mark} AND action = {mark} "
            f"AND seq BETWEEN {mark} AND {mark}",
            [self.list_id, run_id, action, first, last],
        )

    def drop_recorded_before(self, run_id: str, action: str, done: int) -> None:
        """Delete the plan rows of ``action`` up to ``done`` that a run resumed here still has.

        Each group's rows go when it is recorded, so only a plan left by 0.1 (which kept them until
        the run was done) has any.
        """
        if done > 0:
            self._drop_recorded(run_id, action, 1, done)

    def record_done(self, run_id: str) -> None:
        """Mark the run done: its plan was sent and recorded whole (and dropped group by group)."""
        mark = self.db.marker
        names = self.db.names(self.tables)
        with self.db.transaction():
            self.db.execute(
                f"UPDATE {names.runs} SET status = {mark}, finished_at = {mark} WHERE list_id = {mark} "
                f"AND run_id = {mark}",
                [DONE, utc_now(), self.list_id, run_id],
            )

    def forget_old_log(self, before: datetime) -> int:
        """Delete the list's run-log rows logged before ``before``; return how many went.

        A row is logged after its run started, so only the runs started before ``before`` are looked
        in, through the log's run index: a list whose runs are all recent costs one lookup in the runs
        table, not a scan of its log.
        """
        mark = self.db.marker
        names = self.db.names(self.tables)
        runs = [
            str(r[0])
            for r in self.db.rows(
                f"SELECT run_id FROM {names.runs} WHERE list_id = {mark} AND started_at < {mark}",
                [self.list_id, before],
            )
        ]
        if not runs:
            return 0
        old_rows = (
            f"FROM {names.log} WHERE list_id = {mark} AND logged_at < {mark} "
            f"AND run_id IN ({self.db.marks(len(runs))})"
        )
        params = [self.list_id, before, *runs]
        with self.db.transaction():
            gone = int(self.db.value(f"SELECT COUNT(*) {old_rows}", params) or 0)
            if gone:
                self.db.execute(f"DELETE {old_rows}", params)
        return gone
