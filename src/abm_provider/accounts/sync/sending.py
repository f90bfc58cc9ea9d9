"""Sending a run's plan: removals first, then additions, in batches read back from the plan table.

Removals go first so that a key that moves (an account given by id alone, then with the org the
service filled in) ends on the list: sent the other way round, the removal would take the new
membership away. Batches are read from the plan by their sequence numbers, so a run resumed after a
crash starts after the last group :class:`~abm_provider.accounts.sync.recording.Recorder` recorded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.sync.recording import Answered
from abm_provider.accounts.sync.splitting import SplitResult, send_splitting
from abm_provider.accounts.sync.state import SENDING
from abm_provider.accounts.sync.statements import runs as statements
from abm_provider.common.concurrency import PerThread, in_order
from abm_provider.compat import AirflowFailException
from abm_provider.exceptions import PlanRowsMissing

if TYPE_CHECKING:
    from abm_provider.accounts.sync.database import StateDatabase
    from abm_provider.accounts.sync.options import SyncOptions
    from abm_provider.accounts.sync.recording import Recorder
    from abm_provider.accounts.sync.state import StateTables
    from abm_provider.hooks.abm import AbmHook

#: Accounts recorded per transaction: one statement per table for many batches, rather than per batch.
#: A kill loses at most this many answered accounts from the record; they are sent again as duplicates.
RECORD_ACCOUNTS = 16_000

#: Plan rows ``start`` to ``end`` of one action, the rows themselves, and those of them to wait (by plan
#: number, with why): held back from the request, see :data:`Waiting`.
Batch = tuple[int, int, list[tuple[Any, ...]], Mapping[int, str]]

#: Which additions of a run's plan rows ``first`` to ``last`` must wait, given ``(run_id, first,
#: last)``: their plan numbers, each with the reason logged. An audience sync holds back the addition
#: of an account whose removal from another of its lists the service refused, so that the account is
#: never on both; a later run plans the move again.
Waiting = Callable[[str, int, int], Mapping[int, str]]

_NONE_WAITING: Mapping[int, str] = {}


@dataclass(frozen=True)
class PlannedRun:
    """A run's row in the runs table: how big its plan is and how far each action got."""

    run_id: str
    to_add: int
    to_remove: int
    add_done: int
    remove_done: int


def unfinished_runs(db: StateDatabase, tables: StateTables, list_id: str) -> list[PlannedRun]:
    """The list's runs whose plan is written and not yet sent whole, oldest first."""
    rows = db.rows(statements.unfinished_runs(db.state_sql(tables), list_id, SENDING))
    return [PlannedRun(str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows]


def refuse_preview_over_unfinished(unfinished: Iterable[PlannedRun], run_id: str) -> None:
    """A dry run writes its plan under its run id, replacing that run's: refuse one whose run left its
    plan unfinished, which the retry must complete (its first try's requests are in it).

    :raises AirflowFailException: naming the run and what to do, with nothing changed.
    """
    if any(run.run_id == run_id for run in unfinished):
        raise AirflowFailException(
            f"Run {run_id!r} left its plan unfinished; a dry run under the same run id would replace it, "
            "and the run's retry would then plan afresh, without what its first try sent. Run the task "
            "without dry_run to complete the plan, or preview under another run id. Nothing was changed."
        )


@dataclass(frozen=True)
class Sender:
    """Sends what is left of a run's plan and has each answered batch recorded."""

    db: StateDatabase
    tables: StateTables
    options: SyncOptions
    new_hook: Callable[[], AbmHook]
    recorder: Recorder
    log: logging.Logger | Any

    def send_run(self, run: PlannedRun) -> None:
        """Send what is left of ``run``'s plan, removals first, then mark the run done."""
        self.send_removals(run)
        self.send_additions(run)

    def send_removals(self, run: PlannedRun) -> None:
        """Send what is left of ``run``'s removals (an audience sends every list's before any addition).

        Each thread that sends gets a hook of its own, since a hook's HTTP session is not shared
        between threads.
        """
        self.recorder.drop_recorded_before(run.run_id, "remove", run.remove_done)
        hooks = PerThread(self.new_hook)
        try:
            self._send_action(run, "remove", run.to_remove, run.remove_done, hooks.get)
        finally:
            hooks.close()

    def send_additions(self, run: PlannedRun, waiting: Waiting | None = None) -> None:
        """Send what is left of ``run``'s additions, once its removals are all recorded; then mark the
        run done. The additions ``waiting`` names are not sent, but logged and passed as done."""
        self.recorder.drop_recorded_before(run.run_id, "add", run.add_done)
        if run.add_done < run.to_add:
            hooks = PerThread(self.new_hook)
            try:
                replaces = self.recorder.has_old_not_found(run.run_id)
                self._send_action(run, "add", run.to_add, run.add_done, hooks.get, replaces, waiting)
            finally:
                hooks.close()
        self.recorder.record_done(run.run_id)

    @property
    def _group(self) -> int:
        """Batches recorded per transaction: :data:`RECORD_ACCOUNTS` accounts' worth, at least one."""
        return max(1, RECORD_ACCOUNTS // self.options.batch_size)

    def _batches(
        self, run: PlannedRun, action: str, total: int, done: int, waiting: Waiting | None = None
    ) -> Iterator[Batch]:
        """The plan rows after ``done``, ``batch_size`` at a time, read a group of batches per query,
        each batch with those of its rows that must wait.

        Read when the sender is ready for them, so no more than a group's rows are held at once.
        """
        state = self.db.state_sql(self.tables)
        size = self.options.batch_size
        chunk = size * self._group
        for first in range(done + 1, total + 1, chunk):
            last = min(first + chunk - 1, total)
            rows = self.db.rows(
                statements.plan_rows(state, self.options.list_id, run.run_id, action, first, last)
            )
            if len(rows) != last - first + 1:
                raise self._missing(run, action, first, last, len(rows))
            held = waiting(run.run_id, first, last) if waiting is not None else _NONE_WAITING
            for start in range(first, last + 1, size):
                end = min(start + size - 1, last)
                waits = {seq: why for seq, why in held.items() if start <= seq <= end} if held else held
                yield start, end, rows[start - first : end - first + 1], waits

    def _missing(self, run: PlannedRun, action: str, first: int, last: int, read: int) -> PlanRowsMissing:
        """The error for a read of plan rows ``first`` to ``last`` that gave back ``read`` rows.

        Sending the rows read and recording the range as done would mark accounts sent that never
        were, and the run would end as if whole.
        """
        return PlanRowsMissing(
            f"The plan of run {run.run_id!r} on list {self.options.list_id} holds {action} rows {first} "
            f"to {last} ({last - first + 1}) by its row in the runs table, and the state database gave "
            f"back {read} of them from {self.db.names(self.tables).plan}. Nothing of these was sent; "
            f"the {action}s recorded before row {first} stand. Run the task again to resume from the "
            f"plan; if the rows are gone from the table, delete the run's row from "
            f"{self.db.names(self.tables).runs} so that the next run plans afresh."
        )

    def _send_action(
        self,
        run: PlannedRun,
        action: str,
        total: int,
        done: int,
        hook: Callable[[], AbmHook],
        replaces_not_found: bool = False,
        waiting: Waiting | None = None,
    ) -> None:
        """Send one action's batches after ``done``, up to ``max_in_flight`` at once, recorded in order.

        Answers are recorded in plan order whatever order they arrive in, so ``add_done`` or
        ``remove_done`` always marks a prefix of the plan as recorded.
        """
        names = self.db.names(self.tables)
        if done >= total:
            return
        options = self.options

        def send(batch: Batch) -> SplitResult:
            start, _, rows, waits = batch
            posted = [i for i in range(len(rows)) if start + i not in waits] if waits else range(len(rows))
            if not posted:
                return SplitResult()  # every account of the batch waits: no request
            client = hook()
            result = send_splitting(
                lambda part: client.change_membership(
                    action, options.list_id, part, batch_size=options.batch_size, keep_not_found=True
                ),
                [_payload(rows[i], action) for i in posted],
            )
            if waits:  # the refused accounts' positions, from the request's to the batch's
                result.refused = [(posted[position], reason) for position, reason in result.refused]
            return result

        started = last = time.monotonic()
        sent = recorded = 0
        # A group's worth of batches waits behind the running requests, so the service keeps working
        # while a group is recorded; no more requests than max_in_flight are open at once.
        answers = in_order(
            send,
            self._batches(run, action, total, done, waiting),
            options.max_in_flight,
            f"abm-sync-{action}",
            queued=self._group,
        )
        for group in _groups(answers, self._group):
            if action == "add":
                self.recorder.record_added(run.run_id, group, replaces_not_found=replaces_not_found)
            else:
                self.recorder.record_removed(run.run_id, group)
            sent += sum(len(batch.rows) - len(batch.waiting) for batch in group)
            before, recorded = recorded, recorded + len(group)
            if action == "add" and before and recorded.bit_length() > before.bit_length():
                # Statistics taken while the list was small would have the planner hash all of the
                # members for every group recorded; refreshing them as this run's additions double
                # keeps each group an index lookup at a logarithmic number of ANALYZEs (none for a run
                # that adds one group: the statistics it started with serve it).
                self.db.analyze(names.members)
            end = group[-1].end
            now = time.monotonic()
            if now - last >= options.progress_interval or end == total:
                last = now
                self.log.info(
                    "%s: %d of %d accounts sent and recorded (%.0f accounts/s)",
                    "Adding" if action == "add" else "Removing",
                    end,
                    total,
                    sent / max(now - started, 1e-9),
                )


def _groups(answers: Iterator[tuple[Batch, SplitResult]], size: int) -> Iterator[list[Answered]]:
    """The answered batches, ``size`` at a time; those answered before a failure, then the failure.

    A batch that fails raises when its turn comes, so the batches answered before it are recorded
    first and a retry does not send them again.
    """
    group: list[Answered] = []
    try:
        for (start, end, rows, waits), result in answers:
            group.append(Answered(start, end, rows, result, waits))
            if len(group) >= size:
                yield group
                group = []
    except Exception:
        if group:
            yield group
        raise
    if group:
        yield group


def _payload(row: tuple[Any, ...], action: str) -> dict[str, str]:
    """The request's account from a plan row: only what the row has (the service fills the rest)."""
    account_id, org, crm_type, name, _ = row
    account = {"id": account_id}
    if name and action == "add":
        account["name"] = name
    if org:
        account["crmOrgId"] = org
    if crm_type:
        account["crmType"] = crm_type
    return account
