"""What the list sync and the audience sync operators share: the source, the state, the guards and limits.

Both read one source (``table`` or ``sql`` on a common-sql connection, or ``accounts_path``), keep state
in the same tables, and take the same guards and limits, checked the same way: at DAG parse time where
a value is known, once rendered otherwise. :class:`_SyncOperator` holds those arguments, checks
them, and turns them into the source and the engine's options.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from abm_provider.accounts.sources import AccountSource, SqlSource, detect_file_format, open_file_source
from abm_provider.accounts.sync.lock import check_lock_timeout
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
from abm_provider.common.arguments import check_choice, check_flag, parse_rendered
from abm_provider.common.rejects import Limit, check_limit
from abm_provider.compat import AirflowFailException
from abm_provider.operators.base import AccountSourceOperator, check_known, is_deferred
from abm_provider.warehouse.schema import TableName

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow.sdk import Context, ObjectStoragePath

#: The template fields both sync operators have (each adds what names its lists).
SYNC_TEMPLATE_FIELDS: tuple[str, ...] = (
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


def check_mode(value: Any, name: str) -> Mode:
    """A sync's ``mode``: one of :data:`~abm_provider.accounts.sync.options.MODES`."""
    return cast("Mode", check_choice(value, name, MODES))


def rendered_limit(value: Any, name: str) -> Limit:
    """A limit given as a number or ``None`` or, once rendered from a template, as its text."""
    return check_limit(parse_rendered(value), name)


def check_source(
    table: str | None,
    sql: str | None,
    sql_conn_id: str | None,
    accounts_path: Any,
    state_conn_id: str | None,
    parameters: Any,
    file_format: str | None,
) -> None:
    """Exactly one source, with what it needs; raise ``ValueError`` naming the argument."""
    given = [n for n, v in (("table", table), ("sql", sql), ("accounts_path", accounts_path)) if v]
    if len(given) != 1:
        raise ValueError(f"give exactly one source: table, sql or accounts_path; got {given or 'none'}")
    if (table or sql) and not sql_conn_id:
        raise ValueError(f"{given[0]} needs sql_conn_id (any common-sql connection)")
    if accounts_path and not state_conn_id:
        raise ValueError("accounts_path needs state_conn_id: the connection that holds the state tables")
    check_source_options(table, sql, accounts_path, parameters, file_format)


def check_source_options(table: Any, sql: Any, accounts_path: Any, parameters: Any, file_format: Any) -> None:
    """What one source's options need (an audience sync's exclusions are sources too): ``parameters``
    go with ``sql``, a ``file_format`` with ``accounts_path``, a file's format is known, and a table's
    name parses. Values still to be rendered are checked once rendered."""
    if parameters is not None and sql is None:
        raise ValueError("parameters are only used with sql")
    if file_format is not None and accounts_path is None:
        raise ValueError("file_format is only used with accounts_path")
    if file_format is not None and not is_deferred(str(file_format)):
        detect_file_format("", str(file_format))
    elif accounts_path and not is_deferred(str(accounts_path)):
        detect_file_format(str(accounts_path))
    if table and not is_deferred(table):
        TableName.parse(table)


class _SyncOperator(AccountSourceOperator):
    """Base of the sync operators: one source, the state tables, the guards and the limits.

    The arguments are documented on :class:`~abm_provider.operators.list_sync.AccountListSyncOperator`.
    """

    #: The ``dry_run`` argument, under its own name. It hides ``BaseOperator.dry_run()``, the method
    #: behind Airflow 2's ``airflow tasks test --dry-run``; nothing in Airflow 3 calls it.
    dry_run: bool | str  # type: ignore[assignment]

    def __init__(
        self,
        *,
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
        check_source(table, sql, sql_conn_id, accounts_path, state_conn_id, parameters, file_format)
        check_known(check_mode, mode, "mode")
        check_known(check_flag, dry_run, "dry_run")
        check_limit(max_rejected, "max_rejected")
        StateTables.named(state_table_prefix, None if is_deferred(state_schema) else state_schema)
        check_known(check_lock_timeout, lock_timeout, "lock_timeout")
        check_known(rendered_limit, max_removals, "max_removals")
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

    def _sync_options(self, context: Context, list_id: str) -> SyncOptions:
        """The rendered arguments, checked; a bad value fails the task without retries."""
        try:
            run_id = context.get("run_id") or getattr(context.get("ti"), "run_id", None)
            if not run_id:
                raise ValueError("no run_id in the task context")
            options = SyncOptions(
                list_id=list_id,
                run_id=str(run_id),
                mode=check_mode(self.mode, "mode"),
                dry_run=check_flag(self.dry_run, "dry_run"),
                max_rejected=self.max_rejected,
                batch_size=self.batch_size,
                max_in_flight=self.max_in_flight,
                progress_interval=self.progress_interval,
                lock_timeout=check_lock_timeout(self.lock_timeout),
                max_removals=rendered_limit(self.max_removals, "max_removals"),
                allow_empty_source=check_flag(self.allow_empty_source, "allow_empty_source"),
                retry_not_found_after=self.retry_not_found_after,
                full_resync=check_flag(self.full_resync, "full_resync"),
                log_retention_days=self.log_retention_days,
            )
            check_options(options)
            return options
        except ValueError as err:
            raise AirflowFailException(str(err)) from err

    def _state(self) -> tuple[StateTables, AccountValidator, str]:
        """The state tables, the rows' validator and the state connection, from the rendered arguments."""
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
        return tables, validator, state_conn_id

    def _log_refusals(self, summary: Mapping[str, Any], options: SyncOptions, tables: StateTables) -> None:
        """Say how many rows were refused or not found, and where their reasons are."""
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
