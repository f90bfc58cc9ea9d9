"""The emulated service: every rule of docs/service-behaviour.md, independent of HTTP.

The FastAPI routes (`api.py`) and the admin API (`admin.py`) are thin layers over `Emulator`; keeping
the rules here lets one object hold the whole state, persist it, and derive execution states from the
emulated clock on every call.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio.to_thread

from abm_emulator import csvgen
from abm_emulator.clock import EmulatedClock, parse_instant, rfc3339
from abm_emulator.cronrules import fire_times, validate_schedule
from abm_emulator.errors import ApiError, invalid
from abm_emulator.model import (
    EXECUTION_STATES,
    EXPORT_TYPES,
    Account,
    AccountList,
    Execution,
    ExportFile,
    ExportJob,
    Folder,
    account_from_json,
    account_to_json,
    fill_account_ref,
    new_account,
    sort_time,
)
from abm_emulator.pagination import paginate
from abm_emulator.storage import LinkSigner

log = logging.getLogger("abm_emulator")

MAX_ACCOUNTS_PER_REQUEST = 1000
# 15 or 18 alphanumerics starting 001: the Salesforce account id forms the emulator treats as "known"
# (unless the admin API made the id unknown: `Emulator.knows`).
SALESFORCE_ACCOUNT_ID = re.compile(r"001[A-Za-z0-9]{12}(?:[A-Za-z0-9]{3})?")
_ORDER_BY = re.compile(r"\s*(createTime|updateTime)(?:\s+(asc|desc))?\s*")
_FILTER = re.compile(r"\s*(status|state)\s*=\s*\"?([A-Za-z_]+)\"?\s*")


@dataclass
class Settings:
    """What the CLI configures; everything the service rules need besides state and clock."""

    api_keys: dict[str, str]  # key -> account name
    seed: int = 42
    export_size_bytes: int = 200_000
    link_ttl: int = 900
    pending_seconds: float = 60.0
    running_seconds: float = 240.0
    data_dir: Path = Path(".")
    state_file: Path | None = None
    storage_url: str = ""


def parse_api_keys(specs: Sequence[str]) -> dict[str, str]:
    """``KEY`` or ``KEY:ACCOUNT``; a bare key gets an account of its own named from a hash of the key.

    The account name appears in admin output and object keys on the storage origin, so it must never
    be the key itself: the storage origin must not see the API key in any form.
    """
    keys: dict[str, str] = {}
    for spec in specs:
        key, sep, account = spec.partition(":")
        if not key:
            raise ValueError(f"--api-key {spec!r}: the key is empty")
        if sep and not account:
            raise ValueError(f"--api-key {spec!r}: the account after ':' is empty")
        keys[key] = account if sep else "acct-" + hashlib.sha256(key.encode()).hexdigest()[:12]
    return keys


class Emulator:
    def __init__(self, settings: Settings, clock: EmulatedClock) -> None:
        self.settings = settings
        self.clock = clock
        self.accounts: dict[str, Account] = {}
        #: Ids the CRM does not know even when well formed (set by ``/_admin/unknownAccounts``).
        self.unknown_account_ids: set[str] = set()
        self.signer = LinkSigner(
            hashlib.sha256(f"abm-emulator-link-secret:{settings.seed}".encode()).digest(), settings.link_ttl
        )
        self._render_locks: dict[str, asyncio.Lock] = {}
        self._dirty = False

    # ----------------------------------------------------------------- accounts and persistence
    def account_for_key(self, key: str | None) -> Account:
        name = self.settings.api_keys.get(key or "")
        if name is None:
            raise ApiError(401, "Request had invalid credentials.", "UNAUTHENTICATED")
        account = self.accounts.get(name)
        if account is None:
            account = self.accounts[name] = new_account(name)
        return account

    def reset(self) -> None:
        self.accounts.clear()
        self.unknown_account_ids.clear()
        self.clock.reset()
        self.changed()

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "clock": {"start": self.clock.start.isoformat(), "now": self.clock.now().isoformat()},
            "accounts": {name: account_to_json(a) for name, a in self.accounts.items()},
            "unknownAccountIds": sorted(self.unknown_account_ids),
        }

    def load(self, data: Mapping[str, Any], *, restore_clock: bool) -> None:
        self.accounts = {name: account_from_json(a) for name, a in data.get("accounts", {}).items()}
        self.unknown_account_ids = set(data.get("unknownAccountIds", []))
        clock = data.get("clock") or {}
        if restore_clock and clock.get("now"):
            self.clock.start = parse_instant(clock["start"])
            self.clock.set(parse_instant(clock["now"]))

    def changed(self) -> None:
        """Note a change; `flush` (every tick of the server, and at shutdown) writes the state file.

        Batching writes keeps a burst of large add-accounts calls from re-serialising every member
        list on every request, at the cost of at most one tick of changes on a hard kill.
        """
        self._dirty = True

    def flush(self) -> None:
        if self._dirty:
            self.save()

    def save(self) -> None:
        """Write the state file atomically (temporary name, then rename); a no-op without one."""
        self._dirty = False
        path = self.settings.state_file
        if path is None:
            return
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), separators=(",", ":")))
        os.replace(tmp, path)

    # ----------------------------------------------------------------- time passing
    def sync(self) -> datetime:
        """Fire due cron runs and expire unread jobs up to the clock's now; return that now."""
        now = self.clock.now()
        changed = False
        for account in self.accounts.values():
            for job in list(account.jobs.values()):
                horizon = min(now, job.expires_at())
                for moment in fire_times(job.schedule, job.scheduled_until, horizon):
                    self._start_execution(
                        account,
                        job.type,
                        moment,
                        "COMPLETE",
                        self.settings.pending_seconds,
                        self.settings.running_seconds,
                        self.settings.export_size_bytes,
                    )
                    changed = True
                if horizon > job.scheduled_until:
                    job.scheduled_until = horizon
                if now >= job.expires_at():
                    log.info("export job %s of %s expired: not read for 30 days", job.type, account.name)
                    del account.jobs[job.type]
                    account.executions.pop(job.type, None)
                    changed = True
        if changed:
            self.changed()
        return now

    def _start_execution(
        self,
        account: Account,
        export_type: str,
        at: datetime,
        outcome: str,
        pending: float,
        running: float,
        size_bytes: int,
    ) -> Execution:
        execution = Execution(
            id=str(uuid.uuid4()),
            export_type=export_type,
            create_time=at,
            pending_seconds=pending,
            running_seconds=running,
            outcome=outcome,
            size_bytes=size_bytes,
        )
        account.executions.setdefault(export_type, []).append(execution)
        return execution

    # ----------------------------------------------------------------- folders
    def create_folder(self, account: Account, name: str, access: str) -> dict[str, Any]:
        folder = Folder(str(uuid.uuid4()), name, access, self.clock.now())
        account.folders[folder.id] = folder
        self.changed()
        return {"folderId": folder.id, "displayName": folder.name, "folderAccess": folder.access}

    def list_folders(self, account: Account, page_size: int | None, page_token: str | None) -> dict[str, Any]:
        page, token = paginate(
            list(account.folders.values()),
            lambda f: (sort_time(f.create_time), f.id),
            page_size=page_size,
            page_token=page_token,
            params={"route": "folders", "account": account.name},
        )
        folders = [
            {
                "uuid": f.id,
                "name": f.name,
                "orgUuid": account.org_uuid,
                "folderAccess": f.access,
                "createdMomentUtc": rfc3339(f.create_time),
            }
            for f in page
        ]
        return {"folders": folders, "nextPageToken": token}

    # ----------------------------------------------------------------- account lists
    def _folder(self, account: Account, folder_id: str, field: str) -> Folder:
        folder = account.folders.get(folder_id)
        if folder is None:
            raise ApiError(404, f"Folder {folder_id!r} not found", "NOT_FOUND", [(field, "no such folder")])
        return folder

    def _list(self, account: Account, list_id: str) -> AccountList:
        found = account.lists.get(list_id)
        if found is None:
            raise ApiError(404, f"Account list {list_id!r} not found", "NOT_FOUND")
        return found

    def create_list(self, account: Account, name: str, folder_id: str) -> dict[str, Any]:
        self._folder(account, folder_id, "folderId")
        created = AccountList(str(uuid.uuid4()), name, folder_id, self.clock.now())
        account.lists[created.id] = created
        self.changed()
        return {"listId": created.id, "listName": created.name, "folderId": created.folder_id}

    def list_lists(
        self, account: Account, folder_ids: list[str] | None, page_size: int | None, page_token: str | None
    ) -> dict[str, Any]:
        wanted = set(folder_ids or [])
        for index, folder_id in enumerate(folder_ids or []):
            self._folder(account, folder_id, f"folderIds[{index}]")
        candidates = [lst for lst in account.lists.values() if not wanted or lst.folder_id in wanted]
        page, token = paginate(
            candidates,
            lambda lst: (sort_time(lst.create_time), lst.id),
            page_size=page_size,
            page_token=page_token,
            params={"route": "lists", "account": account.name, "folderIds": sorted(wanted)},
        )
        lists = [
            {
                "id": lst.id,
                "displayName": lst.name,
                "createTime": rfc3339(lst.create_time),
                "estimatedAccountsCount": str(len(lst.members)),
                "folderId": lst.folder_id,
            }
            for lst in page
        ]
        return {"lists": lists, "nextPageToken": token}

    @staticmethod
    def _check_batch(accounts: Sequence[Mapping[str, Any]]) -> None:
        if not accounts:
            raise invalid("accounts", "must hold at least one account")
        if len(accounts) > MAX_ACCOUNTS_PER_REQUEST:
            raise invalid(
                "accounts", f"at most {MAX_ACCOUNTS_PER_REQUEST} accounts per request, got {len(accounts)}"
            )

    def knows(self, account_id: str) -> bool:
        """Whether the CRM knows this account id: a well-formed Salesforce id not made unknown."""
        return (
            bool(SALESFORCE_ACCOUNT_ID.fullmatch(account_id)) and account_id not in self.unknown_account_ids
        )

    def make_unknown(self, account_ids: Sequence[str]) -> None:
        self.unknown_account_ids.update(account_ids)
        self.changed()

    def make_known(self, account_ids: Sequence[str] | None) -> None:
        """Known again (every id when ``account_ids`` is None), so well-formed ones are found again."""
        if account_ids is None:
            self.unknown_account_ids.clear()
        else:
            self.unknown_account_ids.difference_update(account_ids)
        self.changed()

    def add_accounts(
        self, account: Account, list_id: str, accounts: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        target = self._list(account, list_id)
        self._check_batch(accounts)
        successful: list[dict[str, str]] = []
        not_found: list[dict[str, str]] = []
        added = duplicates = 0
        for item in accounts:
            # Only id is required: a missing org/type is filled before keying, and echoed filled.
            member = fill_account_ref(account, item)
            if not self.knows(member["id"]):
                not_found.append(member)
                continue
            key = (member["crmOrgId"], member["id"])
            if key in target.members:
                duplicates += 1
            else:
                target.members[key] = member
                added += 1
            successful.append(member)
        self.changed()
        return {
            "listId": target.id,
            "successfulAccounts": successful,
            "accountsNotFound": not_found,
            "addedAccounts": added,
            "duplicateAccounts": duplicates,
        }

    def remove_accounts(
        self, account: Account, list_id: str, accounts: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        target = self._list(account, list_id)
        self._check_batch(accounts)
        removed = []
        for item in accounts:
            wanted = fill_account_ref(account, item)
            if not self.knows(wanted["id"]):
                # The documented answer has no accountsNotFound: an id the CRM does not know is not
                # removed, and is left out of `accounts` (a client counts it as not found).
                continue
            member = target.members.pop((wanted["crmOrgId"], wanted["id"]), None)
            if member is not None:
                removed.append(member)
        self.changed()
        return {"listId": target.id, "accounts": removed}

    def members(self, account: Account, list_id: str) -> list[dict[str, str]]:
        return list(self._list(account, list_id).members.values())

    # ----------------------------------------------------------------- export jobs
    def create_job(self, account: Account, export_type: str, schedule: str) -> dict[str, Any]:
        if export_type not in EXPORT_TYPES:
            raise invalid("type", f"unknown export type {export_type!r}; known: {', '.join(EXPORT_TYPES)}")
        normalised = validate_schedule(schedule)
        self.sync()
        if export_type in account.jobs:
            raise ApiError(
                409,
                f"An export job of type {export_type} already exists for this account",
                "ALREADY_EXISTS",
                [("type", "one export job per type per account")],
            )
        now = self.clock.now()
        job = ExportJob(export_type, normalised, now, now, now, now)
        account.jobs[export_type] = job
        self.changed()
        return self.job_json(job)

    @staticmethod
    def job_json(job: ExportJob) -> dict[str, Any]:
        return {
            "type": job.type,
            "schedule": job.schedule,
            "createTime": rfc3339(job.create_time),
            "updateTime": rfc3339(job.update_time),
        }

    def _job(self, account: Account, export_type: str) -> ExportJob:
        job = account.jobs.get(export_type)
        if job is None:
            raise ApiError(404, f"Export job {export_type!r} not found", "NOT_FOUND")
        return job

    async def list_executions(
        self,
        account: Account,
        export_type: str,
        *,
        page_size: int | None,
        page_token: str | None,
        order_by: str | None,
        filter_: str | None,
    ) -> dict[str, Any]:
        now = self.sync()
        job = self._job(account, export_type)
        field, descending = "createTime", False
        if order_by is not None and order_by.strip():
            match = _ORDER_BY.fullmatch(order_by)
            if match is None:
                raise invalid("orderBy", f"{order_by!r} is not '<createTime|updateTime> [asc|desc]'")
            field, descending = match.group(1), match.group(2) == "desc"
        wanted_state: str | None = None
        if filter_ is not None and filter_.strip():
            fmatch = _FILTER.fullmatch(filter_)
            if fmatch is None:
                raise invalid("filter", f"{filter_!r} is not 'status=<STATE>' or 'state=<STATE>'")
            wanted_state = fmatch.group(2).upper()
            if wanted_state not in EXECUTION_STATES:
                raise invalid(
                    "filter", f"unknown state {fmatch.group(2)!r}; known: {', '.join(EXECUTION_STATES)}"
                )
        job.last_read = now
        states = {e.id: e.state_at(now) for e in account.executions.get(export_type, [])}

        def sort_key(e: Execution) -> tuple[str, str]:
            return (sort_time(e.create_time if field == "createTime" else states[e.id][1]), e.id)

        page, token = paginate(
            account.executions.get(export_type, []),
            sort_key,
            page_size=page_size,
            page_token=page_token,
            params={
                "route": "executions",
                "account": account.name,
                "type": export_type,
                "orderBy": field,
                "desc": descending,
                "state": wanted_state,
            },
            keep=lambda e: wanted_state is None or states[e.id][0] == wanted_state,
            descending=descending,
        )
        self.changed()
        return {
            "exportJobExecutions": [await self.execution_json(account, e, now) for e in page],
            "nextPageToken": token,
        }

    async def execution_json(self, account: Account, execution: Execution, now: datetime) -> dict[str, Any]:
        state, updated = execution.state_at(now)
        body: dict[str, Any] = {
            "id": execution.id,
            "exportId": execution.export_type,
            "state": state,
            "createTime": rfc3339(execution.create_time),
            "updateTime": rfc3339(updated),
        }
        if state == "COMPLETE":
            await self.ensure_rendered(account, execution)
            key = self.object_key(account, execution)
            body["downloadUri"] = f"{self.settings.storage_url}/{key}?{self.signer.sign(key, now)}"
        return body

    async def fire(
        self,
        account: Account,
        export_type: str,
        *,
        outcome: str,
        pending: float,
        running: float,
        size_bytes: int,
    ) -> dict[str, Any]:
        now = self.sync()
        self._job(account, export_type)
        execution = self._start_execution(account, export_type, now, outcome, pending, running, size_bytes)
        self.changed()
        return await self.execution_json(account, execution, now)

    # ----------------------------------------------------------------- export files
    @staticmethod
    def object_key(account: Account, execution: Execution) -> str:
        return f"{account.org_uuid}/{execution.id}.csv"

    async def ensure_rendered(self, account: Account, execution: Execution) -> None:
        """Render the execution's CSV once, in a worker thread so a large file never stalls the loop."""
        path = self.settings.data_dir / self.object_key(account, execution)
        lock = self._render_locks.setdefault(execution.id, asyncio.Lock())
        async with lock:
            if execution.file is not None and path.exists():
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            info = await anyio.to_thread.run_sync(
                lambda: csvgen.write_export(
                    path,
                    execution.export_type,
                    seed=self.settings.seed,
                    account=account.name,
                    generated_at=execution.finished_at(),
                    size_bytes=execution.size_bytes,
                )
            )
            execution.file = ExportFile(rows=info.rows, bytes=info.bytes, sha256=info.sha256)
            self.changed()

    async def render_recent(self) -> None:
        """Pre-render files of executions that completed in the last two emulated days.

        Listing renders on demand anyway; doing it ahead keeps the listing that first reveals a
        ``COMPLETE`` execution fast even for large files.
        """
        now = self.clock.now()
        for account in list(self.accounts.values()):
            for runs in list(account.executions.values()):
                for execution in list(runs):
                    state, finished = execution.state_at(now)
                    if state == "COMPLETE" and execution.file is None and (now - finished).days < 2:
                        await self.ensure_rendered(account, execution)

    # ----------------------------------------------------------------- admin views
    def admin_state(self) -> dict[str, Any]:
        now = self.sync()
        keys_by_account: dict[str, list[str]] = {}
        for key, name in self.settings.api_keys.items():
            keys_by_account.setdefault(name, []).append(key)
        accounts: dict[str, Any] = {}
        for name in sorted(set(self.accounts) | set(keys_by_account)):
            account = self.accounts.get(name) or new_account(name)
            executions = []
            for runs in account.executions.values():
                for e in runs:
                    state, updated = e.state_at(now)
                    executions.append(
                        {
                            "id": e.id,
                            "exportId": e.export_type,
                            "state": state,
                            "createTime": rfc3339(e.create_time),
                            "updateTime": rfc3339(updated),
                            "sizeBytes": e.size_bytes,
                            "objectKey": self.object_key(account, e),
                            "file": None if e.file is None else vars(e.file),
                        }
                    )
            accounts[name] = {
                "apiKeys": keys_by_account.get(name, []),
                "orgUuid": account.org_uuid,
                "crmOrgId": account.crm_org_id,
                "folders": [
                    {
                        "folderId": f.id,
                        "name": f.name,
                        "folderAccess": f.access,
                        "createTime": rfc3339(f.create_time),
                    }
                    for f in account.folders.values()
                ],
                "lists": [
                    {
                        "listId": lst.id,
                        "name": lst.name,
                        "folderId": lst.folder_id,
                        "createTime": rfc3339(lst.create_time),
                        "memberCount": len(lst.members),
                    }
                    for lst in account.lists.values()
                ],
                "jobs": [
                    {
                        **self.job_json(j),
                        "lastRead": rfc3339(j.last_read),
                        "expireTime": rfc3339(j.expires_at()),
                    }
                    for j in account.jobs.values()
                ],
                "executions": executions,
            }
        return {"clock": self.clock.describe(), "accounts": accounts}
