"""Operators for Export Jobs v1: make sure a job exists, and download an execution's CSV safely.

The service allows one job per type per account and answers a second create with 409, so
:class:`CreateExportJobOperator` treats "already exists" as success by default, which makes it safe at
the head of a daily DAG. Its schedule is checked locally first (:mod:`abm_provider.cron`) so a cron
the service would refuse fails with the rule it breaks, before any request.

:class:`DownloadExecutionCsvOperator` streams the execution's file through the hook (which resumes
dropped connections and never sends the API key to the storage origin) into a temporary name beside
the destination, checks it against ``Content-Length``/``ETag``, and publishes it with one rename, so a
reader never sees a partial file; :mod:`abm_provider.download` holds those pieces.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, cast
from urllib.parse import urlsplit

from airflow.sdk import ObjectStoragePath
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from abm_provider.accounts import _safe_key, as_storage_path, default_state_dir
from abm_provider.cron import InvalidScheduleError, validate_schedule
from abm_provider.download import (
    AtomicFile,
    CsvToParquet,
    HashingSink,
    Progress,
    check_integrity,
    file_sha256,
    is_local,
    local_md5,
    local_path,
    md5_etag,
    read_manifest,
    remove_manifest,
    remove_stale_temps,
    write_manifest,
)
from abm_provider.operators._base import AbmBaseOperator, fail_if_final, is_deferred
from abm_provider.operators.account_lists import _check_id, _fail_on_bad_argument
from abm_provider.urls import UnsafeUrlError, check_url, safe_url

if TYPE_CHECKING:
    from airflow.sdk import Context

    from abm_provider.hooks.abm import AbmHook

ExportJobIfExists = Literal["ignore", "fail"]
DownloadIfExists = Literal["skip", "overwrite"]


class CreateExportJobOperator(AbmBaseOperator):
    """Create the export job of a type with a daily-or-slower schedule, or accept the existing one.

    :param export_type: export type (templated), e.g. ``TACTIC_PERFORMANCE`` or
        ``DISPLAY_TACTIC_ACCOUNT_PERFORMANCE``; it is also the job's identifier.
    :param schedule: five-field cron in UTC (templated), validated locally before any request: five
        fields, values within range, and minute and hour each a single value (the service runs a job
        at most once per day). The error names the rule broken.
    :param if_exists: ``"ignore"`` (default): a job of this type already existing (409) is success and
        is logged; ``"fail"``: the task fails if one exists. The API cannot read or change an existing
        job's schedule, so an existing job keeps whatever schedule it was created with.
    :return: when created, the job resource (``type``, ``schedule``, ``createTime``, ``updateTime``)
        plus ``created: True``; when it already existed, ``{"type", "created": False,
        "requested_schedule"}``. Connection and request settings: :class:`AbmBaseOperator`.
    """

    template_fields: Sequence[str] = ("export_type", "schedule")

    def __init__(
        self, *, export_type: str, schedule: str, if_exists: ExportJobIfExists = "ignore", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if if_exists not in ("ignore", "fail"):
            raise ValueError(f"if_exists must be 'ignore' or 'fail', got {if_exists!r}")
        # Fail at DAG parse time when the values are already known; templated ones are checked in execute.
        if not is_deferred(export_type):
            _check_id(export_type, "export_type")
        if not is_deferred(schedule):
            validate_schedule(schedule)
        self.export_type = export_type
        self.schedule = schedule
        self.if_exists = if_exists

    @staticmethod
    def job_exists(hook: AbmHook, export_type: str) -> bool:
        """Deprecated: use ``AbmHook.job_exists`` (kept for one release)."""
        warnings.warn("use AbmHook.job_exists(export_type)", DeprecationWarning, stacklevel=2)
        return hook.job_exists(export_type)

    def execute(self, context: Context) -> dict[str, Any]:
        """Validate the schedule, then the hook's create-or-accept."""
        from abm_provider.exceptions import AbmApiError

        _fail_on_bad_argument(_check_id, self.export_type, "export_type")
        try:
            schedule = validate_schedule(self.schedule)
        except InvalidScheduleError as err:
            raise AirflowFailException(str(err)) from err
        try:
            return self.hook.ensure_export_job(self.export_type, schedule, self.if_exists)
        except AbmApiError as err:
            fail_if_final(err, f"Export job {self.export_type} with schedule {schedule!r}")
            raise


def _uri_stem(uri: str) -> str:
    """A file name stem from a link's last path segment, for a URI given without an execution id."""
    name = os.path.basename(urlsplit(uri).path) or "export"
    for suffix in (".csv", ".CSV"):
        name = name.removesuffix(suffix)
    return _safe_key(name)


class DownloadExecutionCsvOperator(AbmBaseOperator):
    """Download an execution's CSV to a file, atomically and checked; XCom is a summary, not the data.

    Give ``execution`` (the sensor's XCom: a dict with ``id``, ``exportId``, ``downloadUri``) or
    ``download_uri`` (optionally with ``execution_id`` and ``export_type`` so an expired link can be
    renewed). The link must be ``https`` (plain ``http`` only to a loopback host, for the emulator);
    ``file://`` and bare paths are refused. The hook fetches it without the API key, in
    ``chunk_size`` chunks, resuming with ``Range`` after a dropped connection.

    The bytes go to a hidden temporary name beside the destination and are renamed onto it only
    once complete and checked (byte count against ``Content-Length``, an unchanged ``ETag`` across
    resumed requests, optionally the MD5 against the ``ETag``): no partial file is ever visible at
    the destination. An expired link (403) is renewed
    once by reading the execution again from the executions endpoint.

    Re-runs: a manifest ``<file>.manifest.json`` beside the file records the execution, size and
    SHA-256. With ``if_exists="skip"`` (default) a destination that already holds the same execution
    with a matching SHA-256 and size is kept and the download skipped (logged, ``skipped: True``);
    anything else at the destination is replaced atomically. ``"overwrite"`` always downloads again.

    :param execution: the COMPLETE execution (templated; typically ``sensor.output``).
    :param download_uri: a download link, instead of ``execution`` (templated).
    :param execution_id: id of the execution behind ``download_uri`` (templated), for naming, the
        manifest and renewing an expired link.
    :param export_type: export type, for renewing an expired link (default: the execution's
        ``exportId``).
    :param destination: file to write (templated): a path or any ``ObjectStoragePath`` (``s3://``...).
        Default ``<base>/exports/<dag_id>/<run_id>/<execution_id>.csv`` (``.parquet`` with
        ``to_parquet``).
    :param base: folder for the default destination (templated); default ``[abm] state_dir``, else
        ``$AIRFLOW_HOME/abm``.
    :param to_parquet: convert to Parquet while streaming (pyarrow), instead of storing the CSV. The
        documented columns get typed (``date`` date32, counts int64, ``spend`` decimal); others stay
        strings.
    :param if_exists: ``"skip"`` (default) or ``"overwrite"``, as described above.
    :param etag_is_md5: also check the content's MD5 against a plain 32-hex-digit ``ETag``. Off by
        default because an ETag is only an MD5 for some stores (S3 single-part uploads without
        SSE-KMS; the emulator's is not); the ETag is always used to make sure a resumed transfer
        continues the same file (``If-Match``).
    :param chunk_size: bytes per read; memory stays around a few chunks whatever the file size.
    :param progress_interval: seconds between progress log lines (bytes, percentage, rate).
    :param abm_conn_id: connection of type ``abm`` (used to renew links; never sent to storage);
        request settings as in :class:`AbmBaseOperator` (``download_timeout`` in ``hook_params``).
    :return: ``{"path", "bytes", "sha256", "execution_id", "export_type", "format", "rows", "etag",
        "resumed", "update_time", "skipped"}``. ``path`` is an OS path for local files, a URL
        otherwise; ``bytes``/``sha256`` describe the downloaded CSV as the origin served it;
        ``rows`` is set for Parquet output (``None`` for CSV, which is stored unparsed).
    """

    template_fields: Sequence[str] = (
        "execution",
        "download_uri",
        "execution_id",
        "export_type",
        "destination",
        "base",
    )
    ui_color = "#e8f0fe"

    def __init__(
        self,
        *,
        execution: Mapping[str, Any] | Any | None = None,
        download_uri: str | None = None,
        execution_id: str | None = None,
        export_type: str | None = None,
        destination: str | ObjectStoragePath | None = None,
        base: str | ObjectStoragePath | None = None,
        to_parquet: bool = False,
        if_exists: DownloadIfExists = "skip",
        etag_is_md5: bool = False,
        chunk_size: int = 8 << 20,
        progress_interval: float = 10.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (execution is None) == (download_uri is None):
            raise ValueError("DownloadExecutionCsvOperator needs exactly one of execution or download_uri")
        if if_exists not in ("skip", "overwrite"):
            raise ValueError(f"if_exists must be 'skip' or 'overwrite', got {if_exists!r}")
        if chunk_size < 64 << 10:
            raise ValueError(f"chunk_size must be at least 64 KiB, got {chunk_size}")
        if progress_interval <= 0:
            raise ValueError("progress_interval must be positive")
        if destination is not None and base is not None:
            raise ValueError("give destination (a file) or base (a folder), not both")
        if isinstance(download_uri, str) and "{{" not in download_uri:
            check_url(download_uri, "download_uri")
        self.execution = execution
        self.download_uri = download_uri
        self.execution_id = execution_id
        self.export_type = export_type
        self.destination = destination
        self.base = base
        self.to_parquet = to_parquet
        self.if_exists = if_exists
        self.etag_is_md5 = etag_is_md5
        self.chunk_size = chunk_size
        self.progress_interval = progress_interval

    # -- inputs ----------------------------------------------------------------------------------

    def _inputs(self) -> tuple[dict[str, Any], str | None, str | None, str | None]:
        """(execution, link, execution id, export type) from whichever input was given."""
        execution: dict[str, Any] = {}
        if self.execution is not None:
            if not isinstance(self.execution, Mapping):
                raise AirflowFailException(
                    "execution must be an execution dict (the sensor's XCom), "
                    f"got {type(self.execution).__name__}"
                )
            execution = dict(self.execution)
            state = execution.get("state")
            if state is not None and str(state).upper() != "COMPLETE":
                raise AirflowFailException(
                    f"Execution {execution.get('id')} is {state}, not COMPLETE; there is nothing to download"
                )
        uri = self.download_uri or execution.get("downloadUri") or None
        execution_id = self.execution_id or execution.get("id") or None
        export_type = self.export_type or execution.get("exportId") or execution.get("type") or None
        return execution, uri, execution_id, export_type

    def target(self, context: Context, execution_id: str | None, uri: str) -> ObjectStoragePath:
        """The destination file: as given, else keyed by dag, run and execution under ``base``."""
        if self.destination is not None:
            return as_storage_path(self.destination)
        ti: Any = context.get("ti") or context.get("task_instance")
        dag_id = getattr(ti, "dag_id", None) or (self.dag_id if self.has_dag() else "adhoc")
        run_id = context.get("run_id") or getattr(ti, "run_id", None) or "manual"
        name = _safe_key(execution_id) if execution_id else _uri_stem(uri)
        suffix = ".parquet" if self.to_parquet else ".csv"
        root = as_storage_path(self.base if self.base is not None else default_state_dir())
        return root / "exports" / _safe_key(dag_id) / _safe_key(str(run_id)) / f"{name}{suffix}"

    # -- execution -------------------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        """Check the link, skip if already done, download to a temporary name, check, publish."""
        from abm_provider.exceptions import AbmApiError

        execution, uri, execution_id, export_type = self._inputs()
        hook = self.hook
        if not uri:
            if not (export_type and execution_id):
                raise AirflowFailException(
                    "No downloadUri: the execution has none and no export_type/execution_id to look it up"
                )
            uri = self._fresh_uri(hook, export_type, execution_id)
        try:
            uri = check_url(uri, "downloadUri")
        except UnsafeUrlError as err:
            raise AirflowFailException(str(err)) from err
        target = self.target(context, execution_id, uri)
        fmt = "parquet" if self.to_parquet else "csv"
        base_result = {
            "execution_id": execution_id,
            "export_type": export_type,
            "format": fmt,
            "update_time": execution.get("updateTime"),
        }
        done = self._already_downloaded(target, execution_id, fmt)
        if done is not None:
            return {**base_result, **done}

        for attempt in (1, 2):
            try:
                return {**base_result, **self._fetch(hook, uri, target, execution_id, export_type)}
            except AbmApiError as err:
                # 403: the pre-signed link expired. 412: the file changed between resumed requests, so
                # the bytes so far are useless. Both are fixed once by a fresh link and a fresh start.
                if err.http_status not in (403, 412) or attempt == 2:
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
                uri = self._fresh_uri(hook, export_type, execution_id)
        raise AssertionError("unreachable")  # pragma: no cover

    def _fresh_uri(self, hook: AbmHook, export_type: str, execution_id: str) -> str:
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

    def _already_downloaded(
        self, target: ObjectStoragePath, execution_id: str | None, fmt: str
    ) -> dict[str, Any] | None:
        """The earlier result if ``target`` verifiably holds this execution already, else ``None``."""
        if self.if_exists != "skip" or not execution_id:
            return None
        manifest = read_manifest(target)
        if manifest is None:
            return None
        if manifest.get("execution_id") != execution_id or manifest.get("format") != fmt:
            self.log.info(
                "%s holds execution %s (%s); replacing it with execution %s",
                target,
                manifest.get("execution_id"),
                manifest.get("format"),
                execution_id,
            )
            return None
        sha, size = file_sha256(target)
        if sha != manifest.get("file_sha256") or size != manifest.get("file_bytes"):
            self.log.warning(
                "%s does not match its manifest (sha256 %s, %d bytes); downloading again", target, sha, size
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
            "path": self._display(target),
            "bytes": manifest.get("bytes"),
            "sha256": manifest.get("sha256"),
            "rows": manifest.get("rows"),
            "etag": manifest.get("etag"),
            "resumed": 0,
            "skipped": True,
        }

    @staticmethod
    def _display(target: ObjectStoragePath) -> str:
        return local_path(target) if is_local(target) else str(target)

    def _fetch(
        self,
        hook: AbmHook,
        uri: str,
        target: ObjectStoragePath,
        execution_id: str | None,
        export_type: str | None,
    ) -> dict[str, Any]:
        """One download into a temporary file; published only when complete and checked."""
        label = f"Download of execution {execution_id or safe_url(uri)}"
        self.log.info("%s to %s", label, target)
        stale = remove_stale_temps(target)
        if stale:
            self.log.warning(
                "Removed %d temporary file(s) an interrupted earlier try left: %s", len(stale), stale
            )
        with AtomicFile(target) as out:
            converter = CsvToParquet(out.open()) if self.to_parquet else None
            # The CSV's MD5 (for etag_is_md5) is computed inline only where it cannot be read back
            # cheaply afterwards: when it is converted, or when the temporary file is remote.
            inline_md5 = self.etag_is_md5 and (converter is not None or not is_local(target))
            if converter is not None:
                sink = HashingSink(converter.write, md5=inline_md5)
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
            progress = Progress(self.log, label, self.progress_interval)
            try:
                result = hook.download(
                    uri, cast("BinaryIO", sink), chunk_size=self.chunk_size, on_progress=progress
                )
                rows = converter.close() if converter is not None else None
            except BaseException:
                if converter is not None:
                    converter.abort()
                raise
            if sink.md5 is not None:
                md5_hex: str | None = sink.md5.hexdigest()
            elif self.etag_is_md5 and md5_etag(result.etag) is not None:
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
            except ValueError as err:
                raise AirflowException(str(err)) from err
            if result.bytes != sink.count:
                raise AirflowException(
                    f"{label}: the hook reports {result.bytes} bytes but {sink.count} reached the file"
                )
            sha256 = result.sha256
            remove_manifest(target)
            out.commit()
        progress.log_now(sink.count, result.content_length)
        if converter is not None:
            file_sha, file_bytes = file_sha256(target)
        else:
            file_sha, file_bytes = sha256, self._stored_size(target)
            if file_bytes != sink.count:
                raise AirflowException(
                    f"{label}: {target} holds {file_bytes} bytes, {sink.count} were written"
                )
        summary = {
            "path": self._display(target),
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
                "export_type": export_type,
                "format": "parquet" if self.to_parquet else "csv",
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

    @staticmethod
    def _stored_size(target: ObjectStoragePath) -> int:
        if is_local(target):
            return os.stat(local_path(target)).st_size
        return int(target.size())
