"""One task's load of export executions into a warehouse table: plan, download, stream, fall back.

:class:`ExecutionLoad` is the engine behind
:class:`~abm_provider.transfers.csv_to_sql.ExecutionCsvToSqlOperator`, which resolves its templated
arguments into :class:`LoadSettings`, builds one per task run and calls one of:

- :meth:`ExecutionLoad.unloaded`: the completed executions of an export that the ledger lacks, oldest
  first, each downloaded, loaded and committed on its own, so a run that fails on the third leaves the
  first two in the table and the next run starts at the third;
- :meth:`ExecutionLoad.execution`: one execution, downloaded into its archive file
  (:class:`~abm_provider.exports.download.ExecutionDownload`) and, with ``stream`` on, read by the
  warehouse as the bytes arrive (:class:`~abm_provider.exports.stream.ExportStream`). A stream that
  breaks rolls the load back; the file is then downloaded again and loaded from the archive;
- :meth:`ExecutionLoad.file`: a file downloaded before (a remote one is copied to a local temporary
  file first, in chunks).

Every load goes through the warehouse's loader (:func:`abm_provider.warehouse.loader_for`), and what
they wrote is kept in :attr:`ExecutionLoad.lineage` for the operator's lineage and Asset events.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import ObjectStoragePath

from abm_provider.common.paths import as_storage_path, is_local, local_path
from abm_provider.common.rejects import Limit, default_rejects_path
from abm_provider.common.urls import safe_url
from abm_provider.compat import AirflowFailException
from abm_provider.exports.archive import file_sha256
from abm_provider.exports.download import DownloadOptions, ExecutionDownload, display, execution_inputs
from abm_provider.exports.selection import COMPLETE_STATE, parse_timestamp
from abm_provider.exports.stream import ExportStream
from abm_provider.warehouse import LoadRequest, Method, SchemaMismatch, WarehouseLoader, loader_for
from abm_provider.warehouse.lineage import LoadLineage
from abm_provider.warehouse.load import OnSchemaChange
from abm_provider.warehouse.records import UnreadableFile, read_header
from abm_provider.warehouse.schema import TableName, export_schema

if TYPE_CHECKING:
    from abm_provider.hooks.abm import AbmHook

__all__ = ["ExecutionLoad", "LoadSettings", "UnloadedRun"]


@dataclass(frozen=True)
class LoadSettings:
    """What every load of one task shares, resolved from the operator's arguments (which it documents).

    :param copy_rejects_path: where the rejects of a file loaded from a temporary copy go when
        ``rejects_path`` is not set (not beside a copy that is about to be deleted).
    :param key_columns: the natural key; ``None``: the export type's own.
    :param execution_id: the lineage id of a file that does not carry one.
    """

    table: TableName
    ledger: TableName
    copy_rejects_path: Path
    export_type: str | None = None
    key_columns: tuple[str, ...] | None = None
    execution_id: str | None = None
    force: bool = False
    on_schema_change: OnSchemaChange = "fail"
    max_rejected: Limit = 0
    rejects_path: Path | None = None
    method: Method = "auto"
    dialect_options: Mapping[str, Any] | None = None
    chunk_rows: int = 10_000
    archive: str | ObjectStoragePath | None = None
    stream: bool = True
    etag_is_md5: bool = False
    max_executions: int = 10


@dataclass(frozen=True)
class UnloadedRun:
    """What :meth:`ExecutionLoad.unloaded` did: each execution's load, oldest first, and how many
    completed executions it left for the next run (past ``max_executions``)."""

    loaded: list[dict[str, Any]]
    left: int


@dataclass(eq=False)  # one run's engine: equal only to itself
class ExecutionLoad:
    """One task run's loads into ``settings.table``; see the module docstring.

    :param settings: the resolved arguments.
    :param abm_hook: the ABM API, which lists the executions and downloads them.
    :param warehouse_hook: returns the warehouse's common-sql hook; called for every load.
    :param context: the task's context, which names the default archive file.
    :param log: the task's log.
    :param dag_id: names the default archive file when the context has no task instance.
    """

    settings: LoadSettings
    _: KW_ONLY
    abm_hook: AbmHook
    warehouse_hook: Callable[[], Any]
    context: Mapping[str, Any]
    log: logging.Logger | Any
    dag_id: str | None = None
    #: What the loads so far wrote, for OpenLineage and the Asset event; ``None`` before the first.
    lineage: LoadLineage | None = field(default=None, init=False)

    # ---- what the ledger lacks ------------------------------------------------------------------

    def unloaded(self, export_type: str) -> UnloadedRun:
        """Load the completed executions of ``export_type`` the ledger lacks, oldest first, each
        committed as it loads, at most ``max_executions`` of them."""
        settings = self.settings
        loaded = self.loader(self.warehouse_hook()).loaded_executions(settings.table, settings.ledger)
        listed = self.abm_hook.iter_executions(export_type, state=COMPLETE_STATE, order_by="updateTime asc")
        pending = [
            e
            for e in listed
            if e.get("state") == COMPLETE_STATE and e.get("id") and str(e["id"]) not in loaded
        ]
        most = settings.max_executions
        now, later = pending[:most], pending[most:]
        self.log.info(
            "%d completed %s executions are not in %s; loading %s%s",
            len(pending),
            export_type,
            settings.table,
            ", ".join(str(e["id"]) for e in now) or "none",
            f" ({len(later)} left for the next run: max_executions={most})" if later else "",
        )
        results = []
        for number, execution in enumerate(now, start=1):
            self.log.info(
                "Execution %d of %d: %s (%s)", number, len(now), execution["id"], execution.get("updateTime")
            )
            results.append(self.execution(execution))
        return UnloadedRun(results, len(later))

    # ---- one execution: download and load -------------------------------------------------------

    def execution(self, execution: Mapping[str, Any]) -> dict[str, Any]:
        """Download ``execution`` (the sensor's XCom, or an item of the executions listing) into its
        archive and load it: while it downloads when ``stream`` is on and the archive is local."""
        settings = self.settings
        _, uri, execution_id, export_type = execution_inputs(execution, None, None, None)
        export_type = settings.export_type or export_type
        download = ExecutionDownload(
            log=self.log,
            options=DownloadOptions(destination=settings.archive, etag_is_md5=settings.etag_is_md5),
            dag_id=self.dag_id,
        )
        hook = self.abm_hook
        uri = download.link(hook, uri, export_type, execution_id)
        target = download.target(self.context, execution_id, uri)
        archive = display(target)
        meta = {
            "path": archive,
            "execution_id": execution_id,
            "export_type": export_type,
            "update_time": execution.get("updateTime") or execution.get("createTime"),
        }
        local = Path(local_path(target)) if is_local(target) else None
        done = download.already_downloaded(target, execution_id)
        if done is None and settings.stream and local is not None:
            stream = ExportStream(
                lambda tee, received: download.run(
                    hook, uri, target, execution_id, export_type, tee=tee, received=received
                ),
                log=self.log,
                name=f"execution {execution_id or safe_url(uri)}",
            )
            result = self._load_streamed(local, meta, stream, target)
            if result is not None:
                return {**result, "archive": archive, "streamed": stream.read_as_it_arrived}
        if done is None:
            done = download.run(hook, uri, target, execution_id, export_type)
        meta["sha256"] = done.get("sha256")
        result = self.file(meta, local if local is not None else target)
        return {**result, "archive": archive, "streamed": False}

    def _load_streamed(
        self, local: Path, meta: dict[str, Any], stream: ExportStream, target: ObjectStoragePath
    ) -> dict[str, Any] | None:
        """The load of a file while it downloads; ``None`` when the download broke and the load was
        rolled back, so that the caller downloads it again and loads the archive."""
        try:
            return self._load(local, meta, self._rejects(local, copied=False), stream)
        except Exception as exc:
            stream.cancel()
            failure = stream.failure
            if failure is None:  # the load failed on its own: its error is the task's
                raise
            if isinstance(failure, AirflowFailException):  # a full disk: no new download can help
                raise failure from exc
            self.log.warning(
                "The load of %s while it downloaded was rolled back, nothing committed (%s); "
                "downloading the file again, then loading it",
                target,
                exc,
            )
            return None

    # ---- a downloaded file ----------------------------------------------------------------------

    def file(self, meta: Mapping[str, Any], location: Any = None) -> dict[str, Any]:
        """Load a downloaded file: ``meta`` has its ``path`` and what its XCom told (``sha256``,
        ``execution_id``, ``export_type``, ``update_time``); ``location``, when given, is where to
        read it (the archive just downloaded), else ``meta["path"]``."""
        local, cleanup = local_copy(meta["path"] if location is None else location, self.log)
        try:
            return self._load(local, dict(meta), self._rejects(local, copied=cleanup is not None))
        finally:
            if cleanup is not None:
                cleanup.unlink(missing_ok=True)

    def _rejects(self, local: Path, *, copied: bool) -> Path:
        if self.settings.rejects_path is not None:
            return self.settings.rejects_path
        return self.settings.copy_rejects_path if copied else default_rejects_path(local)

    # ---- the load -------------------------------------------------------------------------------

    def _load(
        self, path: Path, meta: dict[str, Any], rejects: Path, stream: ExportStream | None = None
    ) -> dict[str, Any]:
        settings = self.settings
        export_type = settings.export_type or meta.get("export_type")
        if not export_type:
            raise AirflowFailException(
                "export_type is not set and the source does not carry one; pass export_type="
            )
        schema = export_schema(str(export_type))
        table = settings.table
        size = path.stat().st_size if stream is None else 0
        sha256 = meta.get("sha256") or ("" if stream is not None else file_sha256(as_storage_path(path))[0])
        execution_id = meta.get("execution_id") or settings.execution_id
        request = LoadRequest(
            path=path,
            source=str(meta["path"]),
            table=table,
            export=schema,
            key_columns=settings.key_columns or schema.natural_key,
            execution_id=str(execution_id) if execution_id is not None else None,
            sha256=str(sha256),
            size=size,
            rejects_path=rejects,
            ledger=settings.ledger,
            force=settings.force,
            on_schema_change=settings.on_schema_change,
            max_rejected=settings.max_rejected,
            stream=stream,
            execution_time=naive_utc(meta.get("update_time")),
        )
        hook = self.warehouse_hook()
        loader = self.loader(hook)
        self.log.info(
            "Loading %s (%s, execution %s, %s) into %s via %s",
            path,
            f"{size / (1 << 20):.1f} MB" if stream is None else "while it downloads",
            request.execution_id,
            schema.export_type,
            table,
            loader.method,
        )
        try:
            result = loader.load(request, read_header(path) if stream is None else None)
        except (UnreadableFile, SchemaMismatch) as exc:
            # A broken file or a schema change: retrying the same file cannot succeed. Too many bad
            # records raise TooManyRejects, an AirflowFailException already.
            raise AirflowFailException(str(exc)) from exc
        if result.skipped:
            self.log.info("Skipped: execution %s was already loaded into %s", result.execution_id, table)
        else:
            self.log.info(
                "Loaded %d rows into %s (%d replaced, %d rejected%s) in %.1f s (%.1f MB/s)",
                result.rows_loaded,
                table,
                result.rows_deleted,
                result.rows_rejected,
                f", see {result.rejects_path}" if result.rejects_path else "",
                result.seconds,
                result.bytes / (1 << 20) / max(result.seconds, 1e-6),  # known once a stream is complete
            )
        if self.lineage is None:
            self.lineage = LoadLineage(hook, table, schema, (str(path),), (result,))
        else:
            self.lineage = self.lineage.plus(str(path), result)
        return result.to_xcom()

    def loader(self, hook: Any) -> WarehouseLoader:
        """The warehouse's loader over ``hook``, as the settings ask for it."""
        settings = self.settings
        try:
            return loader_for(
                hook,
                method=settings.method,
                dialect_options=settings.dialect_options,
                chunk_rows=settings.chunk_rows,
                log=self.log,
            )
        except ValueError as err:  # an option the dialect lacks, a native path it has not: no retry helps
            raise AirflowFailException(str(err)) from err


def local_copy(location: Any, log: logging.Logger | Any) -> tuple[Path, Path | None]:
    """A local path for the databases to read, and the temporary copy to delete after, if one was made.

    A remote object is copied down in chunks first.
    """
    if isinstance(location, Path):
        return location, None
    storage = location if isinstance(location, ObjectStoragePath) else ObjectStoragePath(str(location))
    if is_local(storage):
        path = Path(storage.path)
        if not path.is_file():
            raise AirflowFailException(f"source file {path} does not exist")
        return path, None
    handle, name = tempfile.mkstemp(prefix="abm-load-", suffix=".csv")
    with os.fdopen(handle, "wb") as out, storage.open("rb") as src:
        shutil.copyfileobj(src, out, 8 << 20)
    log.info("Copied %s to %s for loading", storage, name)
    return Path(name), Path(name)


def naive_utc(value: Any) -> dt.datetime | None:
    """An execution's ``updateTime`` as the ledger stores times (naive UTC); a clear error if unreadable."""
    try:
        parsed = parse_timestamp(value)
    except ValueError as err:
        raise AirflowFailException(f"the source's update_time {value!r} is not a timestamp: {err}") from err
    return parsed.replace(tzinfo=None) if parsed is not None else None
