"""The list sync: diff a source of accounts against the state tables, send only the change, record it.

A run goes plan, then send, then record, keyed by the list and the Airflow run id:

1. **Plan.** The source is streamed once: each row is validated and hashed, and written in bulk to
   a temporary table on the state connection. The change is then computed in SQL, so memory stays
   flat whatever the source's size: accounts whose membership key ``(id, crmOrgId)`` is not on the
   list by our record are added (unless that very row was refused before); in ``mirror`` mode,
   members whose key left the source are removed. Rows that fail validation are recorded with their
   reason. The plan, the new rejects and the run's row commit together, so a crash leaves either no
   plan or a whole one.
2. **Send.** Removals first, then additions, in batches read back from the plan. Removing first
   keeps a key that moves (an account given by id alone, then with its org) on the list.
3. **Record.** Each answered batch is recorded in one transaction with the run's progress: the
   accounts added (minus those the service did not find, which become rejects) or removed. A retry
   or a re-run after a kill resumes after the last recorded batch; at most the batches in flight at
   the crash are sent again, which the service answers as duplicates. A run that finds another
   run's plan left unfinished completes it first, so the recorded membership never loses a change
   that may have reached the service.

One sync of a list runs at a time: :meth:`ListSync.run` takes the list's lock in the state database
before it reads anything and releases it when it ends, whatever the ending. A second sync of the
list waits up to ``lock_timeout`` seconds for it, then fails with :class:`SyncAlreadyRunning`
naming the run that holds it, having read, sent and recorded nothing.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from abm_provider.accounts.sources import AccountSource
from abm_provider.accounts.sync.database import StateDatabase
from abm_provider.accounts.sync.lock import check_lock_timeout, hold_list_lock
from abm_provider.accounts.sync.state import DONE, DRY_RUN, SENDING, StateTables
from abm_provider.accounts.validation import AccountValidator
from abm_provider.common.concurrency import PerThread, in_order
from abm_provider.common.rejects import TooManyRejects, check_limit, check_rejects, describe_reject, raw_json
from abm_provider.exceptions import AbmApiError

if TYPE_CHECKING:
    from abm_provider.hooks.abm import AbmHook
    from abm_provider.hooks.results import AccountsResult

Mode = Literal["mirror", "add_only"]
MODES: tuple[str, ...] = ("mirror", "add_only")
#: The keys of the summary a sync returns; every one is a count or a flag, never an account.
SUMMARY_KEYS: tuple[str, ...] = (
    "to_add",
    "to_remove",
    "added",
    "removed",
    "duplicates",
    "not_found",
    "rejected",
    "dry_run",
)
#: Refused rows with unchanged values are "held": not sent and not counted as rejected again.
NOT_FOUND_REASON = "not found: the service does not know this account (accountsNotFound)"
_STAGE_COLUMNS = (
    "record",
    "line",
    "account_id",
    "crm_org_id",
    "crm_type",
    "account_name",
    "row_hash",
    "reason",
    "raw",
)
_SAMPLE = 5


@dataclass(frozen=True)
class SyncOptions:
    """What one sync run does; checked by the operator before anything runs."""

    list_id: str
    run_id: str
    mode: Mode = "mirror"
    dry_run: bool = False
    max_rejected: int | float | None = 0
    batch_size: int = 1000
    max_in_flight: int = 2
    progress_interval: float = 30.0
    stage_rows: int = 50_000
    lock_timeout: float = 0.0


@dataclass(frozen=True)
class _Run:
    """A run's row in the runs table: how big its plan is and how far each action got."""

    run_id: str
    to_add: int
    to_remove: int
    add_done: int
    remove_done: int


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None, microsecond=0)


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _loose_key(data: Any, validator: AccountValidator) -> tuple[str | None, str]:
    """The membership key an invalid row would have, so a member whose row went bad is not removed."""
    if not isinstance(data, Mapping):
        return None, ""
    raw_id = data.get(validator.column_map["id"])
    raw_org = data.get(validator.column_map["crmOrgId"])
    account_id = raw_id.strip() if isinstance(raw_id, str) and raw_id.strip() else None
    org = raw_org.strip() if isinstance(raw_org, str) else ""
    if (account_id is not None and len(account_id) > 255) or len(org) > 255:
        return None, ""  # too long to be a key of the state tables, so no member's key either
    return account_id, org


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
        if options.mode not in MODES:
            raise ValueError(f"mode must be one of {list(MODES)}, got {options.mode!r}")
        self.db = db
        self.t = tables
        self.o = options
        self.validator = validator
        self.new_hook = new_hook
        self.log = log or logging.getLogger(__name__)

    # ---- the run ----------------------------------------------------------------------------------

    def run(self, source: AccountSource) -> dict[str, Any]:
        """Take the list's lock, then plan, send and record one run; return its summary (counts only).

        The lock is released on every way out; a killed task's lock dies with its connection.

        :raises SyncAlreadyRunning: another sync of the list held the lock for ``lock_timeout``.
        """
        self.db.create_tables(self.t.create_sql(), self.t.lock_key())
        key = self.t.lock_key(self.o.list_id)
        hold_list_lock(self.db, key, self.o.list_id, self.o.run_id, self.o.lock_timeout, self.log)
        try:
            return self._run(source)
        finally:
            self.db.unlock(key)

    def _run(self, source: AccountSource) -> dict[str, Any]:
        unfinished = self._unfinished()
        if self.o.dry_run:
            if unfinished:
                self.log.warning(
                    "Runs %s left plans unfinished; the next real run completes them before planning",
                    [u.run_id for u in unfinished],
                )
            self._plan(source)
            self._log_plan()
            return self.summary()
        own = None
        for earlier in unfinished:
            if earlier.run_id == self.o.run_id:
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
            self._plan(source)
            self._log_plan()
            self._send_run(self._load_run(self.o.run_id))
        return self.summary()

    def summary(self) -> dict[str, Any]:
        """The run's counts from its row in the runs table (cumulative over the run's tries)."""
        row = self.db.rows(
            f"SELECT to_add, to_remove, added, removed, duplicates, not_found, rejected, held, "
            f"source_rows, status FROM {self.t.runs.sql} WHERE list_id = ? AND run_id = ?",
            [self.o.list_id, self.o.run_id],
        )
        names = ("to_add", "to_remove", "added", "removed", "duplicates", "not_found", "rejected")
        values = row[0]
        summary: dict[str, Any] = {name: int(values[i]) for i, name in enumerate(names)}
        summary["dry_run"] = values[9] == DRY_RUN
        summary["held"] = int(values[7])
        summary["source_rows"] = int(values[8])
        summary["list_id"] = self.o.list_id
        summary["mode"] = self.o.mode
        summary["state_count"] = self.state_count()
        return summary

    def state_count(self) -> int:
        """How many accounts the list holds by our record."""
        return int(
            self.db.value(f"SELECT COUNT(*) FROM {self.t.members.sql} WHERE list_id = ?", [self.o.list_id])
            or 0
        )

    def check_drift(self, hook: AbmHook, summary: dict[str, Any]) -> None:
        """Warn when the service's ``estimatedAccountsCount`` differs from the state's count."""
        service_count: int | None = None
        try:
            for item in hook.iter_account_lists():
                if item.get("id") == self.o.list_id:
                    service_count = int(str(item.get("estimatedAccountsCount", "0")) or 0)
                    break
        except (AbmApiError, ValueError) as err:
            self.log.warning("Drift check skipped: could not read the list's account count: %s", err)
            return
        summary["service_count"] = service_count
        if service_count is None:
            self.log.warning("Drift check: list %s was not found among the account lists", self.o.list_id)
        elif service_count != summary["state_count"]:
            self.log.warning(
                "Drift: the service estimates %d accounts on list %s, the state records %d. The list may "
                "have been changed outside this sync, or the estimate lags; accounts the state does not "
                "know about are never removed by mirror mode.",
                service_count,
                self.o.list_id,
                summary["state_count"],
            )
        else:
            self.log.info("Drift check: the service and the state agree on %d accounts", service_count)

    # ---- plan -------------------------------------------------------------------------------------

    def _plan(self, source: AccountSource) -> None:
        """Stage the source, compute the change in SQL, and commit plan, rejects and run row together."""
        stage = f"abm_sync_source_{uuid.uuid4().hex[:12]}"
        self.db.execute(f"CREATE TEMPORARY TABLE {stage} ({_stage_ddl()})")
        try:
            source_rows = self._stage(source, stage)
            with self.db.transaction():
                self._write_plan(stage, source_rows)
            self.db.analyze(self.t.plan.sql)
        finally:
            self.db.execute(f"DROP TABLE IF EXISTS {stage}")

    def _stage(self, source: AccountSource, stage: str) -> int:
        """Validate and hash every source row into the temporary table; return how many were read."""
        validate = self.validator.validate
        buffer: list[tuple[Any, ...]] = []
        count = 0
        started = last = time.monotonic()
        with source.open() as opened:
            self.validator.check_columns(opened.columns, source.description)
            for row in opened.rows:
                count += 1
                account, reason = validate(row.data)
                if account is not None:
                    org = account.get("crmOrgId", "")
                    name = account.get("name")
                    crm_type = account.get("crmType")
                    fingerprint = _digest(f"{account['id']}\x1f{name or ''}\x1f{org}\x1f{crm_type or ''}")
                    buffer.append(
                        (
                            row.row_number,
                            row.line,
                            account["id"],
                            org,
                            crm_type,
                            name,
                            fingerprint,
                            None,
                            None,
                        )
                    )
                else:
                    raw = raw_json(row.data)
                    account_id, org = _loose_key(row.data, self.validator)
                    buffer.append(
                        (row.row_number, row.line, account_id, org, None, None, _digest(raw), reason, raw)
                    )
                if len(buffer) >= self.o.stage_rows:
                    self.db.stage(stage, _STAGE_COLUMNS, buffer)
                    buffer = []
                    now = time.monotonic()
                    if now - last >= self.o.progress_interval:
                        last = now
                        self.log.info(
                            "Planning: %d source rows read (%.0f rows/s)", count, count / (now - started)
                        )
        self.db.stage(stage, _STAGE_COLUMNS, buffer)
        self.log.info("Planning: %d source rows read in %.1f s", count, time.monotonic() - started)
        return count

    def _write_plan(self, stage: str, source_rows: int) -> None:
        t, o = self.t, self.o
        run = [o.list_id, o.run_id]
        # Plans of finished runs and previews go; a plan left unfinished stays until it is completed.
        self.db.execute(
            f"DELETE FROM {t.plan.sql} WHERE list_id = ? AND (run_id = ? OR run_id IN "
            f"(SELECT run_id FROM {t.runs.sql} WHERE list_id = ? AND status <> ?))",
            [o.list_id, o.run_id, o.list_id, SENDING],
        )
        self.db.execute(f"DELETE FROM {t.runs.sql} WHERE list_id = ? AND run_id = ?", run)
        firsts = (
            "SELECT account_id, crm_org_id, crm_type, account_name, row_hash, ROW_NUMBER() OVER "
            f"(PARTITION BY account_id, crm_org_id ORDER BY record) AS nth FROM {stage} WHERE reason IS NULL"
        )
        refused = f"SELECT 1 FROM {t.rejects.sql} r WHERE r.list_id = ? AND r.row_hash = s.row_hash"
        member = (
            f"SELECT 1 FROM {t.members.sql} m WHERE m.list_id = ? AND m.account_id = s.account_id "
            "AND m.crm_org_id = s.crm_org_id"
        )
        columns = "list_id, run_id, action, seq, account_id, crm_org_id, crm_type, account_name, row_hash"
        self.db.execute(
            f"INSERT INTO {t.plan.sql} ({columns}) SELECT ?, ?, 'add', "
            "ROW_NUMBER() OVER (ORDER BY s.account_id, s.crm_org_id), s.account_id, s.crm_org_id, "
            f"s.crm_type, s.account_name, s.row_hash FROM ({firsts}) s "
            f"WHERE s.nth = 1 AND NOT EXISTS ({member}) AND NOT EXISTS ({refused})",
            [*run, o.list_id, o.list_id],
        )
        if o.mode == "mirror":
            self.db.execute(
                f"INSERT INTO {t.plan.sql} ({columns}) SELECT ?, ?, 'remove', "
                "ROW_NUMBER() OVER (ORDER BY m.account_id, m.crm_org_id), m.account_id, m.crm_org_id, "
                f"m.crm_type, m.account_name, m.row_hash FROM {t.members.sql} m WHERE m.list_id = ? "
                f"AND NOT EXISTS (SELECT 1 FROM {stage} s WHERE s.account_id = m.account_id "
                "AND s.crm_org_id = m.crm_org_id)",
                [*run, o.list_id],
            )
        counts = dict(
            self.db.rows(
                f"SELECT action, COUNT(*) FROM {t.plan.sql} WHERE list_id = ? AND run_id = ? GROUP BY action",
                run,
            )
        )
        new_invalid = f"FROM {stage} s WHERE s.reason IS NOT NULL AND NOT EXISTS ({refused})"
        rejected = int(self.db.value(f"SELECT COUNT(*) {new_invalid}", [o.list_id]) or 0)
        held = int(
            self.db.value(
                f"SELECT COUNT(*) FROM ({firsts}) s WHERE s.nth = 1 AND NOT EXISTS ({member}) "
                f"AND EXISTS ({refused})",
                [o.list_id, o.list_id],
            )
            or 0
        ) + int(
            self.db.value(
                f"SELECT COUNT(*) FROM {stage} s WHERE s.reason IS NOT NULL AND EXISTS ({refused})",
                [o.list_id],
            )
            or 0
        )
        try:
            # Nothing is recorded when this raises, so the next run meets the same rows and fails the
            # same way until the source is fixed or the limit raised.
            check_rejects(
                rejected,
                o.max_rejected,
                total=source_rows,
                what="source rows are invalid",
                examples=self._examples(stage, refused),
                rejects_path=None,
                outcome="Nothing was sent or recorded.",
            )
        except TooManyRejects as err:
            if not o.dry_run:
                raise
            self.log.warning("%s (dry run: reported, not enforced)", err)
        now = _now()
        if not o.dry_run:
            self.db.execute(
                f"INSERT INTO {t.rejects.sql} (list_id, run_id, action, account_id, crm_org_id, row_hash, "
                "reason, record, line, raw, recorded_at) SELECT ?, ?, 'invalid', s.account_id, "
                f"s.crm_org_id, s.row_hash, s.reason, s.record, s.line, s.raw, ? {new_invalid}",
                [*run, now, o.list_id],
            )
        self.db.execute(
            f"INSERT INTO {t.runs.sql} (list_id, run_id, mode, status, source_rows, to_add, to_remove, "
            "add_done, remove_done, added, removed, duplicates, not_found, rejected, held, started_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, 0, 0, 0, 0, ?, ?, ?)",
            [
                *run,
                o.mode,
                DRY_RUN if o.dry_run else SENDING,
                source_rows,
                int(counts.get("add", 0)),
                int(counts.get("remove", 0)),
                rejected,
                held,
                now,
            ],
        )

    def _examples(self, stage: str, refused: str) -> list[str]:
        rows = self.db.rows(
            f"SELECT record, reason FROM {stage} s WHERE s.reason IS NOT NULL AND NOT EXISTS ({refused}) "
            f"ORDER BY record LIMIT {_SAMPLE}",
            [self.o.list_id],
        )
        return [describe_reject(reason, record) for record, reason in rows]

    def _log_plan(self) -> None:
        """Counts and a sample of each action, so a preview (or a surprise) is readable in the log."""
        summary = self.summary()
        self.log.info(
            "Plan for list %s (%s%s): %d to add, %d to remove, %d rejected now, %d held back as refused "
            "before, from %d source rows",
            self.o.list_id,
            self.o.mode,
            ", dry run" if self.o.dry_run else "",
            summary["to_add"],
            summary["to_remove"],
            summary["rejected"],
            summary["held"],
            summary["source_rows"],
        )
        for action in ("add", "remove"):
            sample = self.db.rows(
                f"SELECT account_id, crm_org_id FROM {self.t.plan.sql} WHERE list_id = ? AND run_id = ? "
                f"AND action = ? ORDER BY seq LIMIT {_SAMPLE}",
                [self.o.list_id, self.o.run_id, action],
            )
            if sample:
                shown = [f"{i}@{org}" if org else str(i) for i, org in sample]
                self.log.info("  e.g. to %s: %s", action, ", ".join(shown))

    # ---- send and record --------------------------------------------------------------------------

    def _unfinished(self) -> list[_Run]:
        rows = self.db.rows(
            f"SELECT run_id, to_add, to_remove, add_done, remove_done FROM {self.t.runs.sql} "
            "WHERE list_id = ? AND status = ? ORDER BY started_at, run_id",
            [self.o.list_id, SENDING],
        )
        return [_Run(str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows]

    def _load_run(self, run_id: str) -> _Run:
        for run in self._unfinished():
            if run.run_id == run_id:
                return run
        raise RuntimeError(f"run {run_id!r} of list {self.o.list_id!r} has no plan to send")

    def _send_run(self, run: _Run) -> None:
        """Send what is left of a run's plan, removals first, then mark the run done."""
        hooks = PerThread(self.new_hook)
        try:
            self._send_action(run, "remove", run.to_remove, run.remove_done, hooks.get)
            self._send_action(run, "add", run.to_add, run.add_done, hooks.get)
        finally:
            hooks.close()
        with self.db.transaction():
            self.db.execute(
                f"UPDATE {self.t.runs.sql} SET status = ?, finished_at = ? WHERE list_id = ? AND run_id = ?",
                [DONE, _now(), self.o.list_id, run.run_id],
            )

    def _send_action(
        self, run: _Run, action: str, total: int, done: int, hook: Callable[[], AbmHook]
    ) -> None:
        if done >= total:
            return
        size = self.o.batch_size
        plan = self.t.plan.sql

        def batches() -> Iterator[tuple[int, int, list[tuple[Any, ...]]]]:
            for start in range(done + 1, total + 1, size):
                end = min(start + size - 1, total)
                rows = self.db.rows(
                    f"SELECT account_id, crm_org_id, crm_type, account_name, row_hash FROM {plan} "
                    "WHERE list_id = ? AND run_id = ? AND action = ? AND seq BETWEEN ? AND ? ORDER BY seq",
                    [self.o.list_id, run.run_id, action, start, end],
                )
                yield start, end, rows

        def send(batch: tuple[int, int, list[tuple[Any, ...]]]) -> AccountsResult:
            accounts = [_payload(row, action) for row in batch[2]]
            client = hook()
            call = client.add_accounts if action == "add" else client.remove_accounts
            return call(self.o.list_id, accounts, batch_size=size, keep_not_found=True)

        started = last = time.monotonic()
        sent = 0
        answers = in_order(send, batches(), self.o.max_in_flight, f"abm-sync-{action}")
        for recorded, ((start, end, rows), result) in enumerate(answers, start=1):
            with self.db.transaction():
                if action == "add":
                    self._record_added(run.run_id, start, end, rows, result)
                else:
                    self._record_removed(run.run_id, start, end, result)
            sent += len(rows)
            if action == "add" and recorded & (recorded - 1) == 0:
                # Statistics taken while the list was small would have the planner hash all of the
                # members for every batch recorded; refreshing them as the list doubles keeps each
                # batch an index lookup at a logarithmic number of ANALYZEs.
                self.db.analyze(self.t.members.sql)
            now = time.monotonic()
            if now - last >= self.o.progress_interval or end == total:
                last = now
                self.log.info(
                    "%s: %d of %d accounts sent and recorded (%.0f accounts/s)",
                    "Adding" if action == "add" else "Removing",
                    end,
                    total,
                    sent / max(now - started, 1e-9),
                )

    def _record_added(
        self, run_id: str, start: int, end: int, rows: list[tuple[Any, ...]], result: AccountsResult
    ) -> None:
        t, now = self.t, _now()
        by_id: dict[str, list[tuple[Any, ...]]] = {}
        for row in rows:
            by_id.setdefault(row[0], []).append(row)
        refused = []
        for item in result.not_found:
            matches = by_id.get(str(item.get("id", "")))
            if not matches:
                continue  # not an account of this batch: nothing of ours to hold back
            sent = matches.pop(0)
            refused.append(
                [
                    self.o.list_id,
                    run_id,
                    "add",
                    sent[0],
                    sent[1],
                    sent[4],
                    NOT_FOUND_REASON,
                    raw_json(item),
                    now,
                ]
            )
        self.db.executemany(
            f"INSERT INTO {t.rejects.sql} (list_id, run_id, action, account_id, crm_org_id, row_hash, "
            "reason, raw, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            refused,
        )
        self.db.execute(
            f"INSERT INTO {t.members.sql} (list_id, account_id, crm_org_id, crm_type, account_name, "
            "row_hash, run_id, synced_at) SELECT p.list_id, p.account_id, p.crm_org_id, p.crm_type, "
            f"p.account_name, p.row_hash, p.run_id, ? FROM {t.plan.sql} p WHERE p.list_id = ? "
            "AND p.run_id = ? AND p.action = 'add' AND p.seq BETWEEN ? AND ? "
            f"AND NOT EXISTS (SELECT 1 FROM {t.members.sql} m WHERE m.list_id = p.list_id "
            "AND m.account_id = p.account_id AND m.crm_org_id = p.crm_org_id) "
            f"AND NOT EXISTS (SELECT 1 FROM {t.rejects.sql} r WHERE r.list_id = p.list_id "
            "AND r.run_id = p.run_id AND r.row_hash = p.row_hash)",
            [now, self.o.list_id, run_id, start, end],
        )
        self.db.execute(
            f"UPDATE {t.runs.sql} SET add_done = ?, added = added + ?, duplicates = duplicates + ?, "
            "not_found = not_found + ? WHERE list_id = ? AND run_id = ?",
            [end, result.added, result.duplicates, len(refused), self.o.list_id, run_id],
        )

    def _record_removed(self, run_id: str, start: int, end: int, result: AccountsResult) -> None:
        members = self.t.members.sql
        self.db.execute(
            f"DELETE FROM {members} WHERE list_id = ? AND EXISTS (SELECT 1 FROM {self.t.plan.sql} p "
            f"WHERE p.list_id = {members}.list_id AND p.run_id = ? AND p.action = 'remove' "
            f"AND p.seq BETWEEN ? AND ? AND p.account_id = {members}.account_id "
            f"AND p.crm_org_id = {members}.crm_org_id)",
            [self.o.list_id, run_id, start, end],
        )
        self.db.execute(
            f"UPDATE {self.t.runs.sql} SET remove_done = ?, removed = removed + ? "
            "WHERE list_id = ? AND run_id = ?",
            [end, result.added, self.o.list_id, run_id],
        )


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


def _stage_ddl() -> str:
    return (
        "record BIGINT, line BIGINT, account_id VARCHAR(255), crm_org_id VARCHAR(255), "
        "crm_type VARCHAR(255), account_name VARCHAR(255), row_hash VARCHAR(64) NOT NULL, reason TEXT, "
        "raw TEXT"
    )
