"""Safe placement of a downloaded export: link checks, atomic publication, integrity, streaming Parquet.

The hook streams bytes and resumes dropped connections; this module decides where those bytes go so
that a reader of the destination only ever sees a whole, checked file:

- :class:`AtomicFile` writes to a hidden temporary name beside the destination and renames only on
  commit, deleting the temporary file on any failure (fsspec object-store files commit their upload
  on ``close()`` even after an error, so writing straight to the final key is not safe);
- :class:`HashingSink` counts and hashes what is written so the result can be checked against
  ``Content-Length`` and an MD5-style ``ETag`` without reading the file again;
- a small manifest beside the file records which execution it holds, which is what makes a re-run
  able to skip a download it already did.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import uuid
from collections.abc import Callable, Mapping
from typing import IO, Any

from airflow.sdk import ObjectStoragePath

from abm_provider.common.byte_count import check_byte_count
from abm_provider.common.paths import is_local, local_path

MANIFEST_SUFFIX = ".manifest.json"


class AtomicFile:
    """A destination written under a temporary name and published by one rename on :meth:`commit`.

    Local files: the temporary file is beside the target (same file system, so ``os.replace`` is
    atomic), it is fsynced before the rename, and the directory is fsynced after it. Object stores:
    the upload goes to a temporary key and is moved on commit; a failed upload is aborted (fsspec's
    ``discard``) so no partial object is ever published. Used as a context manager, anything not
    committed is deleted on exit.
    """

    def __init__(self, target: ObjectStoragePath) -> None:
        self.target = target
        self.temp = target.parent / f".{target.name}.{uuid.uuid4().hex[:12]}.part"
        self._file: IO[bytes] | None = None
        self.committed = False

    def open(self) -> IO[bytes]:
        """Create parent folders and open the temporary file for writing (once)."""
        if self._file is None:
            if is_local(self.target):
                os.makedirs(os.path.dirname(local_path(self.temp)), exist_ok=True)
                # A buffer no larger than the hook's writes, which then go straight to the file.
                self._file = open(local_path(self.temp), "wb", buffering=256 << 10)  # noqa: SIM115
            else:
                with contextlib.suppress(Exception):
                    self.target.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.temp.open("wb")
        return self._file

    def reopen(self) -> IO[bytes]:
        """Throw away what was written and start the temporary file again (a download restarted)."""
        self.discard()
        self.temp = self.target.parent / f".{self.target.name}.{uuid.uuid4().hex[:12]}.part"
        return self.open()

    def commit(self) -> None:
        """Flush, make durable and rename the temporary file onto the target, replacing any old one."""
        file = self.open()
        if is_local(self.target):
            file.flush()
            os.fsync(file.fileno())
            file.close()
            os.replace(local_path(self.temp), local_path(self.target))
            _fsync_dir(os.path.dirname(local_path(self.target)))
        else:
            file.close()
            self.target.fs.mv(self.temp.path, self.target.path)
        self._file = None
        self.committed = True

    def discard(self) -> None:
        """Abort and delete the temporary file; never raises (it runs while another error unwinds)."""
        file, self._file = self._file, None
        if file is not None:
            abort = getattr(file, "discard", None)
            with contextlib.suppress(Exception):
                if callable(abort):
                    abort()
                file.close()
        with contextlib.suppress(FileNotFoundError, OSError, Exception):
            if is_local(self.temp):
                os.unlink(local_path(self.temp))
            elif self.temp.exists():
                self.temp.unlink()

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self.committed:
            self.discard()


def temp_pattern(target: ObjectStoragePath) -> str:
    """Glob of the temporary names :class:`AtomicFile` gives ``target`` (hidden, ``.part`` suffix)."""
    return f".{glob_escape(target.name)}.*.part"


def remove_stale_temps(target: ObjectStoragePath) -> list[str]:
    """Delete temporary files an earlier, killed attempt left beside ``target``; return their names.

    :class:`AtomicFile` deletes its temporary file on any exception, but a process killed with
    SIGKILL (OOM killer, a lost worker) runs no cleanup, and the next try writes under a new random
    name, so without this every crash would leave a partial copy of the export behind for good.
    Called before a new download of the same target. Only names of the ``.<target>.<12 hex>.part``
    form are touched. A still-running zombie attempt whose temporary file is removed fails at its
    rename instead of publishing, which is the safe outcome.
    """
    removed: list[str] = []
    with contextlib.suppress(FileNotFoundError, OSError, Exception):
        for stale in target.parent.glob(temp_pattern(target)):
            if not _TEMP_NAME.fullmatch(stale.name[len(target.name) + 1 :]):
                continue
            with contextlib.suppress(FileNotFoundError, OSError, Exception):
                if is_local(stale):
                    os.unlink(local_path(stale))
                else:
                    stale.unlink()
                removed.append(stale.name)
    return removed


def glob_escape(name: str) -> str:
    """``name`` with glob metacharacters escaped (``[`` ``]`` ``*`` ``?``), for a literal match."""
    return "".join(f"[{c}]" if c in "[]*?" else c for c in name)


_TEMP_NAME = re.compile(r"\.[0-9a-f]{12}\.part")


def _fsync_dir(directory: str) -> None:
    """Make a rename durable; a no-op where directories cannot be opened (Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class HashingSink(io.RawIOBase):
    """A write-only file object that counts what passes and forwards each chunk.

    The hook already computes the SHA-256 of what it writes; this adds the byte count and, when asked
    (``md5=True``), an inline MD5 for an S3-style ``ETag``. MD5 costs more than the copy itself on a
    fast link, so for a local destination the operator checks it afterwards from the temporary file,
    and only when the ``ETag`` turns out to be an MD5 at all. ``seek(0)`` restarts the sink, for a
    transfer that has to begin again from the first byte. ``copy=False`` passes the caller's
    buffer on as it is, for a consumer that is done with it when ``write`` returns (a local file).
    """

    def __init__(
        self,
        write: Callable[[bytes], Any],
        restart: Callable[[], None] | None = None,
        *,
        md5: bool = False,
        copy: bool = True,
    ) -> None:
        super().__init__()
        self._write = write
        self._copy = copy
        self._restart = restart
        self._want_md5 = md5
        self.count = 0
        self.md5 = hashlib.md5(usedforsecurity=False) if md5 else None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:  # type: ignore[override]
        # The hook reuses its buffers: a consumer that keeps the chunk (a queue, an upload) needs a copy.
        chunk = bytes(data) if self._copy and not isinstance(data, bytes) else data
        if len(chunk):
            if self.md5 is not None:
                self.md5.update(chunk)
            self._write(chunk)
            self.count += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self.count

    def seekable(self) -> bool:
        return self._restart is not None

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_END or (whence == io.SEEK_CUR and offset == 0):
            return self.count
        target = offset if whence == io.SEEK_SET else self.count + offset
        if target == self.count:
            return self.count
        if target != 0 or self._restart is None:
            raise io.UnsupportedOperation("a download sink can only be rewound to the start")
        self._restart()
        self.count = 0
        self.md5 = hashlib.md5(usedforsecurity=False) if self._want_md5 else None
        return 0

    def truncate(self, size: int | None = None) -> int:
        if size not in (None, self.count):
            raise io.UnsupportedOperation("a download sink can only be truncated at its position")
        return self.count


def md5_etag(etag: str | None) -> str | None:
    """The hex MD5 an ETag stands for, or ``None`` when it is not a plain content MD5.

    Only a 32-hex-digit strong ETag is an MD5 of the body (S3 single-part uploads); multipart
    (``"...-N"``), weak and opaque ETags are not digests; the hook still uses them for ``If-Match``.
    """
    if not etag or etag.strip().startswith("W/"):
        return None
    tag = etag.strip().strip('"').lower()
    if len(tag) == 32 and all(c in "0123456789abcdef" for c in tag):
        return tag
    return None


def check_integrity(
    *, written: int, content_length: int | None, etag: str | None, md5_hex: str | None, what: str
) -> bool:
    """Raise if the bytes do not match ``Content-Length`` or an MD5 ``ETag``; True if the ETag was checked.

    ``md5_hex`` is the content's MD5 (``None`` when it was not computed, e.g. the ETag is no MD5). A
    wrong length raises :class:`~abm_provider.common.byte_count.ByteCountMismatch` (a ``ValueError``).
    """
    check_byte_count(written, content_length, what=what, basis="Content-Length announced")
    expected = md5_etag(etag)
    if expected is None or md5_hex is None:
        return False
    if expected != md5_hex:
        raise ValueError(f"{what}: content MD5 {md5_hex} does not match the ETag {etag}")
    return True


def local_md5(path: str, chunk_size: int = 8 << 20) -> str:
    """MD5 of a local file, read in chunks (from the page cache right after a download)."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path: ObjectStoragePath) -> tuple[str, int]:
    """SHA-256 and size of a stored file; ``hashlib.file_digest`` reads a local one by its descriptor."""
    with path.open("rb") as handle:
        digest = hashlib.file_digest(handle, "sha256")
        return digest.hexdigest(), handle.seek(0, io.SEEK_END)  # digested in place, a buffer is not read


def manifest_path(target: ObjectStoragePath) -> ObjectStoragePath:
    """Where the record of what ``target`` holds lives: beside it, ``<name>.manifest.json``."""
    return target.parent / f"{target.name}{MANIFEST_SUFFIX}"


def read_manifest(target: ObjectStoragePath) -> dict[str, Any] | None:
    """The manifest of ``target`` if both exist and the manifest is readable JSON, else ``None``."""
    record = manifest_path(target)
    try:
        if not target.exists() or not record.exists():
            return None
        with record.open("rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_manifest(target: ObjectStoragePath, data: Mapping[str, Any]) -> None:
    """Write the manifest atomically, so a reader never sees half of it."""
    with AtomicFile(manifest_path(target)) as out:
        out.open().write(json.dumps(dict(data), indent=2, sort_keys=True).encode("utf-8"))
        out.commit()


def remove_manifest(target: ObjectStoragePath) -> None:
    """Forget what ``target`` held before it is replaced (a crash then means re-download, not a lie)."""
    with contextlib.suppress(FileNotFoundError, OSError, Exception):
        record = manifest_path(target)
        if record.exists():
            record.unlink()
