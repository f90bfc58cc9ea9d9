"""Pieces of the download path that need no server: link rules, atomic placement, integrity, Parquet."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk.exceptions import AirflowException

from abm_provider.common.paths import as_storage_path
from abm_provider.common.urls import UnsafeUrlError, check_url, safe_url
from abm_provider.exports.archive import (
    AtomicFile,
    HashingSink,
    check_integrity,
    file_sha256,
    read_manifest,
    write_manifest,
)
from abm_provider.exports.parquet import CsvToParquet
from abm_provider.hooks.results import DownloadResult
from abm_provider.operators.exports import DownloadExecutionCsvOperator


@pytest.mark.parametrize(
    "uri",
    [
        "https://bucket.s3.amazonaws.com/exports/x.csv?X-Amz-Signature=abc",
        "http://127.0.0.1:8081/objects/x.csv?sig=1",
        "http://localhost:9000/x.csv",
        "http://[::1]:9000/x.csv",
    ],
)
def test_allowed_links(uri: str) -> None:
    assert check_url(uri, "downloadUri") == uri


@pytest.mark.parametrize(
    ("uri", "fragment"),
    [
        ("file:///etc/passwd", "scheme 'file'; only https is allowed"),
        ("/etc/passwd", r"scheme '\(none\)'; only https is allowed"),
        ("./export.csv", r"scheme '\(none\)'; only https is allowed"),
        ("http://storage.example.com/x.csv", "plain http"),
        ("http://10.0.0.5/x.csv", "plain http"),
        ("ftp://example.com/x.csv", "scheme 'ftp'; only https is allowed"),
        ("s3://bucket/x.csv", "scheme 's3'; only https is allowed"),
        ("https:///x.csv", "has no host"),
        ("", "non-empty URL"),
    ],
)
def test_refused_links(uri: str, fragment: str) -> None:
    with pytest.raises(UnsafeUrlError, match=fragment):
        check_url(uri, "downloadUri")


def test_redacted_link_hides_signature() -> None:
    assert safe_url("https://h/p/x.csv?X-Amz-Signature=secret") == "https://h/p/x.csv?<redacted>"


def test_atomic_file_publishes_only_on_commit(tmp_path: Path) -> None:
    target = as_storage_path(tmp_path / "out" / "x.csv")
    with AtomicFile(target) as out:
        out.open().write(b"a,b\n1,2\n")
        assert not os.path.exists(tmp_path / "out" / "x.csv")
        out.commit()
    assert (tmp_path / "out" / "x.csv").read_bytes() == b"a,b\n1,2\n"
    assert os.listdir(tmp_path / "out") == ["x.csv"]


def test_atomic_file_failure_leaves_old_file_and_no_temp(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_bytes(b"old")
    target = as_storage_path(tmp_path / "x.csv")
    with pytest.raises(RuntimeError), AtomicFile(target) as out:
        out.open().write(b"partial")
        raise RuntimeError("connection lost")
    assert (tmp_path / "x.csv").read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["x.csv"]


def test_hashing_sink_restart_resets_counts() -> None:
    chunks: list[bytes] = []
    restarted: list[bool] = []
    sink = HashingSink(chunks.append, restart=lambda: restarted.append(True), md5=True)
    sink.write(b"abc")
    assert sink.seek(0) == 0 and restarted == [True]
    sink.write(b"xyz")
    assert sink.md5 is not None
    assert sink.count == 3 and sink.md5.hexdigest() == hashlib.md5(b"xyz").hexdigest()
    assert chunks == [b"abc", b"xyz"]


def test_integrity_checks_length_and_md5_etag() -> None:
    md5 = hashlib.md5(b"data").hexdigest()
    assert check_integrity(written=4, md5_hex=md5, content_length=4, etag=f'"{md5}"', what="x") is True
    assert check_integrity(written=4, md5_hex=None, content_length=None, etag='"abc-3"', what="x") is False
    assert check_integrity(written=4, md5_hex=md5, content_length=4, etag=f'W/"{md5}"', what="x") is False
    with pytest.raises(ValueError, match="Content-Length announced 5"):
        check_integrity(written=4, md5_hex=md5, content_length=5, etag=None, what="x")
    with pytest.raises(ValueError, match="does not match the ETag"):
        check_integrity(written=4, md5_hex=md5, content_length=4, etag='"' + "0" * 32 + '"', what="x")


def test_manifest_round_trip(tmp_path: Path) -> None:
    target = as_storage_path(tmp_path / "x.csv")
    assert read_manifest(target) is None
    (tmp_path / "x.csv").write_bytes(b"x")
    write_manifest(target, {"execution_id": "e1", "file_bytes": 1})
    assert read_manifest(target) == {"execution_id": "e1", "file_bytes": 1}


def test_csv_to_parquet_streams_with_types(tmp_path: Path) -> None:
    header = "date,campaign_id,campaign_name,tactic_id,tactic_name,impressions,clicks,spend\n"
    rows = [
        f'2026-01-{1 + i % 28:02d},0012,"Camp, ""quoted"" é",{i:05d},"multi\nline",{i * 10},{i},{i}.25\n'
        for i in range(20_000)
    ]
    data = (header + "".join(rows)).encode()
    out_path = tmp_path / "x.parquet"
    with open(out_path, "wb") as out:
        converter = CsvToParquet(out, block_size=64 << 10)
        for start in range(0, len(data), 7777):  # chunk edges fall inside rows and quoted values
            converter.write(data[start : start + 7777])
        assert converter.close() == 20_000
    table = pq.read_table(out_path)
    assert table.num_rows == 20_000
    assert table.schema.field("date").type == pa.date32()
    assert table.schema.field("campaign_id").type == pa.string()  # ids keep leading zeros
    assert table.schema.field("impressions").type == pa.int64()
    assert pa.types.is_decimal(table.schema.field("spend").type)
    first = table.slice(0, 1).to_pylist()[0]
    assert first["campaign_id"] == "0012" and first["campaign_name"] == 'Camp, "quoted" é'
    assert first["tactic_name"] == "multi\nline"
    assert str(table.column("spend")[3].as_py()) == "3.250000000"


def test_csv_to_parquet_reports_bad_value(tmp_path: Path) -> None:
    data = b"date,impressions\n2026-01-01,5\n2026-01-02,lots\n"
    with open(tmp_path / "x.parquet", "wb") as out:
        converter = CsvToParquet(out)
        converter.write(data)
        with pytest.raises(ValueError, match="Converting the CSV to Parquet failed"):
            converter.close()


class _FakeHook:
    """Writes `body` to the sink in pieces and reports the headers given, as the real hook does."""

    def __init__(self, body: bytes, *, etag: str | None, content_length: int | None) -> None:
        self.body = body
        self.etag = etag
        self.content_length = content_length

    def download(self, uri: str, fileobj: Any, *, chunk_size: int, on_progress: Any = None) -> DownloadResult:
        for start in range(0, len(self.body), 1000):
            fileobj.write(self.body[start : start + 1000])
            if on_progress:
                on_progress(start + 1000, self.content_length)
        return DownloadResult(
            bytes=len(self.body),
            sha256=hashlib.sha256(self.body).hexdigest(),
            etag=self.etag,
            content_length=self.content_length,
            resumed=0,
        )


def _download(
    tmp_path: Path, hook: _FakeHook, monkeypatch: pytest.MonkeyPatch, etag_is_md5: bool = True
) -> dict[str, Any]:
    op = DownloadExecutionCsvOperator(
        task_id="d",
        etag_is_md5=etag_is_md5,
        download_uri="https://storage.example/x.csv?sig=1",
        execution_id="e1",
        destination=str(tmp_path / "out.csv"),
    )
    monkeypatch.setattr(op, "get_hook", lambda: hook)
    return op.execute({})  # type: ignore[arg-type]


BODY = b"date,clicks\n" + b"".join(b"2026-01-01,%d\n" % i for i in range(5000))


def test_md5_etag_is_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    etag = '"' + hashlib.md5(BODY).hexdigest() + '"'
    result = _download(tmp_path, _FakeHook(BODY, etag=etag, content_length=len(BODY)), monkeypatch)
    assert result["sha256"] == hashlib.sha256(BODY).hexdigest()
    assert (tmp_path / "out.csv").read_bytes() == BODY


def test_md5_etag_mismatch_publishes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    etag = '"' + hashlib.md5(b"other").hexdigest() + '"'
    with pytest.raises(AirflowException, match="does not match the ETag"):
        _download(tmp_path, _FakeHook(BODY, etag=etag, content_length=len(BODY)), monkeypatch)
    assert os.listdir(tmp_path) == []


def test_etag_is_not_taken_for_md5_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """S3 SSE-KMS objects (and the emulator) have 32-hex ETags that are not the content MD5."""
    etag = '"' + hashlib.md5(b"other").hexdigest() + '"'
    hook = _FakeHook(BODY, etag=etag, content_length=len(BODY))
    assert _download(tmp_path, hook, monkeypatch, etag_is_md5=False)["bytes"] == len(BODY)


def test_short_body_publishes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AirflowException, match="Content-Length announced"):
        _download(tmp_path, _FakeHook(BODY, etag=None, content_length=len(BODY) + 10), monkeypatch)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("store", ["local", "memory"])
def test_file_sha256_gives_the_digest_and_the_size_on_any_store(tmp_path, store):
    """A local file is digested by its descriptor and an in-memory one in place: both give the size."""
    import hashlib

    from airflow.sdk import ObjectStoragePath
    from airflow.sdk.io import attach
    from fsspec.implementations.memory import MemoryFileSystem

    body = b"date,tactic_id\n" + b"2026-01-01,1\n" * 50_000
    if store == "memory":
        attach("memory", fs=MemoryFileSystem())
        path = ObjectStoragePath(f"memory://sha/{tmp_path.name}/export.csv")
    else:
        path = as_storage_path(tmp_path / "export.csv")
    with path.open("wb") as handle:
        handle.write(body)
    assert file_sha256(path) == (hashlib.sha256(body).hexdigest(), len(body))
