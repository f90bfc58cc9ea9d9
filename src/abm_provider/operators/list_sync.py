"""``AccountListSyncOperator``: keep an account list in step with a table, a query or a file.

The operator orchestrates; the engine (:mod:`abm_provider.accounts.sync`) owns the state tables and the diff.
Importable from :mod:`abm_provider.operators.account_lists` with the other list operators.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.sync.engine import ListSync
from abm_provider.accounts.sync.lock import open_state
from abm_provider.common.arguments import check_id
from abm_provider.compat import AirflowFailException
from abm_provider.operators._sync import SYNC_TEMPLATE_FIELDS, _SyncOperator
from abm_provider.operators.base import check_account_arguments
from abm_provider.warehouse.connections import sql_hook
from abm_provider.warehouse.lineage import openlineage, table_input
from abm_provider.warehouse.schema import TableName

if TYPE_CHECKING:
    from airflow.sdk import Context

    from abm_provider.accounts.sync.options import SyncOptions


class AccountListSyncOperator(_SyncOperator):
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

    template_fields: Sequence[str] = ("list_id", *SYNC_TEMPLATE_FIELDS)

    def __init__(self, *, list_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_account_arguments(
            list_id,
            self.column_map,
            self.default_crm_type,
            self.batch_size,
            self.max_in_flight,
            self.progress_interval,
        )
        self.list_id = list_id
        self._lineage: dict[str, Any] | None = None

    def _options(self, context: Context) -> SyncOptions:
        """The rendered arguments, checked; a bad value fails the task without retries."""
        try:
            check_id(self.list_id, "list_id")
        except ValueError as err:
            raise AirflowFailException(str(err)) from err
        return self._sync_options(context, self.list_id)

    def execute(self, context: Context) -> dict[str, Any]:
        """Plan against the state tables, send the change, record it; return the counts."""
        options = self._options(context)
        tables, validator, state_conn_id = self._state()
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
        self._log_refusals(summary, options, tables)
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
