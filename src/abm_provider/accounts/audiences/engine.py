"""The audience sync: one source tiered over many lists, planned as one, sent removals first.

A run of a programme (its lists in priority order, an audience each) goes:

1. **Lock** every list of the programme, in the order of their ids, as the list sync locks one: no
   list sync and no other programme plans or sends on them meanwhile.
2. **Complete** what an earlier run left unfinished on any of the lists (its removals on every list,
   then its additions), or resume this run's own plan.
3. **Tier** the source once (:mod:`~abm_provider.accounts.audiences.tiering`) and **plan** each list
   from the rows assigned to it, with the list sync's planner. Every list's plan, the guards' verdict,
   the run rows and the moves commit in one transaction: the programme has a whole plan or none.
4. **Guard**: the programme's removals against all of its recorded members, an empty source, then
   each list's (an emptied tier stops the run); a tripped guard stops every list with nothing sent.
5. **Send** every list's removals, then every list's additions. An account that moves between tiers
   leaves its old list before it joins its new one, so it is never on two lists of the programme, even
   when the run dies in between: the rerun resumes the plan and adds it. A move whose removal the
   service refused waits: its addition is held back (logged ``waiting``), and the next run plans the
   move again.

The summary has an entry per list, the moves between them, and the programme's totals.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.audiences.guards import ProgrammeTrip, check_programme
from abm_provider.accounts.audiences.moves import MovesLog
from abm_provider.accounts.audiences.summary import programme_summary
from abm_provider.accounts.audiences.tiering import Exclusion, Tier, Tiering
from abm_provider.accounts.sync.clock import ServiceClock, read_service_clock_when_used
from abm_provider.accounts.sync.lock import hold_list_lock
from abm_provider.accounts.sync.plan import Planner
from abm_provider.accounts.sync.recording import Recorder
from abm_provider.accounts.sync.sending import (
    PlannedRun,
    Sender,
    Waiting,
    refuse_preview_over_unfinished,
    unfinished_runs,
)
from abm_provider.accounts.sync.state import uses_lock_rows, utc_now
from abm_provider.accounts.sync.statements.binding import text
from abm_provider.accounts.sync.summary import read_summary
from abm_provider.common.collector import frozen_heap

if TYPE_CHECKING:
    from abm_provider.accounts.sources import AccountSource
    from abm_provider.accounts.sync.database import StateDatabase
    from abm_provider.accounts.sync.options import SyncOptions
    from abm_provider.accounts.sync.state import StateTables
    from abm_provider.accounts.validation import AccountValidator
    from abm_provider.hooks.abm import AbmHook

#: Accounts shown per move in the log.
_SAMPLE = 5


@dataclass(frozen=True)
class Audience:
    """One tier of a programme: the audience column's ``value`` and the list that keeps it."""

    value: str
    list_id: str


@dataclass(frozen=True)
class _Tier:
    """One list of the programme, with the list sync's parts working on it."""

    audience: Audience
    place: int
    options: SyncOptions
    planner: Planner
    sender: Sender
    recorder: Recorder


class AudienceSync:
    """A programme's sync: ``audiences`` in priority order (the first is the highest), each value of
    ``column`` kept on its list, ``exclusions`` and the members of ``exclude_lists`` on none."""

    def __init__(
        self,
        db: StateDatabase,
        tables: StateTables,
        audiences: Sequence[Audience],
        column: str,
        options: SyncOptions,
        validator: AccountValidator,
        new_hook: Callable[[], AbmHook],
        *,
        exclusions: Sequence[Exclusion] = (),
        exclude_lists: Sequence[str] = (),
        log: logging.Logger | Any = None,
    ) -> None:
        check_programme_lists(audiences, exclude_lists)
        self.db = db
        self.tables = tables
        self.column = column
        self.options = options
        self.validator = validator
        self.new_hook = new_hook
        self.exclusions = tuple(exclusions)
        self.exclude_lists = tuple(exclude_lists)
        self.log = log or logging.getLogger(__name__)
        self.clock = ServiceClock()
        self.tiers = [self._tier(audience, place) for place, audience in enumerate(audiences, start=1)]
        self.list_ids = [t.audience.list_id for t in self.tiers]
        self.moves = MovesLog(db, tables, options.run_id, self.list_ids)
        self.tripped: ProgrammeTrip | None = None

    def _tier(self, audience: Audience, place: int) -> _Tier:
        options = replace(self.options, list_id=audience.list_id)
        recorder = Recorder(self.db, self.tables, options, self.clock)
        planner = Planner(self.db, self.tables, options, self.validator, self.clock, self.log)
        sender = Sender(self.db, self.tables, options, self.new_hook, recorder, self.log)
        return _Tier(audience, place, options, planner, sender, recorder)

    # ---- the run ----------------------------------------------------------------------------------

    def run(self, source: AccountSource) -> dict[str, Any]:
        """Lock every list, then complete, plan, guard and send one run; return its summary.

        :raises SyncAlreadyRunning: another sync had one of the lists for ``lock_timeout``.
        :raises SyncGuardTripped: a guard stopped the programme; nothing was sent on any list.
        """
        with frozen_heap():
            return self._locked_run(source)

    def _locked_run(self, source: AccountSource) -> dict[str, Any]:
        db, dialect = self.db, self.db.dialect
        db.create_tables([*self.tables.create_sql(dialect), self.moves.create_sql()], self.tables.lock_key())
        rows = dialect.table_sql(self.tables.locks) if uses_lock_rows(dialect) else None
        held: list[str] = []
        try:
            for list_id in sorted(set(self.list_ids)):
                key = self.tables.lock_key(list_id)
                hold_list_lock(
                    db, key, list_id, self.options.run_id, self.options.lock_timeout, self.log, rows
                )
                held.append(key)
            return self._run(source)
        finally:
            for key in reversed(held):
                db.unlock(key)

    def _run(self, source: AccountSource) -> dict[str, Any]:
        options = self.options
        if options.retry_not_found_after is not None:
            read_service_clock_when_used(self.clock, self.new_hook, self.log)
        unfinished = [(tier, run) for tier in self.tiers for run in self._unfinished(tier)]
        if options.dry_run:
            refuse_preview_over_unfinished([run for _, run in unfinished], options.run_id)
            if unfinished:
                self.log.warning(
                    "Lists %s have plans left unfinished; the next real run completes them before planning",
                    sorted({tier.audience.list_id for tier, _ in unfinished}),
                )
            self.tripped = self._plan(source)
            self._log_plan()
            if self.tripped is not None:
                self.log.warning("%s (dry run: reported, not enforced)", self._error(self.tripped))
            return self.summary()
        earlier = [(tier, run) for tier, run in unfinished if run.run_id != options.run_id]
        own = [(tier, run) for tier, run in unfinished if run.run_id == options.run_id]
        if earlier:
            self.log.warning(
                "Runs %s left plans unfinished on lists %s; completing them before planning this run",
                sorted({run.run_id for _, run in earlier}),
                sorted({tier.audience.list_id for tier, _ in earlier}),
            )
            self._send(earlier)
        if own:
            self.log.info("Resuming this run's plan on lists %s", [tier.audience.list_id for tier, _ in own])
            self._send(own)
        # Only once every unfinished plan is sent: its moves say which of its additions wait, and a
        # plan left long enough ago would lose them to the trim and add an account to a second list.
        self._trim_log()
        if not own:
            self.tripped = self._plan(source)
            self._log_plan()
            if self.tripped is not None:
                raise self._error(self.tripped)
            planned = [(tier, run) for tier in self.tiers for run in self._unfinished(tier)]
            self._send([(tier, run) for tier, run in planned if run.run_id == options.run_id])
        return self.summary()

    def _unfinished(self, tier: _Tier) -> list[PlannedRun]:
        return unfinished_runs(self.db, self.tables, tier.audience.list_id)

    def _trim_log(self) -> None:
        """Drop run-log rows and moves older than ``log_retention_days``."""
        days = self.options.log_retention_days
        if days is None:
            return
        before = utc_now() - timedelta(days=days)
        gone = sum(tier.recorder.forget_old_log(before) for tier in self.tiers)
        with self.db.transaction():
            moved = self.moves.forget_before(before)
        if gone or moved:
            self.log.info("Run log: %d rows and %s moves older than %g days removed", gone, moved, days)

    # ---- planning ---------------------------------------------------------------------------------

    def _plan(self, source: AccountSource) -> ProgrammeTrip | None:
        """Tier the source and write every list's plan, the guards' verdict and the moves, all or none."""
        tiering = Tiering(
            self.db,
            self.tables,
            self.options,
            self.validator,
            self.column,
            [tier.audience.value for tier in self.tiers],
            self.list_ids,
            self.exclusions,
            self.exclude_lists,
            self.log,
        )
        prepared = []
        try:
            tiered = tiering.build(source)
            members = None if tiered.members is None else text(tiered.members)
            for tier in self.tiers:
                source_rows = tiering.source_of(tiered, tier.place)
                ready = tier.planner.prepare(source_rows, members, unique=not tiered.repeats)
                prepared.append((tier, ready))
            counted = tiered.member_counts
            with self.db.transaction():
                written = [
                    (tier, tier.planner.write(ready, counted[tier.audience.list_id]))
                    for tier, ready in prepared
                ]
                tripped = check_programme(
                    self.options,
                    tiered.rows,
                    [
                        (tier.audience.value, tier.options, w, tiered.tiers.get(tier.place, Tier()).rows)
                        for tier, w in written
                    ],
                )
                for tier, w in written:
                    tier.planner.finish(w, blocked=tripped is not None)
                self.moves.write(tiering, utc_now())
            self.tiers[0].planner.settle(*(w for _, w in written))
        finally:
            for tier, ready in prepared:
                tier.planner.drop(ready)
            tiering.drop()
        return tripped

    def _log_plan(self) -> None:
        """Each list's plan, then each move with a sample of its accounts."""
        for tier in self.tiers:
            self.log.info("Audience %r (list %s):", tier.audience.value, tier.audience.list_id)
            tier.planner.log_plan(read_summary(self.db, self.tables, tier.options, count_members=False))
        moves = self.moves.read()
        by_list = {tier.audience.list_id: tier.audience.value for tier in self.tiers}
        for (source, target), count in moves.in_order(self.list_ids):
            self.log.info(
                "Moves: %d accounts from %r to %r, e.g. %s",
                count,
                by_list.get(source, source),
                by_list.get(target, target),
                ", ".join(self.moves.sample(source, target, _SAMPLE)),
            )
        for tier in self.tiers:
            excluded = moves.excluded(tier.audience.list_id)
            if excluded:
                self.log.info(
                    "Excluded: %d accounts of %r (%d removed from its list, %d kept off it)",
                    excluded,
                    tier.audience.value,
                    moves.excluded_from.get(tier.audience.list_id, 0),
                    moves.kept_off.get(tier.audience.list_id, 0),
                )

    # ---- sending ----------------------------------------------------------------------------------

    def _send(self, runs: Sequence[tuple[_Tier, PlannedRun]]) -> None:
        """Send the runs' removals on every list, then their additions, each list in priority order,
        less the additions whose move waits."""
        for tier, run in runs:
            tier.sender.send_removals(run)
        # Whether each run counts a refusal is asked once per run, not once per list of it.
        refused = {run.run_id: self.moves.any_refused(run.run_id) for _, run in runs}
        for tier, run in runs:
            waiting = self._waiting(tier, run) if refused[run.run_id] else None
            tier.sender.send_additions(run, waiting)
        for run_id in dict.fromkeys(run.run_id for _, run in runs):
            # A run that counted a refusal before its additions still does; one that did not is asked again.
            if refused[run_id] or self.moves.any_refused(run_id):
                self._mark_refused(run_id, [tier for tier, run in runs if run.run_id == run_id])

    def _mark_refused(self, run_id: str, tiers: Sequence[_Tier]) -> None:
        """After every addition of the run onto ``tiers``' lists: its moves there whose addition the
        service refused are not made (the account left its old list and is on none); they are marked
        so, not counted as moved, and said."""
        for tier in tiers:
            count = self.moves.mark_refused(run_id, tier.audience.list_id)
            if count:
                self.log.warning(
                    "Audience %r (list %s): the service refused %d accounts moving onto it: they left the "
                    "list they were on and are on none (reasons in the run log and %s)",
                    tier.audience.value,
                    tier.audience.list_id,
                    count,
                    self.db.names(self.tables).rejects,
                )

    def _waiting(self, tier: _Tier, run: PlannedRun) -> Waiting | None:
        """The additions of ``run`` onto the tier's list that wait, or ``None`` when none do.

        An account whose removal from the list it leaves the service refused (a ``400`` for that
        account) is still on that list by the record: added now, it would be on two lists of the
        programme. Its addition is held back and logged; the next run plans the move again.
        """
        if run.add_done >= run.to_add:
            return None
        list_id = tier.audience.list_id
        count = self.moves.mark_waiting(run.run_id, list_id)
        if not count:
            return None
        self.log.warning(
            "Audience %r (list %s): %d accounts moving onto it wait: the service refused their removal "
            "from the list they leave, so they stay there and are not added (logged 'waiting'); the next "
            "run moves them again",
            tier.audience.value,
            list_id,
            count,
        )
        reasons = {t.audience.list_id: _waiting_reason(t.audience) for t in self.tiers}

        def waiting(run_id: str, first: int, last: int) -> dict[int, str]:
            rows = self.moves.waiting_rows(run_id, list_id, first, last)
            return {
                seq: reasons.get(source) or _waiting_reason(Audience(source, source))
                for seq, source in rows.items()
            }

        return waiting

    # ---- the result -------------------------------------------------------------------------------

    def _error(self, tripped: ProgrammeTrip) -> Exception:
        return tripped.error(self.options.run_id, self.db.names(self.tables).plan)

    def summary(self) -> dict[str, Any]:
        """An entry per list, the moves between them, and the programme's totals."""
        return programme_summary(
            self.db,
            self.tables,
            [(tier.audience.value, tier.options) for tier in self.tiers],
            self.moves.read(),
            self.tripped,
        )


def _waiting_reason(left: Audience) -> str:
    """What the run log says of an addition that waits for its account to leave ``left``'s list."""
    return (
        f"still on list {left.list_id} ({left.value!r}), whose removal the service refused: not added, "
        "so that it is on one list of the programme; the next run moves it again"
    )


def check_programme_lists(audiences: Sequence[Audience], exclude_lists: Sequence[str]) -> None:
    """Refuse a programme with no audience, an audience or list named twice, or a list that is both
    kept and excluded."""
    if not audiences:
        raise ValueError("audiences is empty: map at least one audience value to a list")
    values = [a.value for a in audiences]
    lists = [a.list_id for a in audiences]
    for name, seen in (("audience value", values), ("list", lists)):
        twice = sorted({v for v in seen if seen.count(v) > 1})
        if twice:
            raise ValueError(f"audiences names the {name} {twice} more than once: each tier has its own")
    both = sorted(set(lists) & set(exclude_lists))
    if both:
        raise ValueError(f"lists {both} are both kept by this programme and excluded from it")
