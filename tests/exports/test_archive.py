"""``abm_provider.exports.archive``: how a download lands, without a server.

A file is published whole or not at all (never a temporary left behind), its digest and size are counted
as it is written and start again on a restart, its length and an MD5 ETag are checked, and its manifest
round-trips; the digest of a file is the same on any store.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from abm_provider.common.paths import as_storage_path
from abm_provider.exports.archive import (
    AtomicFile,
    HashingSink,
    check_integrity,
    file_sha256,
    read_manifest,
    write_manifest,
)


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
