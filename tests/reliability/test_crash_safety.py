"""Crash safety: the task process is SIGKILLed mid-download and mid-load, then the task runs again.

A killed worker gets no exception, no ``finally`` and no rollback call: whatever it left behind is
what the next try finds. Each case runs the real operator in a fresh interpreter, stops it at a
chosen point (a patch announces the point in a marker file and sleeps), kills it with SIGKILL, checks
what is visible, then re-runs the task normally and compares with an uninterrupted run.

Crash points already covered elsewhere and not repeated here: a load killed after its INSERT and a
COPY killed after 2 MiB (``tests/transfers/test_load_killed.py``); a download that fails with an
exception mid-body (``tests/exports/test_download_emulator.py``).

Downloads (``DownloadExecutionCsvOperator``, emulator storage origin), five points: after 1 MiB of
the body (CSV), after 1 MiB while converting to Parquet, with every byte written but before the
rename, after the rename but before the manifest, and mid-body while the destination still holds
an earlier execution's complete file. Loads (``ExecutionCsvToSqlOperator``, DuckDB and PostgreSQL),
six points each: mid-staging, after staging with the rejects written, after the DELETE of restated
rows, right before COMMIT, right before the COMMIT of the very first load (the table is created in
that transaction), and right after COMMIT before the task could report success.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import requests

from abm_provider.exports.archive import read_manifest
from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator
from support.export_files import csv_bytes, days, download_xcom, expected, tactic_rows, write_export
from support.processes import run_until_killed
from support.warehouses import Warehouse

from .badinput_support import duckdb_target, postgres_target

EXPORT_TYPE = "TACTIC_PERFORMANCE"
MiB = 1 << 20

# --- downloads ------------------------------------------------------------------------------------

_AFTER_1_MIB = """
    from abm_provider.exports import archive
    original = archive.HashingSink.write
    def write(self, data):
        written = original(self, data)
        if self.count >= 1 << 20:
            wait_to_be_killed()
        return written
    archive.HashingSink.write = write
"""
_BEFORE_RENAME = """
    from abm_provider.exports import archive
    archive.AtomicFile.commit = lambda self: wait_to_be_killed()
"""
_BEFORE_MANIFEST = """
    from abm_provider.exports import download
    download.write_manifest = lambda target, data: wait_to_be_killed()
"""
DOWNLOAD_POINTS = {
    "mid_body_csv": (_AFTER_1_MIB, {}),
    "mid_body_parquet": (_AFTER_1_MIB, {"to_parquet": True}),
    "before_rename": (_BEFORE_RENAME, {}),
    "before_manifest": (_BEFORE_MANIFEST, {}),
    "mid_body_over_older_file": (_AFTER_1_MIB, {"if_exists": "overwrite"}),
}
_DOWNLOAD_BODY = """
    from types import SimpleNamespace
    from abm_provider.operators.exports import DownloadExecutionCsvOperator
    ti = SimpleNamespace(**kwargs.pop("ti"))
    context = {"ti": ti, "task_instance": ti, "run_id": ti.run_id}
    DownloadExecutionCsvOperator(task_id="download", **kwargs).execute(context)
"""


def _execution(abm: Any, size: int) -> dict[str, Any]:
    """A COMPLETE execution of about ``size`` bytes, as the sensor hands it over."""
    from abm_provider.hooks.abm import AbmHook

    fired = abm.fire(EXPORT_TYPE, outcome="COMPLETE", sizeBytes=size)
    return next(e for e in AbmHook("abm_default").iter_executions(EXPORT_TYPE) if e["id"] == fired["id"])


def _sha256_of(uri: str) -> str:
    """The served file's checksum, fetched without any provider code."""
    response = requests.get(uri, timeout=60)
    response.raise_for_status()
    return hashlib.sha256(response.content).hexdigest()


def _file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def export_job(abm: Any, context: dict[str, Any]) -> Any:
    from abm_provider.operators.exports import CreateExportJobOperator

    CreateExportJobOperator(task_id="job", export_type=EXPORT_TYPE, schedule="0 5 1 1 *").execute(context)
    return abm


@pytest.mark.parametrize("point", list(DOWNLOAD_POINTS))
def test_a_killed_download_leaves_nothing_partial_and_the_rerun_completes(
    export_job: Any, context: dict[str, Any], tmp_path: Path, point: str
) -> None:
    from abm_provider.operators.exports import DownloadExecutionCsvOperator

    patch, options = DOWNLOAD_POINTS[point]
    parquet = bool(options.get("to_parquet"))
    target = tmp_path / "landing" / ("export.parquet" if parquet else "export.csv")
    older_sha = None
    if point == "mid_body_over_older_file":
        older = _execution(export_job, 256 * 1024)
        DownloadExecutionCsvOperator(task_id="older", execution=older, destination=str(target)).execute(
            context
        )
        older_sha = _file_sha(target)
    execution = _execution(export_job, 3 * MiB)
    expected_sha = _sha256_of(execution["downloadUri"])
    ti = {
        "dag_id": "crash",
        "task_id": "download",
        "run_id": "manual__crash",
        "try_number": 1,
        "map_index": -1,
    }

    run_until_killed(
        tmp_path,
        patch,
        _DOWNLOAD_BODY,
        {"ti": ti, "execution": execution, "destination": str(target), "retry_max_wait": 0.2, **options},
    )

    # What a reader of the destination sees after the crash: nothing, or a whole file with its record.
    if point == "before_manifest":
        assert _file_sha(target) == expected_sha  # published whole; only the manifest is missing
        assert read_manifest(_storage(target)) is None
    elif older_sha is not None:
        assert _file_sha(target) == older_sha  # the earlier execution's file, untouched
        assert read_manifest(_storage(target))["file_sha256"] == older_sha
    else:
        assert not target.exists()
    visible = sorted(p.name for p in target.parent.iterdir() if not p.name.startswith("."))
    assert all(not name.endswith(".part") for name in visible)

    context["ti"].try_number = 2
    result = DownloadExecutionCsvOperator(
        task_id="download", execution=execution, destination=str(target), retry_max_wait=0.2, **options
    ).execute(context)

    assert result["skipped"] is False and result["sha256"] == expected_sha
    manifest = read_manifest(_storage(target))
    assert manifest is not None and manifest["execution_id"] == execution["id"]
    assert manifest["file_sha256"] == _file_sha(target) and manifest["sha256"] == expected_sha
    if parquet:
        assert pq.read_metadata(target).num_rows == result["rows"] > 0
    else:
        assert _file_sha(target) == expected_sha
    # The killed try's temporary file is gone too: the folder holds the file and its manifest only.
    assert sorted(os.listdir(target.parent)) == [target.name, target.name + ".manifest.json"]
    # A third try (default if_exists="skip") finds the verified file and downloads nothing.
    skip_options = {k: v for k, v in options.items() if k != "if_exists"}
    again = DownloadExecutionCsvOperator(
        task_id="download", execution=execution, destination=str(target), **skip_options
    ).execute(context)
    assert again["skipped"] is True and again["sha256"] == expected_sha


def _storage(path: Path) -> Any:
    from airflow.sdk import ObjectStoragePath

    return ObjectStoragePath(f"file://{path}")


# --- warehouse loads ------------------------------------------------------------------------------

_CONN_PROXY = """
    from abm_provider.warehouse.flow import WarehouseLoader
    class Conn:
        def __init__(self, conn):
            self._conn = conn
        def __getattr__(self, name):
            return getattr(self._conn, name)
        def commit(self):
            {commit}
    original = WarehouseLoader._run
    def _run(self, conn, *args):
        return original(self, Conn(conn), *args)
    WarehouseLoader._run = _run
"""
_MID_STAGE = """
    from abm_provider.warehouse.dialects import duckdb as duck, postgres as pg
    def patched(original):
        def iter_records(*args, **kwargs):
            for number, record in enumerate(original(*args, **kwargs), start=1):
                if number == 40:
                    wait_to_be_killed()
                yield record
        return iter_records
    duck.iter_records = patched(duck.iter_records)
    pg.iter_records = patched(pg.iter_records)
"""
_AFTER = """
    from abm_provider.warehouse.flow import WarehouseLoader
    original = WarehouseLoader.{method}
    def patched(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        wait_to_be_killed()
        return out
    WarehouseLoader.{method} = patched
"""
LOAD_POINTS = {
    # Python staging (the file has a malformed record), killed after 40 records were staged.
    "mid_stage": _MID_STAGE,
    # Staged, checked and the rejects file written; before the lock and the replace.
    "after_stage": _AFTER.format(method="_report_rejects"),
    # Restated rows deleted inside the transaction, new rows not yet inserted.
    "after_delete": _AFTER.format(method="delete_replaced"),
    # Delete, insert and ledger row done; COMMIT never sent.
    "before_commit": _CONN_PROXY.format(commit="wait_to_be_killed()"),
    # The first load ever: table and ledger created in the transaction that never commits.
    "first_load_before_commit": _CONN_PROXY.format(commit="wait_to_be_killed()"),
    # Committed, but the task died before it could report success: the re-run must be a no-op.
    "after_commit": _CONN_PROXY.format(commit="self._conn.commit(); wait_to_be_killed()"),
}
_LOAD_BODY = """
    from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator
    ExecutionCsvToSqlOperator(task_id="load", **kwargs).execute(context={})
"""

FIRST = tactic_rows(days(dt.date(2026, 9, 1), 10), 20, version=1)
# Restates days 9-10 of the first file and adds 20 more days: the replace has rows to delete.
SECOND = tactic_rows(days(dt.date(2026, 9, 9), 22), 20, version=2)
BAD_VALUE = csv_bytes([["2026-09-20", "c0", "x", "t99", "x", "12x", "1", "1.00"]])
MALFORMED = b"2026-09-21,c0,short,t98,row,1,2\n"


def _files(folder: Path, point: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two executions' files in ``folder``: the second has a bad value (and a malformed record)."""
    folder.mkdir(parents=True, exist_ok=True)
    extra = BAD_VALUE + (MALFORMED if point == "mid_stage" else b"")
    first = download_xcom(write_export(folder / "n.csv", FIRST), "exec-1")
    second = download_xcom(write_export(folder / "n1.csv", SECOND, extra=extra), "exec-2")
    return first, second


def _load(target: Warehouse, source: dict[str, Any]) -> dict[str, Any]:
    return ExecutionCsvToSqlOperator(
        task_id="load", source=source, max_rejected=5, **target.operator_kwargs()
    ).execute(context={})


def _targets(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: Any
) -> tuple[Warehouse, Warehouse]:
    """The target the crash happens in, and a reference target that runs uninterrupted."""
    if kind == "duckdb":
        return (
            duckdb_target(tmp_path / "crash.duckdb", monkeypatch, "crash_duckdb"),
            duckdb_target(tmp_path / "reference.duckdb", monkeypatch, "reference_duckdb"),
        )
    make = request.getfixturevalue("pg_schemas")
    return postgres_target(make(), monkeypatch, "crash_pg"), postgres_target(make(), monkeypatch, "crash_pg")


@pytest.mark.parametrize("kind", ["duckdb", "postgres"])
@pytest.mark.parametrize("point", list(LOAD_POINTS))
def test_a_killed_load_is_invisible_and_the_rerun_equals_an_uninterrupted_run(
    kind: str, point: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: Any
) -> None:
    crashed, reference = _targets(kind, tmp_path, monkeypatch, request)
    first, second = _files(tmp_path / "crash", point)
    ref_first, ref_second = _files(tmp_path / "reference", point)

    # The uninterrupted run: the first execution, then the second.
    _load(reference, ref_first)
    _load(reference, ref_second)
    want_rows, want_ledger = reference.rows(), reference.ledger_rows()
    want_rejects = (tmp_path / "reference" / "n1.csv.rejects.csv").read_text(encoding="utf-8")
    assert len(want_rows) == len(expected("TACTIC_PERFORMANCE", FIRST, SECOND)) and len(want_ledger) == 2

    killed = first if point == "first_load_before_commit" else second
    if point != "first_load_before_commit":
        _load(crashed, first)
    before_rows, before_ledger = crashed.rows(), crashed.ledger_rows()

    run_until_killed(
        tmp_path,
        LOAD_POINTS[point],
        _LOAD_BODY,
        {"source": killed, "max_rejected": 5, **crashed.operator_kwargs()},
    )

    if point == "after_commit":
        assert crashed.rows() == want_rows and crashed.ledger_rows() == want_ledger
    else:
        assert crashed.rows() == before_rows, "the killed load changed the table"
        assert crashed.ledger_rows() == before_ledger, "the killed load left a ledger row"
    if point == "first_load_before_commit":
        assert not crashed.exists() and not crashed.exists(crashed.ledger)

    # The next try of the killed task, then whatever the uninterrupted run did after it.
    out = _load(crashed, killed)
    assert out["skipped"] is (point == "after_commit")
    if point == "first_load_before_commit":
        _load(crashed, second)

    got_rows = crashed.rows()
    assert got_rows == want_rows
    keys = [(r[0], r[3]) for r in got_rows]
    assert len(keys) == len(set(keys)), "duplicate natural keys after the re-run"
    assert crashed.ledger_rows() == want_ledger
    rejects = tmp_path / "crash" / "n1.csv.rejects.csv"
    assert rejects.read_text(encoding="utf-8") == want_rejects
    assert not [p for p in rejects.parent.iterdir() if p.name.endswith(".tmp")]


def test_crash_point_counts_are_what_the_docs_say() -> None:
    """The module docstring and docs/bad-inputs.md quote these counts; keep them honest."""
    assert (len(DOWNLOAD_POINTS), len(LOAD_POINTS)) == (5, 6)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "bad-inputs.md").read_text(encoding="utf-8")
    assert f"{len(DOWNLOAD_POINTS) + 2 * len(LOAD_POINTS)} crash points" in doc


def test_only_an_earlier_try_s_temporary_files_are_swept(tmp_path: Path) -> None:
    """The sweep before a download removes ``.<name>.<12 hex>.part`` of that target and nothing else."""
    from abm_provider.exports.archive import remove_stale_temps

    names = {
        ".exp[1].csv.0123456789ab.part": False,  # the target's own stale temp: removed
        ".exp[1].csv.manifest.json.0123456789ab.part": True,
        ".exp[1].csv.notahexsuffix.part": True,
        ".expX1].csv.0123456789ab.part": True,  # '[1]' must not act as a glob class
        ".other.csv.0123456789ab.part": True,
        "exp[1].csv.manifest.json": True,
    }
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    target = tmp_path / "exp[1].csv"
    target.write_bytes(b"whole")

    removed = remove_stale_temps(_storage(target))

    assert removed == [".exp[1].csv.0123456789ab.part"]
    assert {p.name for p in tmp_path.iterdir()} == {n for n, kept in names.items() if kept} | {target.name}
