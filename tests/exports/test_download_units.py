"""``DownloadExecutionCsvOperator``'s checks (``abm_provider.exports.download``) without a server.

A hook stand-in writes the body and reports the headers it was given: a matching MD5 ETag is verified
and a mismatch, a short body or a hook that miscounts publishes nothing; an archive shorter than its
manifest says is downloaded again.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException

from abm_provider.hooks.results import DownloadResult
from abm_provider.operators.exports import DownloadExecutionCsvOperator


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


def test_a_hook_that_miscounts_publishes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook says it read more than reached the file: the one byte-count rule names both counts."""

    class _Miscounting(_FakeHook):
        def download(self, *args: Any, **kwargs: Any) -> DownloadResult:
            result = super().download(*args, **kwargs)
            return DownloadResult(result.bytes + 1, result.sha256, result.etag, None, result.resumed)

    with pytest.raises(
        AirflowException, match=rf"received {len(BODY)} bytes but the hook read {len(BODY) + 1}"
    ):
        _download(tmp_path, _Miscounting(BODY, etag=None, content_length=None), monkeypatch)
    assert os.listdir(tmp_path) == []


def test_an_archive_shorter_than_its_manifest_is_downloaded_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hook = _FakeHook(BODY, etag=None, content_length=len(BODY))
    assert _download(tmp_path, hook, monkeypatch)["skipped"] is False
    archive = tmp_path / "out.csv"
    archive.write_bytes(BODY[:-10])  # cut off after the download, as a half-restored backup would be

    again = _download(tmp_path, hook, monkeypatch)

    assert again["skipped"] is False and archive.read_bytes() == BODY
    said = capsys.readouterr().out
    assert f"received {len(BODY) - 10} bytes but its manifest records {len(BODY)}; downloading again" in said
