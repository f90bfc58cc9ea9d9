"""``AccountListSyncOperator``: keep an account list in step with a table, a query or a file.

The operator orchestrates; the engine (:mod:`abm_provider.accounts.sync`) owns the state tables and the diff.
Importable from :mod:`abm_provider.operators.account_lists` with the other list operators.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import suppress
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from abm_provider.accounts.sources import AccountSource, SqlSource, detect_file_format, open_file_source
from abm_provider.accounts.sync.engine import ListSync
from abm_provider.accounts.sync.lock import check_lock_timeout, open_state
from abm_provider.accounts.sync.options import (
    FULL_RESYNC_REMOVE_ONLY,
    MODES,
    ONE_DAY,
    Mode,
    SyncOptions,
    check_delay,
    check_options,
    check_retention,
)
from abm_provider.accounts.sync.state import DEFAULT_PREFIX, StateTables
from abm_provider.accounts.validation import MAX_BATCH_SIZE, AccountValidator
from abm_provider.assets import warehouse_asset
from abm_provider.common.arguments import check_choice, check_flag, check_id, parse_rendered
from abm_provider.common.rejects import Limit, check_limit
from abm_provider.compat import AirflowFailException
from abm_provider.operators.base import (
    AccountSourceOperator,
    check_account_arguments,
    check_known,
    is_deferred,
)
from abm_provider.warehouse.connections import sql_hook
from abm_provider.warehouse.lineage import openlineage, table_input
from abm_provider.warehouse.schema import TableName

if TYPE_CHECKING:
    from airflow.sdk import Context, ObjectStoragePath


def _check_mode(value: Any, name: str) -> Mode:
    """A sync's ``mode``: one of :data:`~abm_provider.accounts.sync.options.MODES`."""
    return cast("Mode", check_choice(value, name, MODES))


def _rendered_limit(value: Any, name: str) -> Limit:
    """A limit given as a number or ``None`` or, once rendered from a template, as its text."""
    return check_limit(parse_rendered(value), name)


class AccountListSyncOperator(AccountSourceOperator):
    """Keep an account list in step with a source: send only what changed since the last run.

    The source is one of ``table`` or ``sql`` (over ``sql_conn_id``, any common-sql connection) or
    ``accounts_path`` (CSV or Parquet on any ``ObjectStoragePath``). Each row is validated as the
    add operator validates it; only ``id`` is required.

    State lives in four tables on ``state_conn_id`` (default: ``sql_conn_id``), created on first use:
    ``<prefix>members`` (what the list holds by our record), ``<prefix>plan`` (each run's change
    set), ``<prefix>rejects`` (refused rows with their reasons) and ``<prefix>runs`` (one row per
    run). A run plans, sends, then records, keyed by the list and the Airflow run id: a retry or a
    re-run after a crash resumes after the last recorded batch and converges on the same membership;
    a refused row (invalid, or not found by the service) is not sent again until one of its values
    changes. See :mod:`abm_provider.accounts.sync.engine`.

    One sync of a list runs at a time: the run takes a lock per list in the state database before it
    reads anything (a session advisory lock on PostgreSQL; the file itself between processes on
    DuckDB; within the process only on other databases). A second sync of the list waits up to
    ``lock_timeout`` seconds, then fails with ``SyncAlreadyRunning`` ("another sync of list X is
    running (run id ...)"), an ``AirflowException``, so the task's retries apply.

    :param list_id: the list to keep (templated; e.g. ``ensure_list.output["list_id"]``).
    :param table: source table, ``table`` or ``schema.table`` (templated), read with ``sql_conn_id``.
    :param sql: source query (templated; ``.sql`` files are templates), run with ``sql_conn_id``.
    :param accounts_path: source file, ``.csv`` or ``.parquet`` (templated); needs ``state_conn_id``.
    :param parameters: bind parameters of ``sql`` (templated), a list or a dict in the driver's own
        style (``?`` / ``$name`` on DuckDB, ``%s`` / ``%(name)s`` on PostgreSQL and MySQL), passed as
        ``SQLExecuteQueryOperator`` passes them. The query's text is never rewritten.
    :param column_map: ``{api_field: source_column}`` for ``id``, ``name``, ``crmOrgId``, ``crmType``.
    :param mode: ``"mirror"`` (default: add what joined, remove what left), ``"add_only"`` (never
        remove) or ``"remove_only"`` (never add: an exclusion list that only shrinks). Templated.
    :param max_removals: the removals one run may make before it stops with nothing sent: an int
        count, a float fraction in [0, 1) of the recorded members, or ``None`` (any). Default
        ``0.25``. A stopped run keeps its plan and fails with ``SyncGuardTripped``, whose message
        gives both figures. Templated (a rendered ``"None"``, number or fraction is accepted).
    :param allow_empty_source: let a run that removes go on when the source holds no rows (default
        ``False``: it stops, as an empty source is far more often a broken upstream job). Templated.
    :param retry_not_found_after: an account the service did not find is sent again after this many
        seconds (or a ``timedelta``) on the service's clock; ``None`` holds it until one of its
        values changes. Default one day.
    :param full_resync: send every valid source row again, member or not, and rebuild the recorded
        membership from the answers: for a list changed outside the sync. Templated.
    :param log_retention_days: days the run log (``<prefix>log``) keeps a run's rows (default 30;
        ``None`` keeps them all).
    :param dry_run: compute, log and return the plan without sending anything or changing the
        recorded membership (templated; ``"true"``/``"false"`` accepted once rendered).
    :param max_rejected: as for the warehouse loader: an int is a count of invalid rows tolerated,
        a float in [0, 1) a fraction of the source rows, ``None`` no limit. Past it nothing is sent
        or recorded. Rows refused in an earlier run with the same values are not counted again.
    :param state_conn_id: where the state tables live (templated); default ``sql_conn_id``.
    :param state_schema: schema of the state tables (default: the connection's).
    :param state_table_prefix: name prefix of the state tables (default ``abm_sync_``).
    :param default_crm_org_id: / ``default_crm_type``: fill a row's missing org or type; by default a
        row is sent with what it has and the service fills the rest.
    :param max_in_flight: requests open at once (default 2, at most 8).
    :param drift_check: after a run, compare the recorded count with the list's
        ``estimatedAccountsCount`` and warn with both when they differ (default ``True``).
    :param lock_timeout: seconds to wait for another sync of the same list to end before failing
        with ``SyncAlreadyRunning`` (templated; default ``0``: fail at once and leave the waiting to
        the task's retries, so a stuck sync does not hold a worker slot per waiting task).
    :return: ``{"to_add", "to_remove", "added", "removed", "duplicates", "not_found", "rejected",
        "dry_run", "held", "source_rows", "list_id", "mode", "run_id", "guard", "state_count"
        [, "service_count"]}``: counts only, never accounts. ``held`` counts rows refused before and
        skipped; ``run_id`` finds the run's rows in the run log; ``guard`` names the guard a dry run's
        plan would trip (``"max_removals"`` or ``"allow_empty_source"``), else ``None``.
    """

    template_fields: Sequence[str] = (
        "list_id",
        "table",
        "sql",
        "accounts_path",
        "file_format",
        "sql_conn_id",
        "parameters",
        "column_map",
        "mode",
        "dry_run",
        "state_conn_id",
        "state_schema",
        "default_crm_org_id",
        "lock_timeout",
        "max_removals",
        "allow_empty_source",
        "full_resync",
    )
    #: The ``dry_run`` argument, under its own name. It hides ``BaseOperator.dry_run()``, the method
    #: behind Airflow 2's ``airflow tasks test --dry-run``; nothing in Airflow 3 calls it.
    dry_run: bool | str  # type: ignore[assignment]

    def __init__(
        self,
        *,
        list_id: str,
        table: str | None = None,
        sql: str | None = None,
        sql_conn_id: str | None = None,
        accounts_path: str | ObjectStoragePath | None = None,
        file_format: str | None = None,
        parameters: Mapping[str, Any] | Sequence[Any] | None = None,
        sql_hook_params: Mapping[str, Any] | None = None,
        column_map: Mapping[str, str] | None = None,
        mode: Mode | str = "mirror",
        dry_run: bool | str = False,
        max_rejected: int | float | None = 0,
        state_conn_id: str | None = None,
        state_schema: str | None = None,
        state_table_prefix: str = DEFAULT_PREFIX,
        default_crm_org_id: str | None = None,
        default_crm_type: str | None = None,
        batch_size: int = MAX_BATCH_SIZE,
        max_in_flight: int = 2,
        progress_interval: float = 30.0,
        drift_check: bool = True,
        lock_timeout: float | str = 0,
        max_removals: int | float | str | None = 0.25,
        allow_empty_source: bool | str = False,
        retry_not_found_after: float | timedelta | None = ONE_DAY,
        full_resync: bool | str = False,
        log_retention_days: float | None = 30.0,
        **kwargs: Any,
    ) -> None:
        given = [n for n, v in (("table", table), ("sql", sql), ("accounts_path", accounts_path)) if v]
        if len(given) != 1:
            raise ValueError(f"give exactly one source: table, sql or accounts_path; got {given or 'none'}")
        if (table or sql) and not sql_conn_id:
            raise ValueError(f"{given[0]} needs sql_conn_id (any common-sql connection)")
        if accounts_path and not state_conn_id:
            raise ValueError("accounts_path needs state_conn_id: the connection that holds the state tables")
        if parameters is not None and sql is None:
            raise ValueError("parameters are only used with sql")
        if file_format is not None and accounts_path is None:
            raise ValueError("file_format is only used with accounts_path")
        if accounts_path and file_format is None and not is_deferred(str(accounts_path)):
            detect_file_format(str(accounts_path))
        if table and not is_deferred(table):
            TableName.parse(table)
        check_known(_check_mode, mode, "mode")
        check_known(check_flag, dry_run, "dry_run")
        check_limit(max_rejected, "max_rejected")
        StateTables.named(state_table_prefix, None if is_deferred(state_schema) else state_schema)
        check_account_arguments(
            list_id, column_map, default_crm_type, batch_size, max_in_flight, progress_interval
        )
        check_known(check_lock_timeout, lock_timeout, "lock_timeout")
        check_known(_rendered_limit, max_removals, "max_removals")
        check_known(check_flag, allow_empty_source, "allow_empty_source")
        check_known(check_flag, full_resync, "full_resync")
        check_delay(retry_not_found_after, "retry_not_found_after")
        check_retention(log_retention_days)
        resync_known = not is_deferred(mode) and not is_deferred(full_resync)
        if resync_known and mode == "remove_only" and check_flag(full_resync, "full_resync"):
            raise ValueError(FULL_RESYNC_REMOVE_ONLY)
        if table and sql_conn_id and not is_deferred(table) and not is_deferred(sql_conn_id):
            kwargs.setdefault("inlets", [warehouse_asset(sql_conn_id, table)])
        super().__init__(**kwargs)
        self.list_id = list_id
        self.table = table
        self.sql = sql
        self.sql_conn_id = sql_conn_id
        self.accounts_path = accounts_path
        self.file_format = file_format
        self.parameters = parameters
        self.sql_hook_params = dict(sql_hook_params or {})
        self.column_map = column_map
        self.mode = mode
        self.dry_run = dry_run
        self.max_rejected = max_rejected
        self.state_conn_id = state_conn_id
        self.state_schema = state_schema
        self.state_table_prefix = state_table_prefix
        self.default_crm_org_id = default_crm_org_id
        self.default_crm_type = default_crm_type
        self.batch_size = batch_size
        self.max_in_flight = max_in_flight
        self.progress_interval = progress_interval
        self.drift_check = drift_check
        self.lock_timeout = lock_timeout
        self.max_removals = max_removals
        self.allow_empty_source = allow_empty_source
        self.retry_not_found_after = check_delay(retry_not_found_after, "retry_not_found_after")
        self.full_resync = full_resync
        self.log_retention_days = log_retention_days
        self._lineage: dict[str, Any] | None = None

    def _source(self) -> AccountSource:
        if self.accounts_path:
            return open_file_source(self.accounts_path, self.file_format, read_batch_size=self.batch_size)
        assert self.sql_conn_id is not None
        return SqlSource(
            self.sql or None,
            self.sql_conn_id,
            table=None if self.sql else TableName.parse(str(self.table)),
            parameters=self.parameters if self.sql else None,
            hook_params=self.sql_hook_params,
            fetch_size=self.batch_size,
        )

    def _options(self, context: Context) -> SyncOptions:
        """The rendered arguments, checked; a bad value fails the task without retries."""
        try:
            check_id(self.list_id, "list_id")
            run_id = context.get("run_id") or getattr(context.get("ti"), "run_id", None)
            if not run_id:
                raise ValueError("no run_id in the task context")
            options = SyncOptions(
                list_id=self.list_id,
                run_id=str(run_id),
                mode=_check_mode(self.mode, "mode"),
                dry_run=check_flag(self.dry_run, "dry_run"),
                max_rejected=self.max_rejected,
                batch_size=self.batch_size,
                max_in_flight=self.max_in_flight,
                progress_interval=self.progress_interval,
                lock_timeout=check_lock_timeout(self.lock_timeout),
                max_removals=_rendered_limit(self.max_removals, "max_removals"),
                allow_empty_source=check_flag(self.allow_empty_source, "allow_empty_source"),
                retry_not_found_after=self.retry_not_found_after,
                full_resync=check_flag(self.full_resync, "full_resync"),
                log_retention_days=self.log_retention_days,
            )
            check_options(options)
            return options
        except ValueError as err:
            raise AirflowFailException(str(err)) from err

    def execute(self, context: Context) -> dict[str, Any]:
        """Plan against the state tables, send the change, record it; return the counts."""
        options = self._options(context)
        try:
            tables = StateTables.named(self.state_table_prefix, self.state_schema)
            validator = AccountValidator(
                self.column_map,
                default_crm_type=self.default_crm_type,
                default_crm_org_id=self.default_crm_org_id,
            )
        except ValueError as err:
            raise AirflowFailException(str(err)) from err
        state_conn_id = self.state_conn_id or self.sql_conn_id
        assert state_conn_id is not None
        db = open_state(
            sql_hook(state_conn_id, "state_conn_id"), options.list_id, options.run_id, options.lock_timeout
        )
        self.log.info(
            "Syncing list %s (%s%s) from %s; state in %s on %s",
            options.list_id,
            options.mode,
            ", dry run" if options.dry_run else "",
            self.table or self.accounts_path or "the sql query",
            f"{self.state_schema + '.' if self.state_schema else ''}{self.state_table_prefix}*",
            state_conn_id,
        )
        try:
            sync = ListSync(db, tables, options, validator, self.get_hook, self.log)
            summary = sync.run(self._source())
            if self.drift_check and not options.dry_run:
                sync.check_drift(self.hook, summary)
        finally:
            db.close()
        if options.dry_run and summary["rejected"]:
            self.log.warning("%d rows would be refused as invalid (not recorded)", summary["rejected"])
        elif summary["rejected"] or summary["not_found"]:
            retry = options.retry_not_found_after
            self.log.warning(
                "%d rows refused as invalid and %d accounts not found by the service in this run; they "
                "are in %s with their reasons (run log: %s, run id %s). Invalid rows are not sent again "
                "until they change; accounts not found are sent again %s",
                summary["rejected"],
                summary["not_found"],
                tables.rejects,
                tables.log,
                options.run_id,
                "when they change" if retry is None else f"after {timedelta(seconds=retry)}",
            )
        self.log.info("Sync of list %s done: %s", options.list_id, summary)
        self._lineage = {"list_id": options.list_id, "summary": summary}
        return summary

    # ---- lineage --------------------------------------------------------------------------------

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Input: the source table or file; output: the account list."""
        ol = openlineage()
        if self._lineage is None or ol is None:
            return None
        inputs = []
        if self.table and self.sql_conn_id:
            with suppress(Exception):
                hook = sql_hook(self.sql_conn_id, "sql_conn_id")
                inputs.append(table_input(ol, hook, TableName.parse(self.table)))
        elif self.accounts_path:
            inputs.append(ol.Dataset(namespace="file", name=str(self.accounts_path)))
        elif self.sql and self.sql_conn_id:
            inputs.extend(_sql_inputs(ol, self.sql, self.sql_conn_id))
        _scheme, host, port = self.hook.settings.origin
        output = ol.Dataset(namespace=f"abm://{host}:{port}", name=f"accountLists/{self._lineage['list_id']}")
        return ol.OperatorLineage(inputs=inputs, outputs=[output])


def _sql_inputs(ol: Any, sql: str, conn_id: str) -> list[Any]:
    """The tables a source query reads, by OpenLineage's SQL parser, when it is installed."""
    try:
        from openlineage_sql import parse
    except ImportError:
        return []
    found: list[Any] = []
    with suppress(Exception):
        hook = sql_hook(conn_id, "sql_conn_id")
        for table in parse([sql]).in_tables:
            found.append(table_input(ol, hook, TableName(table.schema or None, table.name)))
    return found
