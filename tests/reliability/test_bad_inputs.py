"""Bad-input matrix for the operators' arguments: each mistake fails with an error naming what to fix.

Every case states where it is caught and what the user reads:

- ``parse``: the operator's constructor raises ``ValueError``, so the DAG file fails to import and
  the mistake never reaches a worker;
- ``execute``: the value only exists once templates are rendered (or XCom resolved), so the task
  fails with ``AirflowFailException`` (no retries: retrying cannot fix an argument) before any
  request is sent, or with the service's own answer when only the service can tell.

For every case the emulator's request log and state show that nothing was sent (or only the one
request the service needed to answer) and nothing was created. Account rows are the other half: bad
rows go to the rejects file with a reason naming the field, and every valid row still reaches the list.

Rule-by-rule cron parsing is covered in ``tests/exports/test_schedule.py`` and the validator's reasons in
``tests/accounts/test_validation.py`` and ``test_sources.py``; this matrix drives the operators end to end.
``docs/bad-inputs.md`` holds the same table.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from abm_provider.operators.account_lists import (
    AddAccountsToListOperator,
    CreateAccountListFolderOperator,
    CreateAccountListOperator,
    RemoveAccountsFromListOperator,
)
from abm_provider.operators.exports import CreateExportJobOperator, DownloadExecutionCsvOperator
from abm_provider.sensors.exports import ExecutionCompleteSensor
from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator

ORG = "00D000000000001"
GOOD_ACCOUNT = {"id": "001000000000001AAA", "crmOrgId": ORG}
FAST = {"max_attempts": 1, "retry_max_wait": 0.1}


@dataclass(frozen=True)
class Case:
    """One bad argument: the operator and the field it is given, and the error the user must see."""

    key: str
    build: Callable[[Any], Any]
    field: str
    value: Any
    fragment: str
    #: Requests the service needs to answer (only for what only the service can know).
    requests: int = 0
    #: Whether the constructor can see the value (a literal) or only ``execute`` (templated/XCom).
    at_parse: bool = True


def _job(value: Any) -> Any:
    return CreateExportJobOperator(task_id="job", export_type="TACTIC_PERFORMANCE", schedule=value, **FAST)


def _job_type(value: Any) -> Any:
    return CreateExportJobOperator(task_id="job", export_type=value, schedule="0 5 * * *", **FAST)


def _folder(value: Any) -> Any:
    return CreateAccountListFolderOperator(task_id="folder", folder_name="Q4", folder_access=value, **FAST)


def _folder_name(value: Any) -> Any:
    return CreateAccountListFolderOperator(task_id="folder", folder_name=value, **FAST)


def _list_name(value: Any) -> Any:
    return CreateAccountListOperator(task_id="list", list_name=value, folder_id="f-1", **FAST)


def _add(value: Any) -> Any:
    return AddAccountsToListOperator(
        task_id="add", list_id=value, accounts=[GOOD_ACCOUNT], default_crm_org_id=ORG, **FAST
    )


def _remove(value: Any) -> Any:
    return RemoveAccountsFromListOperator(
        task_id="remove", list_id=value, accounts=[GOOD_ACCOUNT], default_crm_org_id=ORG, **FAST
    )


CRON = {
    "six_fields": ("0 0 5 * * *", "has 6 fields; it needs exactly five"),
    "every_5_minutes": ("*/5 * * * *", "minute field must be a single value"),
    "every_2_hours": ("0 */2 * * *", "hour field must be a single value"),
    "minute_60": ("60 0 * * *", "minute 60 is out of range 0-59"),
    "empty": ("", "has 0 fields"),
    "not_a_string": (5, "schedule must be a string, got int"),
}
UNSAFE_IDS = {
    "slash": "a/b",
    "dot_dot": "..",
    "dot": ".",
    "inner_space": "a b",
    "leading_space": " l-1",
    "newline": "l-1\n",
    "backslash": "a\\b",
}

CASES: list[Case] = [
    *(Case(f"cron_{k}", _job, "schedule", v, f) for k, (v, f) in CRON.items()),
    Case("export_type_slash", _job_type, "export_type", "A/B", "export_type 'A/B' is not a valid identifier"),
    Case("export_type_empty", _job_type, "export_type", "", "export_type is empty"),
    Case("export_type_not_a_string", _job_type, "export_type", 7, "export_type must be a string, got int"),
    # Only the service knows which types exist (new ones appear); its 400 names the known ones.
    Case(
        "export_type_unknown",
        _job_type,
        "export_type",
        "TACTIC_PERF",
        "Input should be 'TACTIC_PERFORMANCE' or 'DISPLAY_TACTIC_ACCOUNT_PERFORMANCE'",
        requests=1,
        at_parse=False,
    ),
    Case(
        "folder_access_unknown",
        _folder,
        "folder_access",
        "PRIVATE",
        "folder_access must be one of ['FOLDER_ACCESS_UNSPECIFIED', 'PUBLIC', 'READ_ONLY'], got 'PRIVATE'",
    ),
    Case("folder_access_lowercase", _folder, "folder_access", "public", "got 'public'"),
    Case("folder_name_not_a_string", _folder_name, "folder_name", 5, "folder_name must be a string, got int"),
    Case("folder_name_blank", _folder_name, "folder_name", "  ", "folder_name is empty"),
    Case("list_name_not_a_string", _list_name, "list_name", ["x"], "list_name must be a string, got list"),
    *(
        Case(f"{op.__name__[1:]}_list_id_{k}", op, "list_id", v, f"list_id {v!r} is not a valid identifier")
        for op in (_add, _remove)
        for k, v in UNSAFE_IDS.items()
    ),
    Case("add_list_id_not_a_string", _add, "list_id", 5, "list_id must be a string, got int 5"),
    Case("add_list_id_empty", _add, "list_id", "", "list_id is empty"),
    # Percent signs are encoded, so this reaches only a list literally named "%2e%2e" and is not found.
    Case("add_list_id_encoded_dots", _add, "list_id", "%2e%2e", "Account list '%2e%2e' not found", 1, False),
]


def _requests(abm: Any) -> int:
    return len([r for r in abm.requests_seen() if not str(r.get("path", "")).startswith("/_admin")])


def _created(abm: Any) -> list[Any]:
    state = abm.state()
    return [
        item
        for account in (state.get("accounts") or {}).values()
        for kind in ("folders", "lists", "jobs")
        for item in (account.get(kind) or [])
    ]


@pytest.mark.parametrize("case", [c for c in CASES if c.at_parse], ids=lambda c: c.key)
def test_a_literal_bad_argument_fails_the_dag_at_parse_time(case: Case) -> None:
    with pytest.raises(ValueError) as info:
        case.build(case.value)
    assert case.fragment in str(info.value)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.key)
def test_a_rendered_bad_argument_fails_the_task_naming_it_and_sends_nothing(
    case: Case, abm: Any, context: dict[str, Any]
) -> None:
    op = case.build("{{ params.value }}") if case.at_parse else case.build(case.value)
    setattr(op, case.field, case.value)  # what template rendering / XCom resolution would produce
    before = _requests(abm)
    with pytest.raises(Exception) as info:
        op.execute(context)
    assert case.fragment in str(info.value)
    if case.requests == 0:
        assert isinstance(info.value, AirflowFailException), f"retried in vain: {info.value!r}"
    assert _requests(abm) - before == case.requests
    assert _created(abm) == []
    state_dir = Path(os.environ["AIRFLOW__ABM__STATE_DIR"])
    assert not state_dir.exists() or not any(p.is_file() for p in state_dir.rglob("*")), "files were written"


# --- the other operators' arguments ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"table": "a;drop table x"}, "is not a plain identifier"),
        ({"table": "a.b.c"}, "must be 'table' or 'schema.table'"),
        ({"export_type": "TACTIC_PERF"}, "export_type 'TACTIC_PERF' is not known; known types:"),
        ({"max_rejected": -1}, "max_rejected must not be negative"),
        ({"max_rejected": 1.5}, "max_rejected as a fraction must be in [0, 1)"),
        ({"max_rejected": True}, "max_rejected must be an int (count) or a float"),
        ({"on_schema_change": "drop"}, "on_schema_change must be 'fail' or 'add_columns', got 'drop'"),
        ({"method": "bulk"}, "method must be one of ['auto', 'native', 'generic'], got 'bulk'"),
        ({"chunk_rows": 0}, "chunk_rows must be a whole number >= 1, got 0"),
        ({"chunk_rows": 2.5}, "chunk_rows must be a whole number, got 2.5"),
        ({"max_executions": True}, "max_executions must be a whole number, got True"),
    ],
    ids=[
        "table_injection",
        "table_3_parts",
        "export_type",
        "max_neg",
        "max_frac",
        "max_bool",
        "schema",
        "method",
        "chunk",
        "chunk_fraction",
        "max_executions_bool",
    ],
)
def test_loader_arguments_are_checked_at_parse_time(kwargs: dict[str, Any], fragment: str) -> None:
    base = {"source": "/data/x.csv", "sql_conn_id": "wh", "table": "t", "export_type": "TACTIC_PERFORMANCE"}
    with pytest.raises(ValueError) as info:
        ExecutionCsvToSqlOperator(task_id="load", **{**base, **kwargs})
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("execution", "fragment"),
    [
        ({"id": "e-1", "exportId": "TACTIC_PERFORMANCE", "state": "FAILED"}, "is FAILED, not COMPLETE"),
        ("e-1", "execution must be an execution dict (the sensor's XCom), got str"),
        ({"id": "e-1", "state": "COMPLETE"}, "No downloadUri"),
        (
            {"id": "e-1", "state": "COMPLETE", "downloadUri": "file:///etc/passwd"},
            "has scheme 'file'; only https is allowed",
        ),
    ],
    ids=["failed", "not_a_dict", "no_link", "local_file"],
)
def test_download_refuses_a_bad_execution_before_fetching(
    abm: Any, context: dict[str, Any], execution: Any, fragment: str
) -> None:
    before = _requests(abm)
    with pytest.raises(AirflowFailException) as info:
        DownloadExecutionCsvOperator(task_id="download", execution=execution, **FAST).execute(context)
    assert fragment in str(info.value)
    assert _requests(abm) == before


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"updated_after": "yesterday"}, "updated_after: not an ISO 8601"),
        ({"export_type": "NOPE"}, "'NOPE' not found"),
    ],
    ids=["updated_after", "unknown_job"],
)
def test_sensor_bad_arguments_fail_naming_them(
    abm: Any, context: dict[str, Any], kwargs: dict[str, Any], fragment: str
) -> None:
    options = {"export_type": "TACTIC_PERFORMANCE", **kwargs}
    sensor = ExecutionCompleteSensor(task_id="wait", timeout=5, poke_interval=1, max_attempts=1, **options)
    with pytest.raises(Exception) as info:
        sensor.execute(context)
    assert fragment in str(info.value)


# --- account rows ---------------------------------------------------------------------------------

#: (row, what the rejects file's reason starts with). Every one is a row a user could plausibly have.
BAD_ROWS: dict[str, tuple[dict[str, Any], str]] = {
    "missing_id_column": ({"name": "No id", "crmOrgId": ORG}, "missing id (no column 'id')"),
    "null_id": ({"id": None, "crmOrgId": ORG}, "missing id (null)"),
    "blank_id": ({"id": "   ", "crmOrgId": ORG}, "empty id"),
    "id_not_a_string": ({"id": 1000000000001, "crmOrgId": ORG}, "id must be a string, got int"),
    "id_with_space": ({"id": "001 0000000000", "crmOrgId": ORG}, "id contains whitespace"),
    "name_not_a_string": ({"id": "001000000000091AAA", "name": 3.5}, "name must be a string, got float"),
    "org_not_a_string": ({"id": "001000000000092AAA", "crmOrgId": {"org": 1}}, "crmOrgId must be a string"),
    "crm_type_unknown": ({"id": "001000000000093AAA", "crmType": "HUBSPOT"}, "unknown crmType 'HUBSPOT'"),
    "crm_type_lowercase": (
        {"id": "001000000000094AAA", "crmType": "salesforce"},
        "unknown crmType 'salesforce'",
    ),
    "crm_type_not_a_string": (
        {"id": "001000000000095AAA", "crmType": 1},
        "crmType must be a string, got int",
    ),
    "row_not_a_mapping": (["001000000000096AAA", ORG], "row is not a mapping"),
}
GOOD_IDS = [f"001{i:012d}AAA" for i in range(1, len(BAD_ROWS) + 2)]


def test_bad_account_rows_are_rejected_with_reasons_and_every_valid_row_is_added(
    abm: Any, context: dict[str, Any], tmp_path: Path
) -> None:
    folder = CreateAccountListFolderOperator(task_id="f", folder_name="bad-inputs").execute(context)
    created = CreateAccountListOperator(task_id="l", list_name="bad", folder_id=folder["folderId"]).execute(
        context
    )
    rows: list[Any] = []
    for good_id, (bad, _) in zip(GOOD_IDS, BAD_ROWS.values(), strict=False):  # valid, bad, valid, ...
        rows += [{"id": good_id, "name": "ok", "crmType": "SALESFORCE"}, bad]
    rows.append({"id": GOOD_IDS[-1]})
    rejects_path = tmp_path / "rejects.csv"

    out = AddAccountsToListOperator(
        task_id="add",
        list_id=created["listId"],
        accounts=rows,
        default_crm_org_id=ORG,
        max_rejected=len(BAD_ROWS),
        rejects_path=str(rejects_path),
    ).execute(context)

    assert sorted(m["id"] for m in abm.members(created["listId"])) == sorted(GOOD_IDS)
    assert out["rejected"] == len(BAD_ROWS) and out["added"] == len(GOOD_IDS)
    with rejects_path.open(encoding="utf-8", newline="") as handle:
        written = list(csv.DictReader(handle))
    assert len(written) == len(BAD_ROWS)
    for (key, (bad, reason)), reject in zip(BAD_ROWS.items(), written, strict=True):
        assert reject["reason"].startswith(reason), (key, reject["reason"])
        assert int(reject["record"]) == 2 * (list(BAD_ROWS).index(key) + 1) and reject["line"] == ""
        assert json.loads(reject["raw"]) == bad  # the row is kept as given, nothing of it lost


def test_bad_input_counts_match_the_docs() -> None:
    total = len(CASES) + 9 + 4 + 2 + len(BAD_ROWS)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "bad-inputs.md").read_text(encoding="utf-8")
    assert f"{total} bad operator arguments and account rows" in doc
