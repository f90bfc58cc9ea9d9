"""Recording what the service answered: one batch per transaction, with the run's progress.

Each answered batch changes the members table and moves the run's ``add_done`` or ``remove_done`` in
the same transaction, so the record never says a batch is done without its members, nor the other
way round. A retry or a re-run after a kill resumes after the last batch recorded here; at most the
batches in flight at the crash are sent again, which the service answers as duplicates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.sync.state import DONE, utc_now
from abm_provider.accounts.validation import NOT_FOUND_REASON
from abm_provider.common.rejects import raw_json

if TYPE_CHECKING:
    from abm_provider.accounts.sync.database import StateDatabase
    from abm_provider.accounts.sync.state import StateTables
    from abm_provider.hooks.results import AccountsResult

#: The reason kept in the rejects table for an account the service did not know; a row with the same
#: values is then skipped by later runs instead of being sent again.


@dataclass(frozen=True)
class Recorder:
    """Writes the answers of one list's batches into its state tables."""

    db: StateDatabase
    tables: StateTables
    list_id: str

    def record_added(
        self, run_id: str, start: int, end: int, rows: list[tuple[Any, ...]], result: AccountsResult
    ) -> None:
        """Record plan rows ``start`` to ``end`` of an add as members, less those the service did not find.

        ``rows`` are the plan rows sent, ``(account_id, crm_org_id, crm_type, account_name, row_hash)``;
        an account not found becomes a reject of this run, so it is neither a member nor sent again.
        """
        names = self.db.names(self.tables)
        now = utc_now()
        by_id: dict[str, list[tuple[Any, ...]]] = {}
        for row in rows:
            by_id.setdefault(row[0], []).append(row)
        not_found = []
        for item in result.not_found:
            matches = by_id.get(str(item.get("id", "")))
            if not matches:
                continue  # not an account of this batch: nothing of ours to refuse
            account_id, org, _crm_type, _name, values = matches.pop(0)
            reason, raw = NOT_FOUND_REASON, raw_json(item)
            not_found.append([self.list_id, run_id, "add", account_id, org, values, reason, raw, now])
        with self.db.transaction():
            self.db.executemany(
                f"INSERT INTO {names.rejects} (list_id, run_id, action, account_id, crm_org_id, "
                "row_hash, reason, raw, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                not_found,
            )
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
            self.db.execute(
                f"UPDATE {names.runs} SET add_done = ?, added = added + ?, duplicates = duplicates + ?, "
                "not_found = not_found + ? WHERE list_id = ? AND run_id = ?",
                [end, result.applied, result.duplicates, len(not_found), self.list_id, run_id],
            )

    def record_removed(self, run_id: str, start: int, end: int, result: AccountsResult) -> None:
        """Drop plan rows ``start`` to ``end`` of a removal from the members.

        The service's answer to a removal counts the accounts removed in its ``added`` field (the
        field is named for the add call the two share).
        """
        names = self.db.names(self.tables)
        members = names.members
        with self.db.transaction():
            self.db.execute(
                self.db.dialect.delete_matching_sql(
                    members,
                    f"{members}.list_id = ?",
                    f"{names.plan} p",
                    f"p.list_id = {members}.list_id AND p.run_id = ? AND p.action = 'remove' "
                    f"AND p.seq BETWEEN ? AND ? AND p.account_id = {members}.account_id "
                    f"AND p.crm_org_id = {members}.crm_org_id",
                ),
                [self.list_id, run_id, start, end],
            )
            self.db.execute(
                f"UPDATE {names.runs} SET remove_done = ?, removed = removed + ? "
                "WHERE list_id = ? AND run_id = ?",
                [end, result.applied, self.list_id, run_id],
            )

    def record_done(self, run_id: str) -> None:
        """Mark the run done: its plan was sent and recorded whole, so no later run completes it."""
        names = self.db.names(self.tables)
        with self.db.transaction():
            self.db.execute(
                f"UPDATE {names.runs} SET status = ?, finished_at = ? WHERE list_id = ? AND run_id = ?",
                [DONE, utc_now(), self.list_id, run_id],
            )
