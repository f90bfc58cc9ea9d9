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

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.sync.state import NOT_FOUND_ACTION, REFUSED_ACTION, WAITING_OUTCOME, utc_now
from abm_provider.accounts.sync.statements import recording as statements
from abm_provider.accounts.sync.statements.recording import other_than
from abm_provider.accounts.sync.statements.runs import count_rows
from abm_provider.accounts.validation import NOT_FOUND_REASON
from abm_provider.common.rejects import raw_json

if TYPE_CHECKING:
    from abm_provider.accounts.sync.clock import ServiceClock
    from abm_provider.accounts.sync.database import StateDatabase
    from abm_provider.accounts.sync.options import SyncOptions
    from abm_provider.accounts.sync.splitting import SplitResult
    from abm_provider.accounts.sync.state import StateTables
    from abm_provider.accounts.sync.statements.binding import Sql
    from abm_provider.accounts.sync.statements.tables import StateSql

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
    """One sent batch: plan rows ``start`` to ``end`` of an action, the rows, the service's answer, and
    the rows held back from the request to wait (by plan number, with why)."""

    start: int
    end: int
    rows: list[PlanRow]
    sent: SplitResult
    waiting: Mapping[int, str] = field(default_factory=dict)

    @property
    def refused(self) -> dict[int, str]:
        """The plan numbers of the accounts the service refused with ``400``, with its reason."""
        return {self.start + position: reason for position, reason in self.sent.refused}

    def unmatched(self) -> set[int]:
        """The plan numbers of the accepted accounts the service echoed back as not found (not removed).

        An add echoes the accounts it did not find; a removal, those it did not find on the list.
        Most batches echo none: their rows are then not indexed by id, a thousand ids a batch that
        the thread recording the answers would index for nothing.
        """
        not_found = self.sent.result.not_found
        if not not_found:
            return set()
        refused = dict(self.sent.refused)
        accepted = [
            i for i in range(len(self.rows)) if i not in refused and self.start + i not in self.waiting
        ]
        echoed = _positions_by_id([self.rows[i] for i in accepted], not_found)
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

    @cached_property
    def state(self) -> StateSql:
        """The state tables as the statements name them on this database."""
        return self.db.state_sql(self.tables)

    def record_added(self, run_id: str, answered: Sequence[Answered], *, replaces_not_found: bool) -> None:
        """Record the answered add batches (consecutive in the plan) as members, less the refused.

        An account not found, or refused with ``400``, becomes a reject of this run, so it is neither a
        member nor sent again (an account not found is, once ``retry_not_found_after`` has passed).
        When ``replaces_not_found``, a not-found reject of an earlier run for the same values is
        replaced: the account was just sent again. A row that waits was not sent: it is logged
        ``waiting`` with why, and is neither a member nor a reject, so a later run plans it again.
        """
        state = self.state
        now = utc_now()
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
        for batch in answered:
            for seq, reason in sorted(batch.waiting.items()):
                exceptions.add(seq)
                account_id, org, *_rest = batch.rows[seq - batch.start]
                log.append((self.list_id, run_id, "add", WAITING_OUTCOME, account_id, org, reason, None, now))
        # A plan holds each key once, and it left out the members when it was made under the list's
        # lock, which this run still holds (earlier unfinished runs are completed before a run plans):
        # so only a full resync, which plans members too, can meet one here, or an earlier run this
        # one completes, which may have been a full resync. Each check scans the growing members
        # table on a database that joins by hashing.
        new_only = self.options.full_resync or run_id != self.options.run_id
        with self.db.transaction():
            if replaces_not_found:
                self.db.execute(
                    statements.delete_replaced_not_found(
                        state, self.list_id, run_id, NOT_FOUND_ACTION, first, last
                    )
                )
            if rejects:  # timed by the service's clock, which a batch with none needs not read
                service_now = self.clock.now()
                self.db.executemany(statements.insert_reject(state), [[*r, service_now] for r in rejects])
            if self.options.full_resync and rejects:
                self._forget_refused_members(run_id, first, last)
            self.db.execute(
                statements.insert_members(
                    state, self.list_id, run_id, first, last, now, other_than(exceptions), new_only=new_only
                )
            )
            outcomes = _segments(
                answered, lambda b: _sent_outcome(b.sent.result.applied, b.sent.result.duplicates)
            )
            for start, end, (outcome, note) in outcomes:
                self._log_from_plan(run_id, "add", start, end, other_than(exceptions), outcome, note, now)
            self._log_rows(log)
            self._drop_recorded(run_id, "add", first, last)
            self._advance(run_id, "add", answered, log)

    def has_old_not_found(self, run_id: str) -> bool:
        """Whether the list has not-found rejects of other runs, which a re-sent account replaces.

        Asked once before a run sends: its sending only ever removes such rejects.
        """
        found = self.db.value(
            statements.has_old_not_found(self.state, self.list_id, run_id, NOT_FOUND_ACTION)
        )
        return found is not None

    def _forget_refused_members(self, run_id: str, start: int, end: int) -> None:
        """Drop members the service just refused or did not find: a full resync rebuilds from answers."""
        state = self.state
        self.db.execute(
            statements.delete_members(
                state, self.list_id, run_id, "add", start, end, statements.rejected_in_run(state)
            )
        )

    def record_removed(self, run_id: str, answered: Sequence[Answered]) -> None:
        """Drop the answered removal batches (consecutive in the plan) from the members, less the refused.

        The service answers a removal with the accounts it removed; one it did not report was not on
        the list (logged ``duplicate``: the list already was as asked). One refused with ``400`` stays
        a member, and the next run plans its removal again.
        """
        state = self.state
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
                statements.delete_members(
                    state, self.list_id, run_id, "remove", first, last, other_than(kept)
                )
            )
            self._log_from_plan(
                run_id, "remove", first, last, other_than(kept | absent), "removed", None, now
            )
            self._log_rows(log)
            self._drop_recorded(run_id, "remove", first, last)
            self._advance(run_id, "remove", answered, log)

    def _advance(
        self, run_id: str, action: str, answered: Sequence[Answered], log: list[tuple[Any, ...]]
    ) -> None:
        """Move the run's ``action`` past the ``answered`` batches, adding to its counts the accounts
        the service applied and the rows of ``log`` it refused (and of an add, its duplicates and the
        accounts it did not find). A removal it did not report counts as nothing: the list was as asked."""
        outcomes = Counter(row[3] for row in log)
        counts = {
            "added" if action == "add" else "removed": sum(b.sent.result.applied for b in answered),
            "rejected": outcomes["invalid"],
        }
        if action == "add":
            counts["duplicates"] = sum(b.sent.result.duplicates for b in answered)
            counts["not_found"] = outcomes["not_found"]
        done = answered[-1].end
        self.db.execute(statements.advance_run(self.state, self.list_id, run_id, action, done, counts))

    def _log_from_plan(
        self,
        run_id: str,
        action: str,
        start: int,
        end: int,
        except_these: Sql,
        outcome: str,
        reason: str | None,
        now: datetime,
    ) -> None:
        """Log plan rows ``start`` to ``end`` of ``action`` with one outcome, in SQL.

        Most rows of a batch share their outcome; writing them from the plan table keeps a thousand
        rows a batch from travelling back to the database. ``except_these`` leaves out the others.
        """
        self.db.execute(
            statements.log_from_plan(
                self.state, self.list_id, run_id, action, start, end, except_these, outcome, reason, now
            )
        )

    def _log_rows(self, log: list[tuple[Any, ...]]) -> None:
        """Log the few rows whose outcome differs from their batch's."""
        self.db.executemany(statements.insert_log_row(self.state), log)

    def _drop_recorded(self, run_id: str, action: str, first: int, last: int) -> None:
        """Delete plan rows ``first`` to ``last`` of ``action``: recorded, they are never read again.

        Dropped with each group, in its transaction, rather than all at once when the run is done: a
        first run's million plan rows then go while the service is answering the next group, not
        after the last one.
        """
        self.db.execute(statements.delete_plan_rows(self.state, self.list_id, run_id, action, first, last))

    def drop_recorded_before(self, run_id: str, action: str, done: int) -> None:
        """Delete the plan rows of ``action`` up to ``done`` that a run resumed here still has.

        Each group's rows go when it is recorded, so only a plan left by 0.1 (which kept them until
        the run was done) has any.
        """
        if done > 0:
            self._drop_recorded(run_id, action, 1, done)

    def record_done(self, run_id: str) -> None:
        """Mark the run done: its plan was sent and recorded whole (and dropped group by group)."""
        with self.db.transaction():
            self.db.execute(statements.mark_done(self.state, self.list_id, run_id, utc_now()))

    def forget_old_log(self, before: datetime) -> int:
        """Delete the list's run-log rows logged before ``before``; return how many went.

        A row is logged after its run started, so only the runs started before ``before`` are looked
        in, through the log's run index: a list whose runs are all recent costs one lookup in the runs
        table, not a scan of its log.
        """
        state = self.state
        runs = [str(r[0]) for r in self.db.rows(statements.runs_started_before(state, self.list_id, before))]
        if not runs:
            return 0
        old_rows = statements.old_log_rows(state, self.list_id, before, runs)
        with self.db.transaction():
            gone = int(self.db.value(count_rows(old_rows)) or 0)
            if gone:
                self.db.execute(statements.delete_rows(old_rows))
        return gone
