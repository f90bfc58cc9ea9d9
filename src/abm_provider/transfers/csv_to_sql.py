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
from abm_provider.common.arguments import check_choice, check_whole
from abm_provider.common.rejects import Limit, check_limit, task_rejects_location
from abm_provider.compat import AirflowFailException
from abm_provider.exports.execution_load import ExecutionLoad, LoadSettings
from abm_provider.operators.base import check_known, fail_on_bad_argument, is_deferred
from abm_provider.transfers.sources import UNLOADED, execution_of, source_meta
from abm_provider.warehouse import METHODS, Method
from abm_provider.warehouse.connections import sql_hook
from abm_provider.warehouse.ledger import DEFAULT_LEDGER_TABLE
from abm_provider.warehouse.lineage import LoadLineage
from abm_provider.warehouse.load import ON_SCHEMA_CHANGES
from abm_provider.warehouse.schema import TableName, check_identifier, export_schema

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["UNLOADED", "ExecutionCsvToSqlOperator", "warehouse_asset"]


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
    :param dialect_options: the warehouse's own settings, by name, checked against its dialect
        (templated): DuckDB's ``memory_limit`` (default ``"1GB"``) and ``threads``, for example. They
        override the connection's extra ``dialect_options``; a name the warehouse's dialect does not
        have fails the task, naming it and the options there are
        (:mod:`abm_provider.warehouse.dialects.options`).
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
        "dialect_options",
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
        dialect_options: dict[str, Any] | None = None,
        chunk_rows: int = 10_000,
        hook_params: Mapping[str, Any] | None = None,
        abm_conn_id: str = "abm_default",
        archive: str | ObjectStoragePath | None = None,
        stream: bool = True,
        etag_is_md5: bool = False,
        max_executions: int = 10,
        **kwargs: Any,
    ) -> None:
        schema_change = check_choice(on_schema_change, "on_schema_change", ON_SCHEMA_CHANGES)
        method = check_choice(method, "method", METHODS)
        max_rejected = check_limit(max_rejected, "max_rejected")
        check_whole(chunk_rows, "chunk_rows", 1)
        check_whole(max_executions, "max_executions", 1)
        if export_type is not None and not is_deferred(export_type):
            export_schema(export_type)
        check_known(_check_dialect_options, dialect_options, "dialect_options")
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
        self.on_schema_change = schema_change
        self.max_rejected = max_rejected
        self.rejects_path = rejects_path
        self.ledger_table = ledger_table
        self.method = method
        self.dialect_options = dialect_options
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
        load = self._execution_load(context)
        try:
            out = self._run(load)
        finally:
            self._lineage = load.lineage
        self._announce_days(context)
        return out

    def _run(self, load: ExecutionLoad) -> dict[str, Any]:
        """Load what ``source`` names: the executions the ledger lacks, one execution, or a file."""
        if self.source == UNLOADED:
            if not self.export_type:
                raise AirflowFailException(
                    'source="unloaded" needs export_type=: the export job whose executions to load'
                )
            run = load.unloaded(self.export_type)
            return {
                "source": UNLOADED,
                "export_type": self.export_type,
                "executions": run.loaded,
                "left": run.left,
            }
        execution = execution_of(self.source)
        if execution is not None:
            return load.execution(execution)
        return load.file(source_meta(self.source))

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

    # ---- inputs ---------------------------------------------------------------------------------

    def _execution_load(self, context: Context) -> ExecutionLoad:
        """The engine of this run, over the rendered arguments."""
        from abm_provider.hooks.abm import AbmHook

        fail_on_bad_argument(_check_dialect_options, self.dialect_options, "dialect_options")
        table = TableName.parse(self.table)
        settings = LoadSettings(
            table=table,
            ledger=table.sibling(self.ledger_table),
            # not beside a temporary copy that is about to go: where the list operators put theirs
            copy_rejects_path=Path(task_rejects_location(None, context, self).path),
            export_type=self.export_type or None,
            key_columns=self._key_columns(),
            execution_id=self.execution_id,
            force=self.force,
            on_schema_change=self.on_schema_change,
            max_rejected=self.max_rejected,
            rejects_path=Path(self.rejects_path) if self.rejects_path else None,
            method=self.method,
            dialect_options=self.dialect_options,
            chunk_rows=self.chunk_rows,
            archive=self.archive,
            stream=self.stream,
            etag_is_md5=self.etag_is_md5,
            max_executions=self.max_executions,
        )
        return ExecutionLoad(
            settings,
            abm_hook=AbmHook(self.abm_conn_id),
            warehouse_hook=self.get_db_hook,
            context=context,
            log=self.log,
            dag_id=self.dag_id if self.has_dag() else None,
        )

    def _key_columns(self) -> tuple[str, ...] | None:
        """The natural key override, checked; ``None``: the export type's own."""
        keys = self.key_columns
        if keys is None:
            return None
        names = [k.strip() for k in keys.split(",")] if isinstance(keys, str) else [str(k) for k in keys]
        if not names:
            raise AirflowFailException("key_columns is empty; omit it to use the export type's natural key")
        return tuple(check_identifier(n, "key column") for n in names)

    # ---- lineage --------------------------------------------------------------------------------

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Input: the CSV file; output: the table, with its schema and the rows written by this load."""
        return None if self._lineage is None else self._lineage.facets()


def _check_dialect_options(value: Any, name: str) -> None:
    """``dialect_options`` is a mapping of option names (or ``None``); which names the warehouse's
    dialect has is checked when the loader is made, once the connection says which warehouse it is."""
    if value is not None and not isinstance(value, Mapping):
        raise ValueError(
            f"{name} must be a mapping of the warehouse's option names to values, got "
            f"{type(value).__name__} {value!r} (a template renders to a mapping only with the DAG's "
            "render_template_as_native_obj=True)"
        )
