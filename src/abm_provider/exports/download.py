"""One checked download of an export execution into its archive file, shared by the operators.

:class:`~abm_provider.operators.exports.DownloadExecutionCsvOperator` runs it on its own, and
:class:`~abm_provider.transfers.csv_to_sql.ExecutionCsvToSqlOperator` runs it with a ``tee`` that
hands every chunk to the loader as it arrives, so that the warehouse reads the export while it is
still downloading. Either way the bytes go to a hidden temporary name beside the destination and are
renamed onto it only once complete and checked (byte count against ``Content-Length``, an unchanged
``ETag`` across resumed requests, optionally the MD5 against the ``ETag``), and a manifest beside the
file records which execution it holds, which is what lets a re-run skip the download.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, cast
from urllib.parse import urlsplit

from airflow.sdk import ObjectStoragePath

from abm_provider.common.byte_count import ByteCountMismatch, check_byte_count
from abm_provider.common.paths import as_storage_path, default_state_dir, is_local, local_path, safe_key
from abm_provider.common.progress import ByteProgress
from abm_provider.common.urls import UnsafeUrlError, check_url, safe_url
from abm_provider.compat import AirflowException, AirflowFailException
from abm_provider.exceptions import local_io
from abm_provider.exports.archive import (
    AtomicFile,
    HashingSink,
    check_integrity,
    file_sha256,
    local_md5,
    md5_etag,
    read_manifest,
    remove_manifest,
    remove_stale_temps,
    write_manifest,
)
from abm_provider.exports.parquet import CsvToParquet

if TYPE_CHECKING:
    from abm_provider.hooks.abm import AbmHook

DownloadIfExists = Literal["skip", "overwrite"]
#: Receives every slice of the CSV as it is written to the archive (the streamed load's pipes); the
#: slice is a view of a reused buffer, valid until the call returns.
Tee = Callable[[bytes], None]


def uri_stem(uri: str) -> str:
    """A file name stem from a link's last path segment, for a URI given without an execution id."""
    name = os.path.basename(urlsplit(uri).path) or "export"
    for suffix in (".csv", ".CSV"):
        name = name.removesuffix(suffix)
    return safe_key(name)


def execution_inputs(
    execution: Any, download_uri: str | None, execution_id: str | None, export_type: str | None
) -> tuple[dict[str, Any], str | None, str | None, str | None]:
    """(execution, link, execution id, export type) from whichever input was given."""
    record: dict[str, Any] = {}
    if execution is not None:
        if not isinstance(execution, Mapping):
            raise AirflowFailException(
                f"execution must be an execution dict (the sensor's XCom), got {type(execution).__name__}"
            )
        record = dict(execution)
        state = record.get("state")
        if state is not None and str(state).upper() != "COMPLETE":
            raise AirflowFailException(
                f"Execution {record.get('id')} is {state}, not COMPLETE; there is nothing to download"
            )
    uri = download_uri or record.get("downloadUri") or None
    execution_id = execution_id or record.get("id") or None
    export_type = export_type or record.get("exportId") or record.get("type") or None
    return record, uri, execution_id, export_type


@dataclass(frozen=True)
class DownloadOptions:
    """How an execution is downloaded: the settings of
    :class:`~abm_provider.operators.exports.DownloadExecutionCsvOperator`, which documents them (and
    checks them); the loader downloads with ``destination`` and ``etag_is_md5`` only."""

    destination: str | ObjectStoragePath | None = None
    base: str | ObjectStoragePath | None = None
    to_parquet: bool = False
    if_exists: DownloadIfExists = "skip"
    etag_is_md5: bool = False
    chunk_size: int = 8 << 20
    progress_interval: float = 10.0

    @classmethod
    def of(cls, holder: Any) -> DownloadOptions:
        """The options from an object that has each as an attribute of the same name (the operator)."""
        return cls(**{spec.name: getattr(holder, spec.name) for spec in fields(cls)})

    @property
    def format(self) -> str:
        """The stored file's format: ``parquet`` or ``csv``."""
        return "parquet" if self.to_parquet else "csv"


@dataclass(frozen=True)
class _Job:
    """One file to fetch: the link, where it goes, and the execution it holds."""

    uri: str
    target: ObjectStoragePath
    execution_id: str | None
    export_type: str | None


class ExecutionDownload:
    """Download one execution's CSV to its archive file: checked, atomic, skipped when already there.

    :param log: where progress and the summary go (the task's log).
    :param options: how (:class:`DownloadOptions`).
    :param dag_id: names the default destination when the context has no task instance.
    """

    def __init__(
        self, *, log: logging.Logger | Any, options: DownloadOptions, dag_id: str | None = None
    ) -> None:
        self.log = log
        self.options = options
        self.dag_id = dag_id
        self.format = options.format

    def target(self, context: Mapping[str, Any], execution_id: str | None, uri: str) -> ObjectStoragePath:
        """The destination file: as given, else keyed by dag, run and execution under ``base``."""
        if self.options.destination is not None:
            return as_storage_path(self.options.destination)
        ti: Any = context.get("ti") or context.get("task_instance")
        dag_id = getattr(ti, "dag_id", None) or self.dag_id or "adhoc"
        run_id = context.get("run_id") or getattr(ti, "run_id", None) or "manual"
        name = safe_key(execution_id) if execution_id else uri_stem(uri)
        base = self.options.base
        root = as_storage_path(base if base is not None else default_state_dir())
        return root / "exports" / safe_key(dag_id) / safe_key(str(run_id)) / f"{name}.{self.format}"

    def link(self, hook: AbmHook, uri: str | None, export_type: str | None, execution_id: str | None) -> str:
        """The checked link to fetch: the given one, else the execution's current one."""
        if not uri:
            if not (export_type and execution_id):
                raise AirflowFailException(
                    "No downloadUri: the execution has none and no export_type/execution_id to look it up"
                )
            uri = self.fresh_uri(hook, export_type, execution_id)
        try:
            return check_url(uri, "downloadUri")
        except UnsafeUrlError as err:
            raise AirflowFailException(str(err)) from err

    def run(
        self,
        hook: AbmHook,
        uri: str,
        target: ObjectStoragePath,
        execution_id: str | None,
        export_type: str | None,
        tee: Tee | None = None,
        received: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Fetch ``uri`` into ``target``, renewing an expired link once; the summary of the file.

        With a ``tee``, a link refused (403) or a file changed (412) after bytes went to the tee
        cannot start again from the first byte: the error is raised for the streamed load to fall back.
        """
        from abm_provider.exceptions import AbmApiError

        for attempt in (1, 2):
            fed = _CountingTee(tee) if tee is not None else None
            try:
                # A full disk, a quota or a read-only archive folder fails the task for good, naming
                # the file (it is no network failure, and no new link or download can help).
                with local_io(display(target), "write the archive"):
                    return self.fetch(hook, _Job(uri, target, execution_id, export_type), fed, received)
            except AbmApiError as err:
                # 403: the pre-signed link expired. 412: the file changed between resumed requests, so
                # the bytes so far are useless. Both are fixed once by a fresh link and a fresh start.
                if err.http_status not in (403, 412) or attempt == 2 or (fed is not None and fed.count):
                    raise
                if not (export_type and execution_id):
                    if err.http_status == 412:
                        self.log.warning("The file changed during the download (412); starting again")
                        continue
                    raise AirflowFailException(
                        f"The download link was refused (403, probably expired) and cannot be renewed "
                        f"without export_type and execution_id: {err}"
                    ) from err
                self.log.warning(
                    "Download of execution %s answered %s (%s); reading the execution again for a fresh link",
                    execution_id,
                    err.http_status,
                    "link expired" if err.http_status == 403 else "file changed",
                )
                uri = self.fresh_uri(hook, export_type, execution_id)
        raise AssertionError("unreachable")  # pragma: no cover

    def fresh_uri(self, hook: AbmHook, export_type: str, execution_id: str) -> str:
        """The execution's current link, from the executions endpoint (links expire; executions do not)."""
        for item in hook.iter_executions(export_type, order_by="updateTime desc"):
            if item.get("id") != execution_id:
                continue
            link = item.get("downloadUri")
            if item.get("state") != "COMPLETE" or not link:
                raise AirflowFailException(
                    f"Execution {execution_id} is {item.get('state')} with no downloadUri; cannot download it"
                )
            return str(link)
        raise AirflowFailException(
            f"Execution {execution_id} is no longer listed among the {export_type} executions; "
            "cannot renew its download link"
        )

    def already_downloaded(
        self, target: ObjectStoragePath, execution_id: str | None
    ) -> dict[str, Any] | None:
        """The earlier result if ``target`` verifiably holds this execution already, else ``None``."""
        if self.options.if_exists != "skip" or not execution_id:
            return None
        manifest = read_manifest(target)
        if manifest is None:
            return None
        if manifest.get("execution_id") != execution_id or manifest.get("format") != self.format:
            self.log.info(
                "%s holds execution %s (%s); replacing it with execution %s",
                target,
                manifest.get("execution_id"),
                manifest.get("format"),
                execution_id,
            )
            return None
        sha, size = file_sha256(target)
        try:
            check_byte_count(size, manifest.get("file_bytes"), what=str(target), basis="its manifest records")
        except ByteCountMismatch as why:
            self.log.warning("%s; downloading again", why)
            return None
        if sha != manifest.get("file_sha256"):
            self.log.warning(
                "%s has sha256 %s but its manifest records %s; downloading again",
                target,
                sha,
                manifest.get("file_sha256"),
            )
            return None
        self.log.info(
            "%s already holds execution %s (%d bytes, sha256 %s); skipping the download",
            target,
            execution_id,
            size,
            sha,
        )
        return {
            "path": display(target),
            "bytes": manifest.get("bytes"),
            "sha256": manifest.get("sha256"),
            "rows": manifest.get("rows"),
            "etag": manifest.get("etag"),
            "resumed": 0,
            "skipped": True,
        }

    def fetch(
        self, hook: AbmHook, job: _Job, tee: Tee | None = None, received: Callable[[], None] | None = None
    ) -> dict[str, Any]:
        """One download into a temporary file; published only when complete and checked.

        ``received`` is called once the last byte is in, before the checks, so that a reader of the
        tee can finish its work while they run.
        """
        uri, target, execution_id = job.uri, job.target, job.execution_id
        options = self.options
        label = f"Download of execution {execution_id or safe_url(uri)}"
        self.log.info("%s to %s", label, target)
        stale = remove_stale_temps(target)
        if stale:
            self.log.warning(
                "Removed %d temporary file(s) an interrupted earlier try left: %s", len(stale), stale
            )
        with AtomicFile(target) as out:
            converter = CsvToParquet(out.open()) if options.to_parquet else None
            # The CSV's MD5 (for etag_is_md5) is computed inline only where it cannot be read back
            # cheaply afterwards: when it is converted, or when the temporary file is remote.
            inline_md5 = options.etag_is_md5 and (converter is not None or not is_local(target))
            if converter is not None:
                sink = HashingSink(converter.write, md5=inline_md5)
            elif tee is not None:

                def both(data: bytes) -> None:
                    out.open().write(data)
                    tee(data)

                # Both are done with the slice when they return (the tee copies what it keeps).
                sink = HashingSink(both, md5=inline_md5, copy=False)
            else:

                def restart() -> None:
                    out.reopen()

                # out.open() is looked up per chunk: a restarted transfer writes to a fresh temp file.
                sink = HashingSink(
                    lambda data: out.open().write(data),
                    restart=restart,
                    md5=inline_md5,
                    copy=not is_local(target),
                )
            progress = ByteProgress(self.log, label, options.progress_interval)
            try:
                result = hook.download(
                    uri, cast("BinaryIO", sink), chunk_size=options.chunk_size, on_progress=progress
                )
                rows = converter.close() if converter is not None else None
                if received is not None:
                    received()
            except BaseException:
                if converter is not None:
                    converter.abort()
                raise
            if sink.md5 is not None:
                md5_hex: str | None = sink.md5.hexdigest()
            elif options.etag_is_md5 and md5_etag(result.etag) is not None:
                out.open().flush()
                md5_hex = local_md5(local_path(out.temp))
            else:
                md5_hex = None
            try:
                etag_checked = check_integrity(
                    written=sink.count,
                    content_length=result.content_length,
                    etag=result.etag,
                    md5_hex=md5_hex,
                    what=label,
                )
                check_byte_count(sink.count, result.bytes, what=f"{label}'s file", basis="the hook read")
            except ValueError as err:
                raise AirflowException(str(err)) from err
            sha256 = result.sha256
            remove_manifest(target)
            out.commit()
        progress.log_now(sink.count, result.content_length)
        if converter is not None:
            file_sha, file_bytes = file_sha256(target)
        else:
            file_sha, file_bytes = sha256, stored_size(target)
            try:
                check_byte_count(
                    file_bytes, sink.count, what=f"{label}: {target}", basis="the download wrote"
                )
            except ValueError as err:
                raise AirflowException(str(err)) from err
        summary = {
            "path": display(target),
            "bytes": sink.count,
            "sha256": sha256,
            "rows": rows,
            "etag": result.etag,
            "resumed": result.resumed,
            "skipped": False,
        }
        write_manifest(
            target,
            {
                "execution_id": execution_id,
                "export_type": job.export_type,
                "format": self.format,
                "bytes": sink.count,
                "sha256": sha256,
                "file_bytes": file_bytes,
                "file_sha256": file_sha,
                "rows": rows,
                "etag": result.etag,
                "source": safe_url(uri),
            },
        )
        self.log.info(
            "%s done: %d bytes in %.1fs (%.1f MiB/s), sha256 %s, resumed %d time(s)%s%s",
            label,
            sink.count,
            progress.elapsed(),
            progress.rate(sink.count) / 2**20,
            sha256,
            result.resumed,
            ", ETag verified" if etag_checked else "",
            f", {rows} rows to Parquet" if rows is not None else "",
        )
        return summary


class _CountingTee:
    """A tee that remembers whether any byte went through it (a started stream cannot restart)."""

    def __init__(self, tee: Tee) -> None:
        self._tee = tee
        self.count = 0

    def __call__(self, data: bytes) -> None:
        self._tee(data)
        self.count += len(data)


def display(target: ObjectStoragePath) -> str:
    """The XCom form of a file: an OS path when local, a URL otherwise."""
    return local_path(target) if is_local(target) else str(target)


def stored_size(target: ObjectStoragePath) -> int:
    """The size of a stored file."""
    if is_local(target):
        return os.stat(local_path(target)).st_size
    return int(target.size())
