"""The emulator's stored facts, per customer account, and their JSON form for ``--state-file``.

Only facts are stored: an execution keeps its fire time, durations and outcome, and its state at any
moment is derived from the clock (`Execution.state_at`). That keeps the clock the single source of
time, so jumping it forward never leaves an execution stuck in a state it should have left.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from abm_emulator.clock import parse_instant

EXPORT_TYPES = ("TACTIC_PERFORMANCE", "DISPLAY_TACTIC_ACCOUNT_PERFORMANCE")
FOLDER_ACCESS = ("FOLDER_ACCESS_UNSPECIFIED", "PUBLIC", "READ_ONLY")
CRM_TYPES = ("SALESFORCE",)
EXECUTION_STATES = ("PENDING", "RUNNING", "COMPLETE", "FAILED")
JOB_EXPIRY = timedelta(days=30)


def sort_time(value: datetime) -> str:
    """A fixed-width UTC string that sorts like the instant, for sort keys inside page tokens."""
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Folder:
    id: str
    name: str
    access: str
    create_time: datetime


@dataclass
class AccountList:
    id: str
    name: str
    folder_id: str
    create_time: datetime
    # (crmOrgId, id) -> {"id", "name", "crmOrgId", "crmType"}, in the order accounts were added.
    members: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)


@dataclass
class ExportJob:
    type: str
    schedule: str
    create_time: datetime
    update_time: datetime
    last_read: datetime
    # Cron fires up to this instant have been turned into executions.
    scheduled_until: datetime

    def expires_at(self) -> datetime:
        return self.last_read + JOB_EXPIRY


@dataclass
class ExportFile:
    rows: int
    bytes: int
    sha256: str


@dataclass
class Execution:
    id: str
    export_type: str
    create_time: datetime
    pending_seconds: float
    running_seconds: float
    outcome: str
    size_bytes: int
    file: ExportFile | None = None

    def state_at(self, now: datetime) -> tuple[str, datetime]:
        """The state at ``now`` and the instant it was entered (the execution's ``updateTime``)."""
        running_at = self.create_time + timedelta(seconds=self.pending_seconds)
        finished_at = running_at + timedelta(seconds=self.running_seconds)
        if now < running_at:
            return "PENDING", self.create_time
        if now < finished_at:
            return "RUNNING", running_at
        return self.outcome, finished_at

    def finished_at(self) -> datetime:
        return self.create_time + timedelta(seconds=self.pending_seconds + self.running_seconds)


@dataclass
class Account:
    name: str
    org_uuid: str
    folders: dict[str, Folder] = field(default_factory=dict)
    lists: dict[str, AccountList] = field(default_factory=dict)
    jobs: dict[str, ExportJob] = field(default_factory=dict)
    executions: dict[str, list[Execution]] = field(default_factory=dict)


def new_account(name: str) -> Account:
    # A stable organisation id per account name, so restarts and resets keep it.
    return Account(name=name, org_uuid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"abm-emulator:{name}")))


def _dump(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_dump(v) for v in value]
    return value


def account_to_json(account: Account) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": account.name,
        "org_uuid": account.org_uuid,
        "folders": {k: _dump(asdict(v)) for k, v in account.folders.items()},
        # Members are stored as a list: their (crmOrgId, id) key is rebuilt from the fields on load.
        "lists": {
            k: {
                **_dump({f: getattr(v, f) for f in ("id", "name", "folder_id", "create_time")}),
                "members": list(v.members.values()),
            }
            for k, v in account.lists.items()
        },
        "jobs": {k: _dump(asdict(v)) for k, v in account.jobs.items()},
        "executions": {k: [_dump(asdict(e)) for e in runs] for k, runs in account.executions.items()},
    }
    return data


def account_from_json(data: dict[str, Any]) -> Account:
    t = parse_instant
    account = Account(name=data["name"], org_uuid=data["org_uuid"])
    for fid, f in data.get("folders", {}).items():
        account.folders[fid] = Folder(f["id"], f["name"], f["access"], t(f["create_time"]))
    for lid, lst in data.get("lists", {}).items():
        members = {(m["crmOrgId"], m["id"]): dict(m) for m in lst.get("members", [])}
        account.lists[lid] = AccountList(
            lst["id"], lst["name"], lst["folder_id"], t(lst["create_time"]), members
        )
    for jtype, j in data.get("jobs", {}).items():
        account.jobs[jtype] = ExportJob(
            j["type"],
            j["schedule"],
            t(j["create_time"]),
            t(j["update_time"]),
            t(j["last_read"]),
            t(j["scheduled_until"]),
        )
    for jtype, runs in data.get("executions", {}).items():
        account.executions[jtype] = [
            Execution(
                e["id"],
                e["export_type"],
                t(e["create_time"]),
                e["pending_seconds"],
                e["running_seconds"],
                e["outcome"],
                e["size_bytes"],
                ExportFile(**e["file"]) if e.get("file") else None,
            )
            for e in runs
        ]
    return account
