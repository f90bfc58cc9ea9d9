"""The list sync: diff a source of accounts against the state tables, send only the change, record it.

A run goes plan, then send, then record, keyed by the list and the Airflow run id; each step has a
module of its own:

1. **Plan** (:mod:`~abm_provider.accounts.sync.plan`): the source is staged in the warehouse and the
   change computed in SQL; the plan, the new rejects and the run's row commit together.
2. **Send** (:mod:`~abm_provider.accounts.sync.sending`): removals first, then additions, in batches
   read back from the plan.
3. **Record** (:mod:`~abm_provider.accounts.sync.recording`): each answered batch is recorded in one
   transaction with the run's progress, so a retry or a re-run after a kill resumes after the last
   recorded batch.

Before the plan is sent, the guards (:mod:`~abm_provider.accounts.sync.guards`) check how much it
removes and whether the source was empty; a tripped guard keeps the plan and fails the task with
:class:`~abm_provider.exceptions.SyncGuardTripped`, having sent nothing. Each run also trims the run
log to ``log_retention_days``.

A run that finds another run's plan left unfinished completes it first, so the recorded membership
never loses a change that may have reached the service. What the run returns is read back from its
row in the runs table (:mod:`~abm_provider.accounts.sync.summary`).

One sync of a list runs at a time: :meth:`ListSync.run` takes the list's lock in the state database
before it reads anything and releases it when it ends, whatever the ending. A second sync of the
list waits up to ``lock_timeout`` seconds for it, then fails with :class:`SyncAlreadyRunning`
naming the run that holds it, having read, sent and recorded nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.sync.clock import ServiceClock, read_service_clock_when_used
from abm_provider.accounts.sync.lock import check_lock_timeout, hold_list_lock
from abm_provider.accounts.sync.options import MODES, SyncOptions, check_options
from abm_provider.accounts.sync.plan import Planner
from abm_provider.accounts.sync.recording import Recorder
from abm_provider.accounts.sync.sending import (
    PlannedRun,
    Sender,
    refuse_preview_over_unfinished,
    unfinished_runs,
)
from abm_provider.accounts.sync.state import uses_lock_rows, utc_now
from abm_provider.accounts.sync.summary import check_drift, member_count, read_summary
from abm_provider.common.arguments import check_choice
from abm_provider.common.collector import frozen_heap
from abm_provider.common.rejects import check_limit

if TYPE_CHECKING:
    from abm_provider.accounts.sources import AccountSource
    from abm_provider.accounts.sync.database import StateDatabase
    from abm_provider.accounts.sync.guards import Tripped
    from abm_provider.accounts.sync.state import StateTables
    from abm_provider.accounts.validation import AccountValidator
    from abm_provider.hooks.abm import AbmHook


class ListSync:
    """One list's sync against its state tables, through one state connection."""

    def __init__(
        self,
        db: StateDatabase,
        tables: StateTables,
        options: SyncOptions,
        validator: AccountValidator,
        new_hook: Callable[[], AbmHook],
        log: logging.Logger | Any = None,
    ) -> None:
        check_limit(options.max_rejected, "max_rejected")
        check_lock_timeout(options.lock_timeout)
        check_options(options)
        check_choice(options.mode, "mode", MODES)
        self.db = db
        self.tables = tables
        self.options = options
        self.validator = validator
        self.new_hook = new_hook
        self.log = log or logging.getLogger(__name__)
        self.clock = ServiceClock()
        self.recorder = Recorder(db, tables, options, self.clock)
        self.planner = Planner(db, tables, options, validator, self.clock, self.log)
        self.sender = Sender(db, tables, options, new_hook, self.recorder, self.log)

    def run(self, source: AccountSource) -> dict[str, Any]:
        """Take the list's lock, then plan, send and record one run; return its summary (counts only).

        The lock is released on every way out; a killed task's lock dies with its connection.

        :raises SyncAlreadyRunning: another sync of the list had the lock for ``lock_timeout``.
        """
        with frozen_heap():
            self.db.create_tables(self.tables.create_sql(self.db.dialect), self.tables.lock_key())
            key = self.tables.lock_key(self.options.list_id)
            options = self.options
            dialect = self.db.dialect
            rows = dialect.table_sql(self.tables.locks) if uses_lock_rows(dialect) else None
            hold_list_lock(
                self.db, key, options.list_id, options.run_id, options.lock_timeout, self.log, rows
            )
            try:
                return self._run(source)
            finally:
                self.db.unlock(key)

    def _run(self, source: AccountSource) -> dict[str, Any]:
        """Complete what earlier runs left unfinished, then plan and send this run (or resume it)."""
        self._read_service_clock()
        unfinished = unfinished_runs(self.db, self.tables, self.options.list_id)
        if self.options.dry_run:
            refuse_preview_over_unfinished(unfinished, self.options.run_id)
            if unfinished:
                self.log.warning(
                    "Runs %s left plans unfinished; the next real run completes them before planning",
                    [u.run_id for u in unfinished],
                )
            tripped = self._plan(source)
            self._log_plan()
            if tripped is not None:
                self.log.warning(
                    "%s (dry run: reported, not enforced)",
                    tripped.error(self.options, self.db.names(self.tables).plan),
                )
            return self.summary()
        self._trim_log()
        own = None
        for earlier in unfinished:
            if earlier.run_id == self.options.run_id:
                own = earlier
                continue
            self.log.warning(
                "Run %s left its plan unfinished; completing it before planning this run", earlier.run_id
            )
            self._send_run(earlier)
        if own is not None:
            self.log.info(
                "Resuming this run's plan: %d of %d removals and %d of %d additions already recorded",
                own.remove_done,
                own.to_remove,
                own.add_done,
                own.to_add,
            )
            self._send_run(own)
        else:
            tripped = self._plan(source)
            self._log_plan()
            if tripped is not None:
                raise tripped.error(self.options, self.db.names(self.tables).plan)
            self._send_run(self._planned(self.options.run_id))
        return self.summary()

    def _read_service_clock(self) -> None:
        """Align the clock that times not-found retries with the service's (one cheap request, the
        first time the run needs the time: a run with no refusal to record or hold back makes none).

        Skipped when not-found accounts are held until they change: then no delay is measured.
        """
        if self.options.retry_not_found_after is not None:
            read_service_clock_when_used(self.clock, self.new_hook, self.log)

    def _trim_log(self) -> None:
        """Drop the list's run-log rows older than ``log_retention_days``."""
        days = self.options.log_retention_days
        if days is None:
            return
        gone = self.recorder.forget_old_log(utc_now() - timedelta(days=days))
        if gone:
            self.log.info("Run log: %d rows older than %g days removed", gone, days)

    def _plan(self, source: AccountSource) -> Tripped | None:
        """Stage the source and write this run's plan, its new rejects and its row, all or nothing."""
        return self.planner.plan(source)

    def _log_plan(self) -> None:
        """Log the plan's counts and a sample, so a dry run (or a surprise) is readable in the log."""
        self.planner.log_plan(read_summary(self.db, self.tables, self.options, count_members=False))

    def _planned(self, run_id: str) -> PlannedRun:
        """The run ``run_id`` as its plan was just written."""
        for run in unfinished_runs(self.db, self.tables, self.options.list_id):
            if run.run_id == run_id:
                return run
        raise RuntimeError(f"run {run_id!r} of list {self.options.list_id!r} has no plan to send")

    def _send_run(self, run: PlannedRun) -> None:
        """Send and record what is left of ``run``'s plan, then mark it done."""
        self.sender.send_run(run)

    def summary(self) -> dict[str, Any]:
        """The run's counts from its row in the runs table (cumulative over the run's tries)."""
        return read_summary(self.db, self.tables, self.options)

    def state_count(self) -> int:
        """How many accounts the list holds by our record."""
        return member_count(self.db, self.tables, self.options.list_id)

    def check_drift(self, hook: AbmHook, summary: dict[str, Any]) -> None:
        """Warn when the service's ``estimatedAccountsCount`` differs from the state's count."""
        check_drift(hook, summary, self.options.list_id, self.log)
