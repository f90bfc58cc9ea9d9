"""The emulator's stored facts, per customer account, and their JSON form for ``--state-file``.

Only facts are stored: an execution keeps its fire time, durations and outcome, and its state at any
moment is derived from the clock (`Execution.state_at`). That keeps the clock the single source of
time, so jumping it forward never leaves an execution stuck in a state it should have left.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from abm_emulator.clock import parse_instant

EXPORT_TYPES = ("TACTIC_PERFORMANCE", "DISPLAY_TACTIC_ACCOUNT_PERFORMANCE")
FOLDER_ACCESS = ("FOLDER_ACCESS_UNSPECIFIED", "PUBLIC", "READ_ONLY")
CRM_TYPES = ("SALESFORCE",)
DEFAULT_CRM_TYPE = "SALESFORCE"
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
    # (crmOrgId, id) -> {"id", "name", "crmOrgId", "crmType"}, in the order accounts were added. Always
    # the filled values: an account sent without crmOrgId/crmType is stored with the customer account's
    # CRM org and SALESFORCE, so an id-only add and an explicit-org remove name the same membership.
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


_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def crm_org_id_for(name: str) -> str:
    """The customer account's CRM org: a 15-character Salesforce org id, ``00D`` + 12 alphanumerics.

    Derived from the account name alone (a hash in base 62), so restarts, resets and state files
    written before the field existed all give the same org. It fills an account sent to the Account
    Lists API without ``crmOrgId``.
    """
    value = int.from_bytes(hashlib.sha256(f"abm-emulator-crm-org:{name}".encode()).digest(), "big")
    chars = []
    for _ in range(12):
        value, rem = divmod(value, 62)
        chars.append(_BASE62[rem])
    return "00D" + "".join(chars)


@dataclass
class Account:
    name: str
    org_uuid: str
    folders: dict[str, Folder] = field(default_factory=dict)
    lists: dict[str, AccountList] = field(default_factory=dict)
    jobs: dict[str, ExportJob] = field(default_factory=dict)
    executions: dict[str, list[Execution]] = field(default_factory=dict)
    # The account's CRM org (`crm_org_id_for`); left empty, it is derived from the name.
    crm_org_id: str = ""

    def __post_init__(self) -> None:
        if not self.crm_org_id:
            self.crm_org_id = crm_org_id_for(self.name)


def new_account(name: str) -> Account:
    # A stable organisation id and CRM org per account name, so restarts and resets keep them.
    return Account(
        name=name,
        org_uuid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"abm-emulator:{name}")),
        crm_org_id=crm_org_id_for(name),
    )


def fill_account_ref(account: Account, ref: Mapping[str, Any]) -> dict[str, str]:
    """An account as sent to add/remove, with a missing ``crmOrgId`` set to the customer account's CRM
    org and a missing ``crmType`` to SALESFORCE: the form that is stored, keyed and echoed back."""
    org = ref.get("crmOrgId")
    crm_type = ref.get("crmType")
    return {
        "id": ref["id"],
        "name": ref.get("name") or "",
        "crmOrgId": account.crm_org_id if org is None else org,
        "crmType": DEFAULT_CRM_TYPE if crm_type is None else crm_type,
    }


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
        "crm_org_id": account.crm_org_id,
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
    # A state file written before crm_org_id existed lacks it: derived from the name, as when created.
    account = Account(name=data["name"], org_uuid=data["org_uuid"], crm_org_id=data.get("crm_org_id") or "")
    for fid, f in data.get("folders", {}).items():
        account.folders[fid] = Folder(f["id"], f["name"], f["access"], t(f["create_time"]))
    for lid, lst in data.get("lists", {}).items():
        filled = (fill_account_ref(account, m) for m in lst.get("members", []))
        members = {(m["crmOrgId"], m["id"]): m for m in filled}
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
