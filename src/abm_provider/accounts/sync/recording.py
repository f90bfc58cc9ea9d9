"""Recording what the service answered: one batch per transaction, with the run's progress.

Each answered batch changes the members table, writes its run-log rows and moves the run's
``add_done`` or ``remove_done`` in the same transaction, so the record never says a batch is done
without its members, nor the other way round. A retry or a re-run after a kill resumes after the
last batch recorded here; at most the batches in flight at the crash are sent again, which the
service answers as duplicates.
"""

from __future__ import annotations

from collections.abc import Sequence
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
class Recorder:
    """Writes the answers of one list's batches into its state tables and its run log."""

    db: StateDatabase
    tables: StateTables
    options: SyncOptions
    clock: ServiceClock

    @property
    def list_id(self) -> str:
        return self.options.list_id

    def record_added(self, run_id: str, start: int, end: int, rows: list[PlanRow], sent: SplitResult) -> None:
        """Record plan rows ``start`` to ``end`` of an add as members, less those the service refused.

        An account not found, or refused with ``400``, becomes a reject of this run, so it is neither a
        member nor sent again (an account not found is, once ``retry_not_found_after`` has passed).
        A not-found reject of an earlier run for the same values is replaced: the account was just
        sent again.
        """
        names = self.db.names(self.tables)
        result = sent.result
        now, service_now = utc_now(), self.clock.now()
        refused = dict(sent.refused)
        accepted = [i for i in range(len(rows)) if i not in refused]
        missing = {accepted[i] for i in _positions_by_id([rows[i] for i in accepted], result.not_found)}
        echoed = {str(item.get("id", "")): item for item in result.not_found}
        rejects: list[list[Any]] = []
        log: list[tuple[Any, ...]] = []
        outcome, note = _sent_outcome(result.applied, result.duplicates)
        for position, (account_id, org, _crm_type, _name, values) in enumerate(rows):
            if position in refused:
                reason = refused[position]
                rejects.append([self.list_id, run_id, REFUSED_ACTION, account_id, org, values, reason, None])
                log.append((self.list_id, run_id, "add", "invalid", account_id, org, reason, None, now))
            elif position in missing:
                raw = raw_json(echoed.get(str(account_id), {"id": account_id}))
                rejects.append(
                    [self.list_id, run_id, NOT_FOUND_ACTION, account_id, org, values, NOT_FOUND_REASON, raw]
                )
                log.append((self.list_id, run_id, "add", "not_found", account_id, org, None, None, now))
            else:
                log.append((self.list_id, run_id, "add", outcome, account_id, org, note, None, now))
        plan_rows = (
            f"SELECT p.row_hash FROM {names.plan} p WHERE p.list_id = ? AND p.run_id = ? "
            "AND p.action = 'add' AND p.seq BETWEEN ? AND ?"
        )
        with self.db.transaction():
            self.db.execute(
                f"DELETE FROM {names.rejects} WHERE list_id = ? AND action = ? AND run_id <> ? "
                f"AND row_hash IN ({plan_rows})",
                [self.list_id, NOT_FOUND_ACTION, run_id, self.list_id, run_id, start, end],
            )
            self.db.executemany(
                f"INSERT INTO {names.rejects} (list_id, run_id, action, account_id, crm_org_id, "
                "row_hash, reason, raw, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [[*r, service_now] for r in rejects],
            )
            if self.options.full_resync and rejects:
                self._forget_refused_members(run_id, start, end)
            self.db.execute(
                f"INSERT INTO {names.members} (list_id, account_id, crm_org_id, crm_type, account_name, "
                "row_hash, run_id, synced_at) SELECT p.list_id, p.account_id, p.crm_org_id, p.crm_type, "
                f"p.account_name, p.row_hash, p.run_id, ? FROM {names.plan} p WHERE p.list_id = ? "
                "AND p.run_id = ? AND p.action = 'add' AND p.seq BETWEEN ? AND ? "
                f"AND NOT EXISTS (SELECT 1 FROM {names.members} m WHERE m.list_id = p.list_id "
                "AND m.account_id = p.account_id AND m.crm_org_id = p.crm_org_id) "
                f"AND NOT EXISTS (SELECT 1 FROM {names.rejects} r WHERE r.list_id = p.list_id "
                "AND r.run_id = p.run_id AND r.row_hash = p.row_hash)",
                [now, self.list_id, run_id, start, end],
            )
            self.db.stage(names.log, LOG_COLUMNS, log)
            self.db.execute(
                f"UPDATE {names.runs} SET add_done = ?, added = added + ?, duplicates = duplicates + ?, "
                "not_found = not_found + ?, rejected = rejected + ? WHERE list_id = ? AND run_id = ?",
                [
                    end,
                    result.applied,
                    result.duplicates,
                    len(missing),
                    len(refused),
                    self.list_id,
                    run_id,
                ],
            )

    def _forget_refused_members(self, run_id: str, start: int, end: int) -> None:
        """Drop members the service just refused or did not find: a full resync rebuilds from answers."""
        names = self.db.names(self.tables)
        members = names.members
        self.db.execute(
            self.db.dialect.delete_matching_sql(
                members,
                f"{members}.list_id = ?",
                f"{names.plan} p",
                f"p.list_id = {members}.list_id AND p.run_id = ? AND p.action = 'add' "
                f"AND p.seq BETWEEN ? AND ? AND p.account_id = {members}.account_id "
                f"AND p.crm_org_id = {members}.crm_org_id AND EXISTS (SELECT 1 FROM {names.rejects} r "
                "WHERE r.list_id = p.list_id AND r.run_id = p.run_id AND r.row_hash = p.row_hash)",
            ),
            [self.list_id, run_id, start, end],
        )

    def record_removed(
        self, run_id: str, start: int, end: int, rows: list[PlanRow], sent: SplitResult
    ) -> None:
        """Drop plan rows ``start`` to ``end`` of a removal from the members, less those refused.

        The service answers a removal with the accounts it removed; one it did not report was not on
        the list (logged ``duplicate``: the list already was as asked). One refused with ``400`` stays
        a member, and the next run plans its removal again.
        """
        names = self.db.names(self.tables)
        members = names.members
        result = sent.result
        now = utc_now()
        refused = dict(sent.refused)
        accepted = [i for i in range(len(rows)) if i not in refused]
        absent = {accepted[i] for i in _positions_by_id([rows[i] for i in accepted], result.not_found)}
        log: list[tuple[Any, ...]] = []
        for position, (account_id, org, *_rest) in enumerate(rows):
            if position in refused:
                outcome, reason = "invalid", refused[position]
            elif position in absent:
                outcome, reason = "duplicate", "not on the list"
            else:
                outcome, reason = "removed", None
            log.append((self.list_id, run_id, "remove", outcome, account_id, org, reason, None, now))
        kept = "".join(f" AND p.seq <> {start + position}" for position in sorted(refused))
        with self.db.transaction():
            self.db.execute(
                self.db.dialect.delete_matching_sql(
                    members,
                    f"{members}.list_id = ?",
                    f"{names.plan} p",
                    f"p.list_id = {members}.list_id AND p.run_id = ? AND p.action = 'remove' "
                    f"AND p.seq BETWEEN ? AND ? AND p.account_id = {members}.account_id "
                    f"AND p.crm_org_id = {members}.crm_org_id{kept}",
                ),
                [self.list_id, run_id, start, end],
            )
            self.db.stage(names.log, LOG_COLUMNS, log)
            self.db.execute(
                f"UPDATE {names.runs} SET remove_done = ?, removed = removed + ?, rejected = rejected + ? "
                "WHERE list_id = ? AND run_id = ?",
                [end, result.applied, len(refused), self.list_id, run_id],
            )

    def record_done(self, run_id: str) -> None:
        """Mark the run done: its plan was sent and recorded whole, so no later run completes it."""
        names = self.db.names(self.tables)
        with self.db.transaction():
            self.db.execute(
                f"UPDATE {names.runs} SET status = ?, finished_at = ? WHERE list_id = ? AND run_id = ?",
                [DONE, utc_now(), self.list_id, run_id],
            )

    def forget_old_log(self, before: datetime) -> int:
        """Delete the list's run-log rows logged before ``before``; return how many went."""
        names = self.db.names(self.tables)
        with self.db.transaction():
            gone = int(
                self.db.value(
                    f"SELECT COUNT(*) FROM {names.log} WHERE list_id = ? AND logged_at < ?",
                    [self.list_id, before],
                )
                or 0
            )
            if gone:
                self.db.execute(
                    f"DELETE FROM {names.log} WHERE list_id = ? AND logged_at < ?", [self.list_id, before]
                )
        return gone
