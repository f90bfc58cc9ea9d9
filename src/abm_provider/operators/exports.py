"""Operators for Export Jobs v1: make sure a job exists, and download an execution's CSV safely.

The service allows one job per type per account and answers a second create with 409, so
:class:`CreateExportJobOperator` treats "already exists" as success by default, which makes it safe at
the head of a daily DAG. Its schedule is checked locally first (:mod:`abm_provider.exports.schedule`)
so a cron the service would refuse fails with the rule it breaks, before any request.

:class:`DownloadExecutionCsvOperator` streams the execution's file through the hook (which resumes
dropped connections and never sends the API key to the storage origin) into a temporary name beside
the destination, checks it against ``Content-Length``/``ETag``, and publishes it with one rename, so a
reader never sees a partial file; :mod:`abm_provider.exports.archive` holds those pieces.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import ObjectStoragePath

from abm_provider.common.arguments import check_choice, check_id, check_positive, check_whole
from abm_provider.common.urls import check_url
from abm_provider.compat import AirflowFailException
from abm_provider.exports.download import (
    DownloadIfExists,
    DownloadOptions,
    ExecutionDownload,
    execution_inputs,
)
from abm_provider.exports.schedule import InvalidScheduleError, validate_schedule
from abm_provider.hooks.endpoints import JOB_IF_EXISTS, JobIfExists
from abm_provider.operators.base import (
    AbmBaseOperator,
    check_known,
    fail_if_final,
    fail_on_bad_argument,
    is_deferred,
)

if TYPE_CHECKING:
    from airflow.sdk import Context


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
        self, *, export_type: str, schedule: str, if_exists: JobIfExists = "ignore", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        check_choice(if_exists, "if_exists", JOB_IF_EXISTS)
        # Fail at DAG parse time when the values are already known; templated ones are checked in execute.
        check_known(check_id, export_type, "export_type")
        if not is_deferred(schedule):
            validate_schedule(schedule)
        self.export_type = export_type
        self.schedule = schedule
        self.if_exists = if_exists

    def execute(self, context: Context) -> dict[str, Any]:
        """Validate the schedule, then the hook's create-or-accept."""
        from abm_provider.exceptions import AbmApiError

        fail_on_bad_argument(check_id, self.export_type, "export_type")
        try:
            schedule = validate_schedule(self.schedule)
        except InvalidScheduleError as err:
            raise AirflowFailException(str(err)) from err
        try:
            return self.hook.ensure_export_job(self.export_type, schedule, self.if_exists)
        except AbmApiError as err:
            fail_if_final(err, f"Export job {self.export_type} with schedule {schedule!r}")
            raise


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
        check_choice(if_exists, "if_exists", ("skip", "overwrite"))
        check_whole(chunk_size, "chunk_size", 64 << 10)  # bytes: smaller chunks only cost calls
        check_positive(progress_interval, "progress_interval")
        if destination is not None and base is not None:
            raise ValueError("give destination (a file) or base (a folder), not both")
        if isinstance(download_uri, str) and not is_deferred(download_uri):
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

    def _download(self) -> ExecutionDownload:
        """The download with this task's (rendered) options, one attribute of the same name each."""
        return ExecutionDownload(
            log=self.log, options=DownloadOptions.of(self), dag_id=self.dag_id if self.has_dag() else None
        )

    def target(self, context: Context, execution_id: str | None, uri: str) -> ObjectStoragePath:
        """The destination file: as given, else keyed by dag, run and execution under ``base``."""
        return self._download().target(context, execution_id, uri)

    # -- execution -------------------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        """Check the link, skip if already done, download to a temporary name, check, publish."""
        execution, uri, execution_id, export_type = execution_inputs(
            self.execution, self.download_uri, self.execution_id, self.export_type
        )
        download = self._download()
        hook = self.hook
        uri = download.link(hook, uri, export_type, execution_id)
        target = download.target(context, execution_id, uri)
        base_result = {
            "execution_id": execution_id,
            "export_type": export_type,
            "format": download.format,
            "update_time": execution.get("updateTime"),
        }
        done = download.already_downloaded(target, execution_id)
        if done is not None:
            return {**base_result, **done}
        return {**base_result, **download.run(hook, uri, target, execution_id, export_type)}
