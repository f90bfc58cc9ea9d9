"""Load a downloaded export CSV into any common-sql warehouse, replacing restated days atomically.

The export re-sends recent days with corrected figures, so a plain append would duplicate rows and
a truncate-and-reload would lose history. This operator stages the file with the warehouse's own
bulk path (DuckDB ``read_csv``, PostgreSQL ``COPY``, or chunked ``executemany`` elsewhere), then
in one transaction deletes the rows whose natural key the file holds, inserts the file's rows and
records the load in a ledger. Re-running an execution is a logged no-op, a killed load leaves the
table as it was, and bad rows go to a rejects file instead of disappearing. See
:mod:`abm_provider.warehouse` for the per-warehouse details.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from airflow.sdk import Asset, BaseOperator, ObjectStoragePath

from abm_provider.assets import warehouse_asset
from abm_provider.common.paths import as_storage_path, is_local, local_path
from abm_provider.common.rejects import Limit, check_limit, default_rejects_path, task_rejects_location
from abm_provider.common.sql import sql_hook
from abm_provider.common.urls import safe_url
from abm_provider.compat import AirflowFailException
from abm_provider.exports.archive import file_sha256
from abm_provider.exports.download import DownloadOptions, ExecutionDownload, display, execution_inputs
from abm_provider.exports.selection import COMPLETE_STATE
from abm_provider.exports.stream import ExportStream
from abm_provider.operators.base import is_deferred
from abm_provider.transfers.sources import UNLOADED, execution_of, local_copy, naive_utc, source_meta
from abm_provider.warehouse import LoadRequest, Method, SchemaMismatch, WarehouseLoader, loader_for
from abm_provider.warehouse.ledger import DEFAULT_LEDGER_TABLE
from abm_provider.warehouse.lineage import LoadLineage
from abm_provider.warehouse.records import UnreadableFile, read_header
from abm_provider.warehouse.schema import TableName, check_identifier, export_schema

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["UNLOADED", "ExecutionCsvToSqlOperator", "warehouse_asset"]

_ON_SCHEMA_CHANGE = ("fail", "add_columns")


class ExecutionCsvToSqlOperator(BaseOperator):
    """
    Load one export execution's CSV into ``table`` over a common-sql connection.

    :param source: what to load. The execution itself (the sensor's XCom: a dict with ``id``,
        ``exportId`` and ``downloadUri``, or just a ``downloadUri``): the operator downloads it to
        ``archive`` and, with ``stream`` on, the warehouse reads the bytes as they arrive (see
        "Loading while downloading" below). Or a downloaded file: the download operator's XCom (a
        dict with ``path``, and usually ``sha256``, ``bytes``, ``execution_id``, ``export_type``),
        a path string or an ``ObjectStoragePath``; a remote one is first copied to a local temporary
        file in chunks. Or ``"unloaded"``: every COMPLETE execution of ``export_type`` that the
        ledger does not have for ``table``, oldest first, at most ``max_executions`` of them, each
        downloaded, loaded and committed in turn (see "Loading what is not loaded yet" below).
    :param sql_conn_id: any connection whose hook is a common-sql ``DbApiHook``.
    :param table: target table, ``table`` or ``schema.table``; created when missing.
    :param export_type: ``TACTIC_PERFORMANCE`` or ``DISPLAY_TACTIC_ACCOUNT_PERFORMANCE``; taken
        from the source dict when not given. Decides typed columns and the natural key.
    :param key_columns: natural key override (list, or comma-separated string).
    :param execution_id: lineage id when ``source`` is a bare path (the dict's wins otherwise).
    :param force: load again even when the ledger already has this execution and file.
    :param on_schema_change: ``"fail"`` (default) or ``"add_columns"`` (unknown file columns are
        added to the table; a column missing from the file always fails).
    :param max_rejected: an int is a count of rejected records tolerated, a float in [0, 1) a
        fraction of all records, ``None`` no limit; past it the load fails without retries
        (:class:`~abm_provider.common.rejects.TooManyRejects`) and nothing is loaded. Default 0.
    :param rejects_path: where rejected records go, in the rejects format of
        :mod:`abm_provider.common.rejects` (``line``, ``record``, ``reason``, ``raw``); a load without
        rejects removes a file an earlier load left there. Default ``<source>.rejects.csv`` for a
        local source; for a remote one, which is loaded from a temporary copy,
        ``<[abm] state_dir>/rejects/<dag_id>/<run_id>/<task_id>/try_<n>.csv``.
    :param ledger_table: name of the ledger table, in the target's schema.
    :param method: ``"auto"`` (the warehouse's bulk path when known), ``"native"`` (fail when
        there is none) or ``"generic"`` (chunked ``executemany`` everywhere).
    :param duckdb_memory_limit: / ``duckdb_threads``: applied unless the connection sets them.
    :param chunk_rows: rows per ``executemany`` on the generic path.
    :param hook_params: extra keyword arguments for the connection's hook.
    :param abm_conn_id: the ``abm`` connection that downloads an execution given as ``source`` (and
        renews its link when it has expired).
    :param archive: where an execution given as ``source`` is kept (templated): a path or an
        ``ObjectStoragePath``. Default ``<[abm] state_dir>/exports/<dag_id>/<run_id>/<execution_id>.csv``,
        as the download operator names it, with the same manifest, so a re-run that finds it
        complete loads it without downloading again.
    :param stream: load an execution while it downloads (default). Off, the file is downloaded first
        and then loaded, in the same task.
    :param etag_is_md5: also check the download's MD5 against a plain 32-hex-digit ``ETag``.
    :param max_executions: with ``source="unloaded"``, the most executions one run loads (default 10);
        the rest are left for the next run, and the log says how many.

    Loading what is not loaded yet: with ``source="unloaded"`` the run reads the ledger and the
    service's list of completed executions, and loads those the ledger lacks, oldest first, so the
    newest figures land last. Each commits on its own: a run that fails on the third has the first
    two in the table, and the next run starts at the third. A DAG scheduled on
    :func:`~abm_provider.assets.export_asset` loads this way, since Airflow may fold several of the
    Asset's events into one run, and an event lost to a triggerer crash is then picked up too.

    Loading while downloading: the bytes go to the archive's temporary file and, at the same time,
    to the warehouse's bulk path (PostgreSQL ``COPY FROM STDIN``, with the Arrow pre-scan reading
    beside it). DuckDB reads the archive once it is complete: its parallel reader over a file is
    faster than any reader of a stream on two cores (docs/performance.md). The load commits only
    after the download is complete and checked (length, ``ETag``, SHA-256 into the ledger). A download
    that breaks for good or fails a check rolls the load back; the file is then downloaded again
    (resuming dropped connections with ``Range``) and loaded from the archive. Dropped connections
    during the stream are resumed in place, the bytes continuing the same ``ETag``.
    """

    template_fields: Sequence[str] = (
        "source",
        "sql_conn_id",
        "table",
        "export_type",
        "key_columns",
        "execution_id",
        "rejects_path",
        "ledger_table",
        "abm_conn_id",
        "archive",
    )
    ui_color = "#d7e8f5"

    def __init__(
        self,
        *,
        source: Any,
        sql_conn_id: str,
        table: str,
        export_type: str | None = None,
        key_columns: Sequence[str] | str | None = None,
        execution_id: str | None = None,
        force: bool = False,
        on_schema_change: str = "fail",
        max_rejected: Limit = 0,
        rejects_path: str | None = None,
        ledger_table: str = DEFAULT_LEDGER_TABLE,
        method: Method = "auto",
        duckdb_memory_limit: str | None = "1GB",
        duckdb_threads: int | None = None,
        chunk_rows: int = 10_000,
        hook_params: Mapping[str, Any] | None = None,
        abm_conn_id: str = "abm_default",
        archive: str | ObjectStoragePath | None = None,
        stream: bool = True,
        etag_is_md5: bool = False,
        max_executions: int = 10,
        **kwargs: Any,
    ) -> None:
        if on_schema_change not in _ON_SCHEMA_CHANGE:
            raise ValueError(f"on_schema_change must be one of {_ON_SCHEMA_CHANGE}, got {on_schema_change!r}")
        if method not in ("auto", "native", "generic"):
            raise ValueError(f"method must be 'auto', 'native' or 'generic', got {method!r}")
        max_rejected = check_limit(max_rejected, "max_rejected")
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be positive, got {chunk_rows}")
        if max_executions < 1:
            raise ValueError(f"max_executions must be positive, got {max_executions}")
        if export_type is not None and not is_deferred(export_type):
            export_schema(export_type)
        if not is_deferred(table):
            TableName.parse(table)
        if "outlets" not in kwargs and not is_deferred(table) and not is_deferred(sql_conn_id):
            kwargs["outlets"] = [warehouse_asset(sql_conn_id, table)]
        super().__init__(**kwargs)
        self.source = source
        self.sql_conn_id = sql_conn_id
        self.table = table
        self.export_type = export_type
        self.key_columns = key_columns
        self.execution_id = execution_id
        self.force = force
        self.on_schema_change = on_schema_change
        self.max_rejected = max_rejected
        self.rejects_path = rejects_path
        self.ledger_table = ledger_table
        self.method: Method = method
        self.duckdb_memory_limit = duckdb_memory_limit
        self.duckdb_threads = duckdb_threads
        self.chunk_rows = chunk_rows
        self.hook_params = dict(hook_params or {})
        self.abm_conn_id = abm_conn_id
        self.archive = archive
        self.stream = stream
        self.etag_is_md5 = etag_is_md5
        self.max_executions = max_executions
        self._lineage: LoadLineage | None = None

    # ---- execution ------------------------------------------------------------------------------

    def get_db_hook(self) -> Any:
        """The connection's own hook (DuckDBHook, PostgresHook, ...), as common-sql operators resolve it."""
        return sql_hook(self.sql_conn_id, "sql_conn_id", self.hook_params)

    def execute(self, context: Context) -> dict[str, Any]:
        self._lineage = None
        out = self._load_unloaded(context) if self.source == UNLOADED else self._load_source(context)
        self._announce_days(context)
        return out

    def _announce_days(self, context: Context) -> None:
        """Put the days the loads replaced on the table's Asset event: as its partition keys (Airflow
        3.3's ``add_partitions``), so a DAG partitioned by day re-runs only those, and in its extra."""
        days = [] if self._lineage is None else self._lineage.days
        events = context.get("outlet_events") if days else None
        if events is None:
            return
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                event = events[outlet]
                event.extra["days"] = cast(Any, days)  # a list of str: JSON
                add_partitions = getattr(event, "add_partitions", None)
                if add_partitions is not None:  # Airflow 3.3 and later
                    add_partitions(days)

    def _load_source(self, context: Context) -> dict[str, Any]:
        """Load what ``source`` names: an execution to download, or a downloaded file."""
        execution = execution_of(self.source)
        if execution is not None:
            return self._load_execution(context, execution)
        meta = source_meta(self.source)
        local, cleanup = local_copy(meta["path"], self.log)
        rejects = self._rejects(context, local, remote=cleanup is not None)
        try:
            return self._load(local, meta, rejects)
        finally:
            if cleanup is not None:
                cleanup.unlink(missing_ok=True)

    def _rejects(self, context: Context, local: Path, *, remote: bool) -> Path:
        if self.rejects_path:
            return Path(self.rejects_path)
        if not remote:
            return default_rejects_path(local)
        # not beside a temporary copy that is about to go: where the list operators put theirs
        return Path(task_rejects_location(None, context, self).path)

    # ---- an execution: download and load --------------------------------------------------------

    def _load_unloaded(self, context: Context) -> dict[str, Any]:
        """Load the completed executions the ledger lacks, oldest first, each committed as it loads."""
        from abm_provider.hooks.abm import AbmHook

        if not self.export_type:
            raise AirflowFailException(
                'source="unloaded" needs export_type=: the export job whose executions to load'
            )
        table = TableName.parse(self.table)
        loaded = self._loader().loaded_executions(table, table.sibling(self.ledger_table))
        listed = AbmHook(self.abm_conn_id).iter_executions(
            self.export_type, state=COMPLETE_STATE, order_by="updateTime asc"
        )
        pending = [
            e
            for e in listed
            if e.get("state") == COMPLETE_STATE and e.get("id") and str(e["id"]) not in loaded
        ]
        now, later = pending[: self.max_executions], pending[self.max_executions :]
        self.log.info(
            "%d completed %s executions are not in %s; loading %s%s",
            len(pending),
            self.export_type,
            table,
            ", ".join(str(e["id"]) for e in now) or "none",
            f" ({len(later)} left for the next run: max_executions={self.max_executions})" if later else "",
        )
        results = []
        for number, execution in enumerate(now, start=1):
            self.log.info(
                "Execution %d of %d: %s (%s)", number, len(now), execution["id"], execution.get("updateTime")
            )
            results.append(self._load_execution(context, execution))
        return {
            "source": UNLOADED,
            "export_type": self.export_type,
            "executions": results,
            "left": len(later),
        }

    def _load_execution(self, context: Context, execution: Mapping[str, Any]) -> dict[str, Any]:
        from abm_provider.hooks.abm import AbmHook

        _, uri, execution_id, export_type = execution_inputs(execution, None, None, None)
        export_type = self.export_type or export_type
        download = ExecutionDownload(
            log=self.log,
            options=DownloadOptions(destination=self.archive, etag_is_md5=self.etag_is_md5),
            dag_id=self.dag_id if self.has_dag() else None,
        )
        hook = AbmHook(self.abm_conn_id)
        uri = download.link(hook, uri, export_type, execution_id)
        target = download.target(context, execution_id, uri)
        archive = display(target)
        meta = {
            "path": archive,
            "execution_id": execution_id,
            "export_type": export_type,
            "update_time": execution.get("updateTime") or execution.get("createTime"),
        }
        local = Path(local_path(target)) if is_local(target) else None
        done = download.already_downloaded(target, execution_id)
        if done is None and self.stream and local is not None:
            stream = ExportStream(
                lambda tee, received: download.run(
                    hook, uri, target, execution_id, export_type, tee=tee, received=received
                ),
                log=self.log,
                name=f"execution {execution_id or safe_url(uri)}",
            )
            try:
                result = self._load(local, meta, self._rejects(context, local, remote=False), stream)
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
            else:
                return {**result, "archive": archive, "streamed": stream.read_as_it_arrived}
        if done is None:
            done = download.run(hook, uri, target, execution_id, export_type)
        meta["sha256"] = done.get("sha256")
        copy, cleanup = (local, None) if local is not None else local_copy(target, self.log)
        try:
            result = self._load(copy, meta, self._rejects(context, copy, remote=cleanup is not None))
        finally:
            if cleanup is not None:
                cleanup.unlink(missing_ok=True)
        return {**result, "archive": archive, "streamed": False}

    def _load(
        self, path: Path, meta: dict[str, Any], rejects: Path, stream: ExportStream | None = None
    ) -> dict[str, Any]:
        export_type = self.export_type or meta.get("export_type")
        if not export_type:
            raise AirflowFailException(
                "export_type is not set and the source does not carry one; pass export_type="
            )
        schema = export_schema(str(export_type))
        keys = self._key_columns(schema.natural_key)
        table = TableName.parse(self.table)
        size = path.stat().st_size if stream is None else 0
        sha256 = meta.get("sha256") or ("" if stream is not None else file_sha256(as_storage_path(path))[0])
        execution_id = meta.get("execution_id") or self.execution_id
        request = LoadRequest(
            path=path,
            source=str(meta["path"]),
            table=table,
            export=schema,
            key_columns=keys,
            execution_id=str(execution_id) if execution_id is not None else None,
            sha256=str(sha256),
            size=size,
            rejects_path=rejects,
            ledger=table.sibling(self.ledger_table),
            force=self.force,
            on_schema_change="add_columns" if self.on_schema_change == "add_columns" else "fail",
            max_rejected=self.max_rejected,
            stream=stream,
            execution_time=naive_utc(meta.get("update_time")),
        )
        hook = self.get_db_hook()
        loader = self._loader(hook)
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
                request.size / (1 << 20) / max(result.seconds, 1e-6),
            )
        if self._lineage is None:
            self._lineage = LoadLineage(hook, table, schema, (str(path),), (result,))
        else:
            self._lineage = self._lineage.plus(str(path), result)
        return result.to_xcom()

    def _loader(self, hook: Any = None) -> WarehouseLoader:
        """The warehouse's loader, over ``hook`` (the connection's own hook when not given)."""
        return loader_for(
            hook if hook is not None else self.get_db_hook(),
            method=self.method,
            duckdb_memory_limit=self.duckdb_memory_limit,
            duckdb_threads=self.duckdb_threads,
            chunk_rows=self.chunk_rows,
            log=self.log,
        )

    # ---- inputs ---------------------------------------------------------------------------------

    def _key_columns(self, default: tuple[str, ...]) -> tuple[str, ...]:
        keys = self.key_columns
        if keys is None:
            return default
        names = [k.strip() for k in keys.split(",")] if isinstance(keys, str) else [str(k) for k in keys]
        if not names:
            raise AirflowFailException("key_columns is empty; omit it to use the export type's natural key")
        return tuple(check_identifier(n, "key column") for n in names)

    # ---- lineage --------------------------------------------------------------------------------

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Input: the CSV file; output: the table, with its schema and the rows written by this load."""
        return None if self._lineage is None else self._lineage.facets()
