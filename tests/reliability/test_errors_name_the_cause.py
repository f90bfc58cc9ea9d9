"""Errors are classified by what failed, not by where they surfaced.

A download's body is read in a loop that also writes the archive and feeds the load, so before the fix
every exception raised there was taken for a lost connection: a full disk was retried five times per
download (ten for a streamed load), the load's own stop of the stream four times, and a web page
answered with 200 went on to fail at the header with a plain ``ValueError`` that Airflow retried.

Here, each case is run against a real local server, and the test checks the exception's class (the
final ones are ``AirflowFailException``s, which Airflow does not retry), what its message names, and
how many requests reached the server: one, for every final error.
"""

from __future__ import annotations

import datetime as dt
import errno
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from abm_provider.exceptions import LocalStorageError, NotAnExport, UnexpectedBody
from support.export_files import TACTIC_COLUMNS, csv_bytes, days, tactic_rows

from .badinput_support import StorageHandler, duckdb_target, postgres_target, serve

SIGNATURE = "sig-0123456789abcdef"


@pytest.fixture
def storage(abm: Any) -> Iterator[type[StorageHandler]]:
    """A storage origin on 127.0.0.1; ``storage.url`` is a link to it carrying a signature."""
    with serve(f"/export.csv?X-Amz-Signature={SIGNATURE}") as handler:
        yield handler


def _export(day_count: int = 20, tactics: int = 100) -> bytes:
    rows = tactic_rows(days(dt.date(2026, 9, 1), day_count), tactics, version=1)
    return csv_bytes([TACTIC_COLUMNS, *([row[c] for c in TACTIC_COLUMNS] for row in rows)])


def _download(storage: Any, tmp_path: Path) -> Any:
    from abm_provider.operators.exports import DownloadExecutionCsvOperator

    return DownloadExecutionCsvOperator(
        task_id="download",
        download_uri=storage.url,
        destination=str(tmp_path / "archive" / "export.csv"),
        max_attempts=5,
    )


def _load(storage: Any, target: Any, tmp_path: Path) -> Any:
    from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator

    return ExecutionCsvToSqlOperator(
        task_id="load",
        source={"downloadUri": storage.url},
        export_type="TACTIC_PERFORMANCE",
        archive=str(tmp_path / "archive" / "export.csv"),
        **target.operator_kwargs(),
    )


@pytest.fixture(params=["duckdb", "postgres"])
def target(request: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    if request.param == "duckdb":
        return duckdb_target(tmp_path / "wh.duckdb", monkeypatch)
    return postgres_target(request.getfixturevalue("pg_schemas")(), monkeypatch)


# --- a local disk that refuses the write ------------------------------------------------------------


def _disk_refuses(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    """Every write of the archive's temporary file fails with ``code``; ENOSPC comes from /dev/full."""
    from abm_provider.exports import archive

    original = archive.AtomicFile.open

    def open_(self: Any) -> Any:
        if self._file is None and code == errno.ENOSPC:
            original(self)  # folders and the temporary name, as usual; the bytes go to a full device
            self._file.close()
            self._file = open("/dev/full", "wb", buffering=0)  # noqa: SIM115 - AtomicFile closes it
        file = original(self)
        if code != errno.ENOSPC:

            def write(data: Any) -> int:
                raise OSError(code, __import__("os").strerror(code))

            file.write = write  # type: ignore[method-assign]
        return file

    monkeypatch.setattr(archive.AtomicFile, "open", open_)


@pytest.mark.parametrize(
    "code", [errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES], ids=errno.errorcode.get
)
def test_a_full_or_read_only_disk_fails_the_download_once_naming_the_file(
    storage: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    storage.body = _export()
    _disk_refuses(monkeypatch, code)

    with pytest.raises(LocalStorageError) as caught:
        _download(storage, tmp_path).execute(context={})

    err = caught.value
    assert isinstance(err, AirflowFailException), "a full disk is final: Airflow must not retry it"
    assert err.errno == code and err.path == str(tmp_path / "archive" / "export.csv")
    assert str(tmp_path / "archive" / "export.csv") in str(err) and errno.errorcode[code] in str(err)
    assert "connection" not in str(err)
    assert storage.served == 1, "a local write error was retried as a network failure"


def test_a_full_disk_under_a_streamed_load_is_final_and_not_downloaded_again(
    storage: Any, target: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage.body = _export()
    _disk_refuses(monkeypatch, errno.ENOSPC)

    with pytest.raises(LocalStorageError, match="No space left on device"):
        _load(storage, target, tmp_path).execute(context={})

    assert storage.served == 1, "the streamed load fell back to a second download onto the full disk"
    assert not target.exists()


# --- the load's own stop is not a network failure ---------------------------------------------------


def test_a_load_that_fails_on_its_own_stops_the_download_without_retrying_it(
    storage: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_schemas: Any
) -> None:
    storage.body = _export(60, 3000)  # 12 MiB: many COPY chunks,
    storage.rate = 4 << 20  # served for 3 s: the download still runs when the load fails
    target = postgres_target(pg_schemas(), monkeypatch)
    from abm_provider.warehouse.dialects import postgres

    original = postgres._progress

    def _progress(*args: Any, **kwargs: Any) -> Iterator[bytes]:
        for number, chunk in enumerate(original(*args, **kwargs)):
            if number == 1:
                raise RuntimeError("the warehouse went away")
            yield chunk

    monkeypatch.setattr(postgres, "_progress", _progress)
    logged: list[str] = []
    operator = _load(storage, target, tmp_path)
    monkeypatch.setattr(operator.log, "warning", lambda msg, *a, **k: logged.append(msg % a if a else msg))

    with pytest.raises(RuntimeError, match="the warehouse went away"):
        operator.execute(context={})

    assert storage.served == 1, "the stopped download was retried or started again"
    assert not [line for line in logged if "retrying" in line or "connection lost" in line], logged
    assert not (tmp_path / "archive" / "export.csv").exists(), "the download was not stopped"
    assert not list((tmp_path / "archive").glob(".export.csv.*.part"))


# --- a body that is not the export --------------------------------------------------------------------

BODIES = {
    "html": (
        "text/html; charset=utf-8",
        f"<!DOCTYPE html><html><body>Session expired: /export.csv?X-Amz-Signature={SIGNATURE}</body>",
    ),
    "json": ("application/json", '{"error": {"code": 503, "message": "storage unavailable"}}'),
    "json_as_csv": ("text/csv", '{"error": {"code": 503, "message": "storage unavailable"}}'),
    "prose_as_csv": ("text/csv", "Access denied, please sign in again\n"),
}


@pytest.mark.parametrize("case", sorted(BODIES))
def test_a_body_that_is_not_the_export_fails_the_download_or_load_for_good(
    storage: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    content_type, text = BODIES[case]
    storage.content_type, storage.body = content_type, text.encode()
    target = duckdb_target(tmp_path / "wh.duckdb", monkeypatch)

    with pytest.raises(AirflowFailException) as caught:
        _load(storage, target, tmp_path).execute(context={})

    message = str(caught.value)
    # The link's answer is refused by the hook when its Content-Type says it is no file, else the
    # file by the load, at its first line.
    assert isinstance(caught.value, (UnexpectedBody, NotAnExport)), type(caught.value)
    assert text[:20] in message, "the message shows what arrived"
    assert SIGNATURE not in message, "the excerpt is redacted"
    if content_type.startswith(("text/html", "application/json")):
        assert content_type.split(";")[0] in message, "the message names the Content-Type"
    assert storage.served == 1
    assert not target.exists()


def test_a_streamed_load_of_a_web_page_into_postgres_fails_for_good(
    storage: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_schemas: Any
) -> None:
    storage.content_type, storage.body = "text/csv", b"<html><body>Sign in</body></html>\n" * 50
    target = postgres_target(pg_schemas(), monkeypatch)

    with pytest.raises(NotAnExport, match="<html><body>Sign in"):
        _load(storage, target, tmp_path).execute(context={})

    assert storage.served == 1 and not target.exists()
