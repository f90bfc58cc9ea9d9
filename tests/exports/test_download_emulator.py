"""DownloadExecutionCsvOperator against the emulator's storage origin.

The emulator serves `downloadUri` from its own origin, S3-like: pre-signed, refusing an
`Authorization` header, expiring, with `Content-Length`, `ETag` and `Range`. Expected bytes are
fetched independently with `requests` (no provider code) and compared by SHA-256.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import requests
from airflow.sdk.exceptions import AirflowFailException

from abm_provider.common.urls import UnsafeUrlError
from abm_provider.exceptions import AbmApiError
from abm_provider.operators.exports import CreateExportJobOperator, DownloadExecutionCsvOperator
from support.export_files import EXPORT_TYPE

MiB = 1 << 20


@pytest.fixture
def job(abm: Any, context: dict[str, Any]) -> Any:
    CreateExportJobOperator(task_id="job", export_type=EXPORT_TYPE, schedule="0 5 1 1 *").execute(context)
    return abm


def _current(execution_id: str) -> dict[str, Any]:
    """An execution as the executions endpoint lists it now (with a freshly signed link)."""
    from abm_provider.hooks.abm import AbmHook

    return next(e for e in AbmHook("abm_default").iter_executions(EXPORT_TYPE) if e["id"] == execution_id)


def _complete(abm: Any, size: int) -> dict[str, Any]:
    """Fire a COMPLETE execution of about `size` bytes and read it back as the sensor would."""
    return _current(abm.fire(EXPORT_TYPE, outcome="COMPLETE", sizeBytes=size)["id"])


def _expected(uri: str) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with requests.get(uri, stream=True, timeout=60) as response:
        response.raise_for_status()
        for chunk in response.iter_content(4 * MiB):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _storage_requests(abm: Any) -> list[dict[str, Any]]:
    return [r for r in abm.requests_seen() if r.get("origin") == "storage"]


def _op(**kwargs: Any) -> DownloadExecutionCsvOperator:
    kwargs.setdefault("retry_max_wait", 0.2)
    return DownloadExecutionCsvOperator(task_id="download", **kwargs)


def test_download_is_checked_and_placed(job: Any, context: dict[str, Any], tmp_path: Path) -> None:
    execution = _complete(job, 2 * MiB)
    sha, size = _expected(execution["downloadUri"])
    result = _op(execution=execution).execute(context)
    expected_path = tmp_path / "state" / "exports" / "abm_test" / "manual__test" / f"{execution['id']}.csv"
    assert result["path"] == str(expected_path)
    assert result["sha256"] == sha and result["bytes"] == size
    assert result["execution_id"] == execution["id"] and result["skipped"] is False
    assert hashlib.sha256(expected_path.read_bytes()).hexdigest() == sha
    assert sorted(os.listdir(expected_path.parent)) == [
        expected_path.name,
        expected_path.name + ".manifest.json",
    ]


def test_storage_origin_never_sees_the_api_key(job: Any, context: dict[str, Any]) -> None:
    execution = _complete(job, 256 * 1024)
    _op(execution=execution).execute(context)
    seen = _storage_requests(job)
    assert seen, "the emulator recorded no storage request"
    for request in seen:
        headers = {k.lower(): str(v) for k, v in (request.get("headers") or {}).items()}
        assert "authorization" not in headers
        assert not any(job.api_key in value for value in headers.values())


def test_rerun_skips_same_execution_and_replaces_tampered_file(job: Any, context: dict[str, Any]) -> None:
    execution = _complete(job, 512 * 1024)
    first = _op(execution=execution).execute(context)
    before = len(_storage_requests(job))
    again = _op(execution=execution).execute(context)
    assert again["skipped"] is True and again["sha256"] == first["sha256"]
    assert len(_storage_requests(job)) == before
    Path(first["path"]).write_bytes(b"tampered")
    fixed = _op(execution=execution).execute(context)
    assert fixed["skipped"] is False
    assert hashlib.sha256(Path(first["path"]).read_bytes()).hexdigest() == first["sha256"]


def test_expired_link_is_renewed(job: Any, context: dict[str, Any]) -> None:
    execution = _complete(job, 256 * 1024)
    job.advance(3600)  # past the link's lifetime (900 s by default)
    result = _op(execution=execution).execute(context)
    statuses = [r.get("status") for r in _storage_requests(job)]
    assert statuses == [403, 200]  # the expired link refused once, then the renewed link served
    fresh = _current(execution["id"])["downloadUri"]
    assert fresh != execution["downloadUri"]
    assert result["sha256"] == _expected(fresh)[0]


def test_link_that_stays_refused_fails_with_403(job: Any, context: dict[str, Any]) -> None:
    execution = _complete(job, 64 * 1024)
    job.inject_fault(origin="storage", method="GET", path=".*", kind="status", status=403, count=5)
    with pytest.raises(AbmApiError) as info:
        _op(execution=execution).execute(context)
    assert info.value.http_status == 403
    folder = Path(context_dir(job, context))
    assert not folder.exists() or list(folder.iterdir()) == []


def context_dir(abm: Any, context: dict[str, Any]) -> str:
    return os.path.join(os.environ["AIRFLOW__ABM__STATE_DIR"], "exports", "abm_test", "manual__test")


@pytest.mark.parametrize(
    ("uri", "rule"),
    [
        ("file:///etc/passwd", "only https is allowed"),
        ("http://storage.example.com/export.csv?sig=1", "plain http://.*use https://"),
        ("ftp://127.0.0.1/x.csv", "only https is allowed"),
        ("/etc/passwd", "only https is allowed"),
    ],
)
def test_unsafe_links_are_refused(abm: Any, context: dict[str, Any], uri: str, rule: str) -> None:
    with pytest.raises(UnsafeUrlError, match=rule):
        _op(download_uri=uri)
    execution = {"id": "e-1", "exportId": EXPORT_TYPE, "state": "COMPLETE", "downloadUri": uri}
    with pytest.raises(AirflowFailException, match=rule):
        _op(execution=execution).execute(context)
    assert _storage_requests(abm) == []


def test_failed_download_leaves_no_file(job: Any, context: dict[str, Any]) -> None:
    execution = _complete(job, 4 * MiB)
    job.inject_fault(
        origin="storage", method="GET", path=".*", kind="disconnect_mid_body", afterBytes=MiB, count=1
    )
    job.inject_fault(origin="storage", method="GET", path=".*", kind="status", status=500, count=20)
    with pytest.raises(AbmApiError):
        _op(execution=execution, max_attempts=2).execute(context)
    folder = Path(context_dir(job, context))
    assert not folder.exists() or list(folder.iterdir()) == []


def test_to_parquet_converts_while_streaming(job: Any, context: dict[str, Any], tmp_path: Path) -> None:
    execution = _complete(job, 3 * MiB)
    csv_copy = tmp_path / "copy.csv"
    csv_copy.write_bytes(requests.get(execution["downloadUri"], timeout=60).content)
    expected_rows = pacsv.read_csv(
        csv_copy, parse_options=pacsv.ParseOptions(newlines_in_values=True)
    ).num_rows
    result = _op(execution=execution, to_parquet=True).execute(context)
    assert result["format"] == "parquet" and result["path"].endswith(".parquet")
    assert result["rows"] == expected_rows
    assert result["sha256"] == hashlib.sha256(csv_copy.read_bytes()).hexdigest()
    assert pq.read_metadata(result["path"]).num_rows == expected_rows


@pytest.mark.slow
def test_200_mib_survives_two_disconnects_and_is_never_partial(job: Any, context: dict[str, Any]) -> None:
    execution = _complete(job, 200 * MiB)
    sha, size = _expected(execution["downloadUri"])
    job.inject_fault(
        origin="storage", method="GET", path=".*", kind="disconnect_mid_body", afterBytes=60 * MiB, count=2
    )
    target = Path(context_dir(job, context)) / f"{execution['id']}.csv"
    seen_sizes: set[int] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            with contextlib.suppress(FileNotFoundError):
                seen_sizes.add(target.stat().st_size)
            time.sleep(0.01)  # a partial file would be visible for seconds; sampling catches it

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = _op(execution=execution).execute(context)
    finally:
        stop.set()
        watcher.join()
    assert result["sha256"] == sha and result["bytes"] == size
    assert result["resumed"] == 2
    assert seen_sizes <= {size}, f"a partial file was visible at the destination: sizes {sorted(seen_sizes)}"
    assert hashlib.sha256(target.read_bytes()).hexdigest() == sha
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name, target.name + ".manifest.json"]
