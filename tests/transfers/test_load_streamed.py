"""The load of an execution while it downloads: one task, the archive kept, nothing half-committed.

``ExecutionCsvToSqlOperator`` given the execution streams it from the emulator's storage origin into
the warehouse (PostgreSQL's ``COPY`` reads the bytes as they arrive; DuckDB reads the archive once it
is complete) and commits only once the download is complete and checked. Every test compares the
table with a clean load of the same bytes, fetched with ``requests`` and loaded from a file.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from airflow.sdk.exceptions import AirflowException
from test_load_killed import KILL_POINTS, LOAD

from support.export_files import download_xcom
from support.processes import run_until_killed

EXPORT_TYPE = "TACTIC_PERFORMANCE"
MiB = 1 << 20


@pytest.fixture
def pg(request: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from support.warehouses import make_warehouse

    return make_warehouse("postgres", tmp_path, monkeypatch, request)


def sibling(warehouse: Any, suffix: str) -> Any:
    """The same warehouse, another table: where the clean load of a test goes."""
    return warehouse.with_table(f"{warehouse.table.rpartition('.')[2]}{suffix}")


def fire(abm: Any, size: int) -> dict[str, Any]:
    """A COMPLETE execution of about ``size`` bytes, as the sensor hands it over."""
    from abm_provider.hooks.abm import AbmHook

    fired = abm.fire(EXPORT_TYPE, outcome="COMPLETE", sizeBytes=size)
    return next(e for e in AbmHook("abm_default").iter_executions(EXPORT_TYPE) if e["id"] == fired["id"])


def clean_load(warehouse: Any, execution: dict[str, Any], folder: Path) -> dict[Any, Any]:
    """The table a load of the same bytes from a file gives (fetched without provider code)."""
    folder.mkdir(exist_ok=True)
    path = folder / f"{execution['id']}.csv"
    path.write_bytes(requests.get(execution["downloadUri"], timeout=60).content)
    clean = sibling(warehouse, "_clean")
    clean.operator(source=download_xcom(path, execution["id"])).execute(context={})
    return clean.contents()


def storage_statuses(abm: Any) -> list[Any]:
    return [r.get("status") for r in abm.requests_seen() if r.get("origin") == "storage"]


def archive_of(tmp_path: Path, name: str = "archive.csv") -> Path:
    return tmp_path / "archives" / name


def test_streamed_load_equals_a_clean_load_and_keeps_the_archive(
    abm: Any, target: Any, tmp_path: Path
) -> None:
    execution = fire(abm, 3 * MiB)
    archive = archive_of(tmp_path)
    out = target.operator(source=execution, archive=str(archive)).execute(context={})

    assert out["streamed"] is (target.kind == "postgres")  # DuckDB reads the finished archive
    assert out["rows_loaded"] > 0 and out["rows_rejected"] == 0
    body = requests.get(execution["downloadUri"], timeout=60).content
    assert archive.read_bytes() == body
    digest = hashlib.sha256(body).hexdigest()
    assert (out["sha256"], out["bytes"], out["archive"]) == (digest, len(body), str(archive))
    manifest = json.loads(archive.with_name("archive.csv.manifest.json").read_text())
    assert (manifest["execution_id"], manifest["sha256"]) == (execution["id"], digest)
    assert target.ledger_rows() == [(execution["id"], digest, out["rows_loaded"], 0, 0)]
    assert target.contents() == clean_load(target, execution, tmp_path / "clean")


def test_a_rerun_is_skipped_by_the_ledger_without_downloading(abm: Any, target: Any, tmp_path: Path) -> None:
    execution = fire(abm, MiB)
    archive = archive_of(tmp_path)
    first = target.operator(source=execution, archive=str(archive)).execute(context={})
    archive.unlink()  # even without the archive, the ledger knows the execution is in
    before = len(storage_statuses(abm))

    again = target.operator(source=execution, archive=str(archive)).execute(context={})

    assert again["skipped"] is True and again["sha256"] == first["sha256"]
    assert len(storage_statuses(abm)) == before, "a skipped load downloads nothing"
    assert len(target.ledger_rows()) == 1


def test_a_connection_dropped_mid_body_is_resumed_in_the_stream(abm: Any, pg: Any, tmp_path: Path) -> None:
    execution = fire(abm, 4 * MiB)
    abm.inject_fault(
        origin="storage", method="GET", path=".*", kind="disconnect_mid_body", afterBytes=MiB, count=1
    )
    out = pg.operator(source=execution, archive=str(archive_of(tmp_path))).execute(context={})

    assert out["streamed"] is True
    assert storage_statuses(abm) == [200, 206], "one resumed request, no second download"
    assert pg.contents() == clean_load(pg, execution, tmp_path / "clean")


def test_a_download_broken_for_good_rolls_back_and_loads_the_file_instead(
    abm: Any, pg: Any, tmp_path: Path
) -> None:
    execution = fire(abm, 4 * MiB)
    # The connection drops after 1 MiB, and the resume is refused as an expired link is: the bytes
    # already in the table cannot be completed, so the load rolls back and the file is fetched anew.
    abm.inject_fault(
        origin="storage", method="GET", path=".*", kind="disconnect_mid_body", afterBytes=MiB, count=1
    )
    abm.inject_fault(origin="storage", method="GET", path=".*", kind="status", status=403, count=1)
    archive = archive_of(tmp_path)
    out = pg.operator(source=execution, archive=str(archive)).execute(context={})

    assert out["streamed"] is False
    assert storage_statuses(abm) == [200, 403, 200]
    assert archive.read_bytes() == requests.get(execution["downloadUri"], timeout=60).content
    assert len(pg.ledger_rows()) == 1
    assert pg.contents() == clean_load(pg, execution, tmp_path / "clean")


def test_an_expired_link_is_renewed_before_the_stream_starts(abm: Any, pg: Any, tmp_path: Path) -> None:
    execution = fire(abm, MiB)
    abm.advance(3600)  # past the link's lifetime (900 s by default)
    out = pg.operator(source=execution, archive=str(archive_of(tmp_path))).execute(context={})

    assert out["streamed"] is True
    assert storage_statuses(abm) == [403, 200]
    fresh = next(e for e in _executions() if e["id"] == execution["id"])  # its renewed link
    assert pg.contents() == clean_load(pg, fresh, tmp_path / "clean")


def _executions() -> list[dict[str, Any]]:
    from abm_provider.hooks.abm import AbmHook

    return list(AbmHook("abm_default").iter_executions(EXPORT_TYPE))


class _LyingStorage(http.server.BaseHTTPRequestHandler):
    """Serves ``body`` whole, with an MD5 ``ETag`` that is wrong for the first ``lies`` requests."""

    body = b""
    lies = 0
    served = 0

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        cls = type(self)
        cls.served += 1
        digest = hashlib.md5(self.body, usedforsecurity=False).hexdigest()
        etag = digest if cls.served > cls.lies else hashlib.md5(b"other", usedforsecurity=False).hexdigest()
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.send_header("ETag", f'"{etag}"')
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def lying_storage(abm: Any, tmp_path: Path) -> Iterator[type[_LyingStorage]]:
    handler = type("Lying", (_LyingStorage,), {})
    handler.body = requests.get(fire(abm, 2 * MiB)["downloadUri"], timeout=60).content
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}/export.csv"  # type: ignore[attr-defined]
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _preload(pg: Any, abm: Any, tmp_path: Path) -> dict[Any, Any]:
    """An earlier execution already in the table: what a rolled-back load must leave alone."""
    earlier = fire(abm, MiB)
    pg.operator(source=earlier, archive=str(archive_of(tmp_path, "earlier.csv"))).execute(context={})
    return pg.contents()


def test_a_hash_that_does_not_match_after_the_last_byte_leaves_the_table_unchanged(
    abm: Any, pg: Any, lying_storage: Any, tmp_path: Path
) -> None:
    before = _preload(pg, abm, tmp_path)
    ledger = pg.ledger_rows()
    lying_storage.lies = 10  # the stream and the download of the file both fail the check
    archive = archive_of(tmp_path)
    source = {"downloadUri": lying_storage.url, "id": "exec-lies", "exportId": EXPORT_TYPE}

    with pytest.raises(AirflowException, match="does not match the ETag"):
        pg.operator(source=source, archive=str(archive), etag_is_md5=True).execute(context={})

    assert lying_storage.served == 2, "the stream, then one download of the file"
    assert pg.contents() == before and pg.ledger_rows() == ledger
    assert not archive.exists() and not list(archive.parent.glob(".archive.csv.*.part"))


def test_a_hash_mismatch_once_then_a_sound_file_loads_exactly_that_file(
    abm: Any, pg: Any, lying_storage: Any, tmp_path: Path
) -> None:
    _preload(pg, abm, tmp_path)
    lying_storage.lies = 1
    source = {"downloadUri": lying_storage.url, "id": "exec-once", "exportId": EXPORT_TYPE}
    out = pg.operator(source=source, archive=str(archive_of(tmp_path)), etag_is_md5=True).execute(context={})

    assert out["streamed"] is False and lying_storage.served == 2
    assert out["sha256"] == hashlib.sha256(lying_storage.body).hexdigest()
    assert [row[0] for row in pg.ledger_rows()][-1] == "exec-once"
    folder = tmp_path / "clean"
    folder.mkdir()
    (folder / "exec-once.csv").write_bytes(lying_storage.body)
    clean = sibling(pg, "_clean")
    clean.operator(source=download_xcom(folder / "exec-once.csv", "exec-once")).execute(context={})
    expected = clean.contents()
    assert {k: v for k, v in pg.contents().items() if k in expected} == expected


# The streamed load runs in a subprocess that is SIGKILLed while COPY reads the stream (no handler,
# no rollback call; test_load_killed's "mid_copy" point): PostgreSQL discards the open transaction,
# and the archive's temporary file stays behind until the re-run removes it.


def test_a_load_killed_mid_stream_leaves_the_table_and_the_rerun_loads_it(
    abm: Any, pg: Any, tmp_path: Path
) -> None:
    before = _preload(pg, abm, tmp_path)
    ledger = pg.ledger_rows()
    execution = fire(abm, 8 * MiB)
    archive = archive_of(tmp_path)
    kwargs = {"source": execution, "archive": str(archive), "sql_conn_id": pg.conn_id, "table": pg.table}
    run_until_killed(tmp_path, KILL_POINTS["mid_copy"], LOAD, kwargs)

    assert pg.contents() == before and pg.ledger_rows() == ledger, "nothing of the killed load is visible"
    assert not archive.exists()

    out = pg.operator(source=execution, archive=str(archive)).execute(context={})

    assert out["streamed"] is True and not out["skipped"]
    assert not list(archive.parent.glob(".archive.csv.*.part")), "the re-run removed the killed one's file"
    clean = clean_load(pg, execution, tmp_path / "clean")
    assert {k: v for k, v in pg.contents().items() if k in clean} == clean


def test_a_bare_link_loaded_again_is_skipped_once_its_bytes_are_known(
    abm: Any, target: Any, lying_storage: Any, tmp_path: Path
) -> None:
    source = {"downloadUri": lying_storage.url}  # no execution id: the ledger knows it by its SHA-256
    first = target.operator(source=source, archive=str(archive_of(tmp_path)), export_type=EXPORT_TYPE)
    out = first.execute(context={})
    again = target.operator(source=source, archive=str(archive_of(tmp_path)), export_type=EXPORT_TYPE)
    second = again.execute(context={})

    assert not out["skipped"] and second["skipped"] is True
    assert second["sha256"] == out["sha256"] == hashlib.sha256(lying_storage.body).hexdigest()
    assert lying_storage.served == 2, "without an execution id, the bytes must be read to be known"
    assert len(target.ledger_rows()) == 1
