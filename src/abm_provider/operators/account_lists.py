"""Operators for Account Lists v2: folders, lists, and adding or removing accounts at scale.

The API has no get-by-name, answers unknown accounts inside a 200 response, and takes at most 1000
accounts a request. So the create operators look a name up through the list endpoints before
creating (re-runs reuse instead of duplicating), and the membership operators stream their source,
validate every row before it is sent, and write every row that was not sent or that the service did
not know to a rejects file: nothing disappears silently, and XCom carries only a summary.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from airflow.sdk import ObjectStoragePath

from abm_provider.accounts.sources import (
    AccountSource,
    IterableSource,
    SqlSource,
    TableSource,
    detect_file_format,
    is_table,
    open_file_source,
)
from abm_provider.accounts.validation import (
    API_FIELDS,
    KNOWN_CRM_TYPES,
    MAX_BATCH_SIZE,
    REMOVE_FIELDS,
    AccountValidator,
    InvalidRow,
    SourceRow,
    check_batch_size,
    iter_batches,
    normalise_column_map,
)
from abm_provider.common.collector import fewer_collections
from abm_provider.common.concurrency import PerThread, check_in_flight, in_order
from abm_provider.common.paths import as_storage_path
from abm_provider.common.progress import RowProgress
from abm_provider.common.rejects import (
    Limit,
    RejectsWriter,
    TooManyRejects,
    check_limit,
    check_rejects,
    describe_reject,
    raw_json,
    task_rejects_location,
)
from abm_provider.compat import AirflowFailException
from abm_provider.exceptions import AbmApiError
from abm_provider.operators._base import (
    ACCOUNT_LISTS_COLOR,
    ACCOUNT_SOURCE_RENDERERS,
    AbmBaseOperator,
    fail_if_final,
    is_deferred,
    is_xcom_arg,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from abm_provider.hooks.abm import AbmHook
    from abm_provider.hooks.results import AccountsResult

IfExists = Literal["reuse", "create", "fail"]
#: Values of the deprecated ``on_limit`` argument.
OnLimit = Literal["fail", "warn"]
_IF_EXISTS = ("reuse", "create", "fail")
_FOLDER_ACCESS = ("FOLDER_ACCESS_UNSPECIFIED", "PUBLIC", "READ_ONLY")


def _check_if_exists(if_exists: str) -> None:
    if if_exists not in _IF_EXISTS:
        raise ValueError(f"if_exists must be one of {list(_IF_EXISTS)}, got {if_exists!r}")


def _check_id(value: Any, name: str) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is safe as one URL path segment.

    A list id such as ``"../folders"`` or ``"x/accounts/remove"`` would address another endpoint; the
    hook refuses it too, but only when the first request is built, as a plain ``ValueError`` that
    Airflow retries in vain. Checking here fails the DAG at parse time, or the task without retries.
    """
    from abm_provider.hooks._urls import path_segment

    path_segment(value, name)


def _check_text(value: Any, name: str) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a non-blank string."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__} {value!r}")
    if not value.strip():
        raise ValueError(f"{name} is empty")


def _check_folder_access(value: Any, name: str = "folder_access") -> None:
    if value not in _FOLDER_ACCESS:
        raise ValueError(f"{name} must be one of {list(_FOLDER_ACCESS)}, got {value!r}")


def _fail_on_bad_argument(check: Any, value: Any, name: str) -> None:
    """Run a parse-time check at execute time, where a rendered value is final: no retry can fix it."""
    try:
        check(value, name)
    except ValueError as err:
        raise AirflowFailException(str(err)) from err


def _raise_conflict(err: AbmApiError) -> None:
    """``if_exists="fail"`` met an existing resource: no task retry can change that."""
    if err.http_status == 409:
        raise AirflowFailException(str(err)) from err


class CreateAccountListFolderOperator(AbmBaseOperator):
    """Create an account-list folder, or reuse the one of that name; XCom is the folder resource.

    :param folder_name: folder name (templated). Names need not be unique in the service, so with
        ``if_exists="reuse"`` (default) a re-run returns the existing folder (the oldest when several
        share the name) instead of creating another; ``"create"`` always creates; ``"fail"`` fails
        the task when one exists.
    :param folder_access: ``PUBLIC`` (default), ``READ_ONLY`` or ``FOLDER_ACCESS_UNSPECIFIED``; used
        only when creating (an existing folder's access is not changed, a difference is logged).
    :return: ``{"folderId", "displayName", "folderAccess"}``; the id is also pushed under the XCom
        key ``folder_id``. Connection and request settings: :class:`AbmBaseOperator`.
    """

    template_fields: Sequence[str] = ("folder_name", "folder_access")

    def __init__(
        self, *, folder_name: str, folder_access: str = "PUBLIC", if_exists: IfExists = "reuse", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        _check_if_exists(if_exists)
        if not is_deferred(folder_name):
            _check_text(folder_name, "folder_name")
        if not is_deferred(folder_access):
            _check_folder_access(folder_access)
        self.folder_name = folder_name
        self.folder_access = folder_access
        self.if_exists = if_exists

    def execute(self, context: Context) -> dict[str, Any]:
        """The hook's create-or-reuse, with this task's policy."""
        _fail_on_bad_argument(_check_text, self.folder_name, "folder_name")
        _fail_on_bad_argument(_check_folder_access, self.folder_access, "folder_access")
        try:
            folder = self.hook.ensure_folder(self.folder_name, self.folder_access, self.if_exists)
        except AbmApiError as err:
            _raise_conflict(err)
            fail_if_final(err, f"Folder {self.folder_name!r}")
            raise
        self.push(context, folder_id=folder["folderId"])
        return folder


class CreateAccountListOperator(AbmBaseOperator):
    """Create an account list in a folder, or reuse the list of that name there; XCom is the list.

    :param list_name: list name (templated); matched exactly, within ``folder_id`` only.
    :param folder_id: folder to create the list in (templated; typically
        ``create_folder.output["folder_id"]``).
    :param if_exists: ``"reuse"`` (default), ``"create"`` or ``"fail"``, as for the folder operator.
    :return: ``{"listId", "listName", "folderId"}``; the id is also pushed under the XCom key
        ``list_id``. Connection and request settings: :class:`AbmBaseOperator`.
    """

    template_fields: Sequence[str] = ("list_name", "folder_id")

    def __init__(
        self, *, list_name: str, folder_id: str, if_exists: IfExists = "reuse", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        _check_if_exists(if_exists)
        if not is_deferred(list_name):
            _check_text(list_name, "list_name")
        if not is_deferred(folder_id):
            _check_text(folder_id, "folder_id")
        self.list_name = list_name
        self.folder_id = folder_id
        self.if_exists = if_exists

    def execute(self, context: Context) -> dict[str, Any]:
        """The hook's create-or-reuse, within the folder."""
        _fail_on_bad_argument(_check_text, self.list_name, "list_name")
        _fail_on_bad_argument(_check_text, self.folder_id, "folder_id")
        try:
            found = self.hook.ensure_list(self.list_name, self.folder_id, self.if_exists)
        except AbmApiError as err:
            _raise_conflict(err)
            fail_if_final(err, f"List {self.list_name!r} in folder {self.folder_id!r}")
            raise
        self.push(context, list_id=found["listId"])
        return found


class _DefaultLimit(int):
    """The default ``max_rejected=0``, told apart from an explicit 0 (see ``max_rejected_fraction``)."""


_DEFAULT_MAX_REJECTED: int = _DefaultLimit(0)


def _fraction_alias(value: Any) -> float | None:
    """The deprecated ``max_rejected_fraction`` as a ``max_rejected`` value.

    It took a share in ``[0, 1]``; ``1`` tolerated every row, which is ``None`` now.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ValueError(f"max_rejected_fraction must be between 0 and 1, or None; got {value!r}")
    return None if value == 1 else float(value)


class _ListMembershipOperator(AbmBaseOperator):
    """Shared streaming, validation, rejects and summary logic of the add and remove operators."""

    template_fields: Sequence[str] = (
        "list_id",
        "accounts_path",
        "file_format",
        "sql",
        "sql_conn_id",
        "parameters",
        "column_map",
        "default_crm_org_id",
        "rejects_path",
        "rejects_base",
    )
    template_ext: Sequence[str] = (".sql",)
    template_fields_renderers: ClassVar[dict[str, str]] = ACCOUNT_SOURCE_RENDERERS
    ui_color = ACCOUNT_LISTS_COLOR

    #: Verb used in logs and messages.
    action: ClassVar[str] = ""
    #: Fields sent to the API for each account.
    api_fields: ClassVar[tuple[str, ...]] = API_FIELDS
    #: Counters returned in the XCom summary, in order.
    summary_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        *,
        list_id: str,
        accounts: Iterable[Mapping[str, Any]] | Any | None = None,
        accounts_path: str | ObjectStoragePath | None = None,
        file_format: str | None = None,
        sql: str | None = None,
        sql_conn_id: str | None = None,
        parameters: Mapping[str, Any] | Sequence[Any] | None = None,
        sql_hook_params: Mapping[str, Any] | None = None,
        column_map: Mapping[str, str] | None = None,
        default_crm_type: str | None = None,
        default_crm_org_id: str | None = None,
        batch_size: int = MAX_BATCH_SIZE,
        max_rejected: Limit = _DEFAULT_MAX_REJECTED,
        max_not_found: Limit = None,
        max_rejected_fraction: float | None = None,
        on_limit: OnLimit | None = None,
        rejects_path: str | ObjectStoragePath | None = None,
        rejects_base: str | ObjectStoragePath | None = None,
        progress_interval: float = 5.0,
        max_in_flight: int = 2,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        given = [
            name
            for name, value in (("accounts", accounts), ("accounts_path", accounts_path), ("sql", sql))
            if value is not None
        ]
        if len(given) != 1:
            raise ValueError(
                f"{type(self).__name__} needs exactly one of accounts, accounts_path or sql "
                f"(with sql_conn_id); got {given or 'none'}"
            )
        if sql is not None and not sql_conn_id:
            raise ValueError("sql needs sql_conn_id (any common-sql connection)")
        if sql is None and sql_conn_id is not None:
            raise ValueError("sql_conn_id is only used with sql")
        if parameters is not None and sql is None:
            raise ValueError("parameters are only used with sql")
        if file_format is not None and accounts_path is None:
            raise ValueError("file_format is only used with accounts_path")
        if accounts is not None and isinstance(accounts, (str, bytes, Mapping)):
            raise ValueError(
                "accounts must be an iterable of account mappings or an XComArg, "
                f"not a {type(accounts).__name__}"
            )
        check_batch_size(batch_size)
        if max_rejected_fraction is not None:
            if max_rejected is not _DEFAULT_MAX_REJECTED and max_rejected is not None:
                raise ValueError(
                    "give max_rejected (an int count or a float fraction), not both max_rejected and "
                    "the deprecated max_rejected_fraction"
                )
            max_rejected = _fraction_alias(max_rejected_fraction)
            self._deprecated("max_rejected_fraction is deprecated, use max_rejected=<fraction>")
        max_rejected = check_limit(max_rejected, "max_rejected")
        max_not_found = check_limit(max_not_found, "max_not_found")
        if on_limit is not None:
            if on_limit not in ("fail", "warn"):
                raise ValueError(f"on_limit must be 'fail' or 'warn', got {on_limit!r}")
            self._deprecated(
                "on_limit is deprecated: a passed limit always fails the task; "
                "use max_rejected=None / max_not_found=None for no limit"
            )
        if default_crm_type is not None and default_crm_type not in KNOWN_CRM_TYPES:
            raise ValueError(f"default_crm_type must be one of {sorted(KNOWN_CRM_TYPES)}")
        if rejects_path is not None and rejects_base is not None:
            raise ValueError("give rejects_path (a file) or rejects_base (a folder), not both")
        if progress_interval <= 0:
            raise ValueError("progress_interval must be positive")
        check_in_flight(max_in_flight)
        if column_map is not None and isinstance(column_map, Mapping):
            normalise_column_map(column_map)
        if file_format is not None and "{{" not in str(file_format):
            detect_file_format("", file_format)
        elif accounts_path is not None and file_format is None and "{{" not in str(accounts_path):
            detect_file_format(str(accounts_path))
        if not is_deferred(list_id):
            _check_id(list_id, "list_id")
        self.list_id = list_id
        self.accounts = accounts
        self.accounts_path = accounts_path
        self.file_format = file_format
        self.sql = sql
        self.sql_conn_id = sql_conn_id
        self.parameters = parameters
        self.sql_hook_params = sql_hook_params
        self.column_map = column_map
        self.default_crm_type = default_crm_type
        self.default_crm_org_id = default_crm_org_id
        self.batch_size = batch_size
        self.max_rejected = max_rejected
        self.max_not_found = max_not_found
        self.on_limit: OnLimit = on_limit or "fail"
        self.rejects_path = rejects_path
        self.rejects_base = rejects_base
        self.progress_interval = progress_interval
        self.max_in_flight = max_in_flight
        # accounts is deliberately not a template field: rendering would run every account name
        # through Jinja (slow, and a name containing "{{" would be altered) and copy the whole list.
        # An XComArg still becomes an upstream dependency and is resolved in execute.
        if is_xcom_arg(accounts):
            from airflow.sdk.definitions.xcom_arg import XComArg

            XComArg.apply_upstream_relationship(self, accounts)

    def _send_all(
        self,
        batches: Iterator[list[tuple[dict[str, str], SourceRow]]],
        totals: dict[str, int],
        rejects: RejectsWriter,
        progress: RowProgress,
    ) -> None:
        """Send every batch, with up to ``max_in_flight`` requests open; count answers in order.

        Why concurrent: one request at a time leaves the service idle while the next batch is read
        and validated, and the worker idle while the service works; with a remote service the round
        trip, not either side's work, sets the pace. Adding and removing are idempotent and do not
        depend on order, so batches can travel side by side. Each sending thread has its own hook
        (and HTTP session); answers are counted and not-found accounts written here, in source order.
        A failed request stops the sync: requests not yet started are cancelled, open ones finish.
        When the source fails or a reject limit is passed, the batches already formed are still
        sent and counted first, exactly as a one-at-a-time sync would have sent them.
        """
        hooks = PerThread(self.get_hook)

        def send(batch: list[tuple[dict[str, str], SourceRow]]) -> AccountsResult:
            return self._send(hooks.get(), [account for account, _ in batch])

        try:
            for sent, result in in_order(send, batches, self.max_in_flight, f"abm-{self.action}"):
                self._count_batch(sent, result, totals, rejects, progress)
        finally:
            hooks.close()

    def _count_batch(
        self,
        batch: list[tuple[dict[str, str], SourceRow]],
        result: AccountsResult,
        totals: dict[str, int],
        rejects: RejectsWriter,
        progress: RowProgress,
    ) -> None:
        """Add one answer to the totals and write the accounts the service did not find."""
        totals["batches"] += 1
        totals["sent"] += result.sent
        totals["added"] += result.added
        totals["duplicates"] += result.duplicates
        totals["not_found"] += result.not_found_count
        if result.not_found:
            _write_not_found(rejects, batch, result.not_found)
        progress.maybe_log(totals)

    def _send(self, hook: AbmHook, accounts: list[dict[str, str]]) -> AccountsResult:
        """One request's worth of accounts; the hook splits further only if given more than a batch."""
        call = hook.add_accounts if self.action == "add" else hook.remove_accounts
        return call(self.list_id, accounts, batch_size=self.batch_size, keep_not_found=True)

    # -- shared ----------------------------------------------------------------------------------

    def build_source(self, context: Context) -> AccountSource:
        """The one configured source, with XComArg resolved and paths already rendered."""
        if self.accounts is not None:
            accounts: Any = self.accounts
            if is_xcom_arg(accounts):
                accounts = accounts.resolve(context)
            if accounts is None:
                raise AirflowFailException("accounts resolved to None (the upstream XCom is empty)")
            if is_table(accounts):
                return TableSource(accounts, read_batch_size=self.batch_size)
            if isinstance(accounts, (str, bytes, Mapping)) or not isinstance(accounts, Iterable):
                raise AirflowFailException(
                    f"accounts must be an iterable of account mappings, got {type(accounts).__name__}"
                )
            return IterableSource(accounts)
        if self.accounts_path is not None:
            try:  # a rendered path or format that does not name CSV or Parquet: final
                return open_file_source(self.accounts_path, self.file_format, read_batch_size=self.batch_size)
            except ValueError as err:
                raise AirflowFailException(str(err)) from err
        assert self.sql is not None and self.sql_conn_id is not None
        return SqlSource(
            self.sql,
            self.sql_conn_id,
            parameters=self.parameters,
            hook_params=self.sql_hook_params,
            fetch_size=self.batch_size,
        )

    def rejects_target(self, context: Context) -> ObjectStoragePath:
        """The rejects file: ``rejects_path`` as given, else keyed by dag/run/task/try under a base."""
        if self.rejects_path is not None:
            return as_storage_path(self.rejects_path)
        return task_rejects_location(self.rejects_base, context, self)

    def _deprecated(self, message: str) -> None:
        # Airflow's operator metaclass swaps this module's ``warnings`` for one that adds 2 to the
        # stacklevel (to skip its __init__ wrapper), so 3 points at the DAG line making the operator.
        warnings.warn(f"{type(self).__name__}: {message}", DeprecationWarning, stacklevel=3)

    def _check_limit(self, count: int, limit: Limit, **kwargs: Any) -> bool:
        """Fail past ``limit`` (:func:`~abm_provider.common.rejects.check_rejects`); tell if it was passed.

        With the deprecated ``on_limit="warn"`` a passed limit is only logged.
        """
        try:
            check_rejects(count, limit, **kwargs)
        except TooManyRejects as err:
            if self.on_limit != "warn":
                raise
            self.log.warning("%s (on_limit='warn': continuing)", err)
            return True
        return False

    def execute(self, context: Context) -> dict[str, Any]:
        """Stream, validate, batch and send; write rejects as they appear; return a summary."""
        _fail_on_bad_argument(_check_id, self.list_id, "list_id")
        try:  # column_map and default_crm_org_id are templated: rendered, they are final
            validator = AccountValidator(
                self.column_map,
                fields=self.api_fields,
                default_crm_type=self.default_crm_type,
                default_crm_org_id=self.default_crm_org_id,
            )
        except (TypeError, ValueError) as err:
            raise AirflowFailException(str(err)) from err
        source = self.build_source(context)
        target = self.rejects_target(context)
        totals = {"rows": 0, "sent": 0, "added": 0, "duplicates": 0, "not_found": 0, "batches": 0}
        totals["rejected"] = 0
        examples: list[str] = []
        warned_count = False
        progress = RowProgress(self.log, f"{self.action} list {self.list_id}", self.progress_interval)
        self.log.info(
            "%s accounts %s list %s from %s; rejects go to %s",
            self.action.capitalize(),
            "to" if self.action == "add" else "from",
            self.list_id,
            source.description,
            target,
        )

        with RejectsWriter(target) as rejects:

            def on_invalid(invalid: InvalidRow) -> None:
                nonlocal warned_count
                row = invalid.row
                totals["rejected"] += 1
                _write_row(rejects, invalid.reason, row)
                if len(examples) < 2:
                    examples.append(describe_reject(invalid.reason, row.row_number, row.line))
                if not warned_count and isinstance(self.max_rejected, int):
                    # A count is checked as soon as it is passed: a wrong mapping fails in the first
                    # rows, not after sending a million of them.
                    warned_count = self._check_limit(
                        totals["rejected"],
                        self.max_rejected,
                        total=row.row_number,
                        final=False,
                        examples=examples,
                        rejects_path=target,
                    )

            def counted(rows: Iterable[SourceRow]) -> Iterable[SourceRow]:
                for row in rows:
                    totals["rows"] += 1
                    yield row

            with source.open() as opened:
                try:
                    validator.check_columns(opened.columns, source.description)
                except ValueError as err:
                    raise AirflowFailException(str(err)) from err
                batches = iter_batches(counted(opened.rows), validator, self.batch_size, on_invalid)
                with fewer_collections():
                    try:
                        self._send_all(batches, totals, rejects, progress)
                    except AbmApiError as err:
                        fail_if_final(err, f"{self.action} accounts on list {self.list_id!r}")
                        raise

        progress.log_now(totals)
        rejects_path = str(target) if rejects.written else None
        totals["removed"] = totals["added"]
        summary: dict[str, Any] = {"list_id": self.list_id, **{k: totals[k] for k in self.summary_keys}}
        summary["rejects_path"] = rejects_path
        elapsed = progress.elapsed()
        self.log.info(
            "%s done in %.1fs (%.0f accounts/s): %s",
            self.action.capitalize(),
            elapsed,
            totals["sent"] / max(elapsed, 1e-9),
            summary,
        )
        if totals["rejected"] or totals["not_found"]:
            self.log.warning(
                "%d invalid rows and %d not-found accounts written to %s",
                totals["rejected"],
                totals["not_found"],
                rejects_path,
            )
        if not warned_count:
            self._check_limit(
                totals["rejected"],
                self.max_rejected,
                total=totals["rows"],
                examples=examples,
                rejects_path=rejects_path,
            )
        self._check_limit(
            totals["not_found"],
            self.max_not_found,
            total=totals["rows"],
            name="max_not_found",
            what="accounts were not found by the service",
            rejects_path=rejects_path,
        )
        return summary


def _write_row(rejects: RejectsWriter, reason: str, row: SourceRow) -> None:
    """One source row to the rejects file: its number, its CSV line if any, the row as JSON."""
    rejects.write(reason, record=row.row_number, line=row.line, raw=raw_json(row.data))


def _write_not_found(
    rejects: RejectsWriter,
    batch: list[tuple[dict[str, str], SourceRow]],
    not_found: Sequence[Mapping[str, Any]],
) -> None:
    """Write each account the service did not know with the source row it came from.

    The service echoes accounts, not row numbers, so they are matched back by id within the batch
    (bounded by the batch size); an id that cannot be matched is still written, from the response.
    """
    by_id: dict[str, list[SourceRow]] = {}
    for account, row in batch:
        by_id.setdefault(account["id"], []).append(row)
    reason = "not found: the service does not know this account (accountsNotFound)"
    for item in not_found:
        rows = by_id.get(str(item.get("id", "")))
        if rows:
            _write_row(rejects, reason, rows.pop(0))
        else:
            rejects.write(reason, raw=raw_json(dict(item)))


class AddAccountsToListOperator(_ListMembershipOperator):
    """Add accounts to a list from an iterable/XCom, a CSV or Parquet file, or a SQL query.

    Exactly one source: ``accounts`` (an iterable of mappings, a pandas DataFrame, a pyarrow Table or
    an ``XComArg``), ``accounts_path``
    (``.csv`` or ``.parquet``, optionally compressed, local or any ``ObjectStoragePath`` such as
    ``s3://``), or ``sql`` with ``sql_conn_id`` (any common-sql connection; ``.sql`` files are
    templates). The source is streamed in batches of at most ``batch_size`` (max 1000), so memory
    stays flat whatever its size.

    Each row is validated before it is sent (id present, a string, no whitespace, within
    ``DEFAULT_MAX_FIELD_LENGTH``; name/crmOrgId strings; crmType known). Only ``id`` is required:
    the service fills a missing ``crmOrgId`` with the customer's CRM org and a missing ``crmType``
    with ``SALESFORCE``, so a row is sent with what it has (``default_crm_org_id`` and
    ``default_crm_type`` fill the gaps here instead, when set).
    Invalid rows and accounts the service reports as not found are written with a reason to a CSV
    rejects file (the format of :mod:`abm_provider.common.rejects`, shared with the warehouse loader:
    ``line`` of a CSV source, ``record`` number, ``reason``, ``raw`` row as JSON): ``rejects_path``
    if given, else ``<rejects_base or [abm] state_dir>/rejects/<dag_id>/<run_id>/<task_id>/try_<n>.csv``.

    :param list_id: list to add to (templated; typically ``create_list.output["list_id"]``).
    :param column_map: ``{api_field: source_column}`` for ``id``, ``name``, ``crmOrgId``, ``crmType``.
    :param max_rejected: invalid rows tolerated: an int is a count, checked as each invalid row is met
        so the task fails as soon as there are more (default 0); a float in [0, 1) is a share of all
        rows, checked at the end; ``None``: no limit. Past it the task fails without retries
        (:class:`~abm_provider.common.rejects.TooManyRejects`), the rejects written so far kept.
    :param max_not_found: not-found accounts tolerated, as a count or a share of all rows like
        ``max_rejected`` (default ``None``: no limit); checked at the end.
    :param max_rejected_fraction: deprecated, use ``max_rejected=<float>``. Giving both fails.
    :param on_limit: deprecated. ``"warn"`` only logs a passed limit; ``"fail"`` is what happens
        without it. For no limit, set ``max_rejected=None`` and ``max_not_found=None``.
    :param progress_interval: seconds between progress log lines.
    :param max_in_flight: requests open at once (default 2, at most 8; 1 sends one at a time).
        Batches are independent, so a second request hides the round trip; raise it for a distant
        service, lower it to 1 if the service's rate limit keeps answering 429.
    :return: ``{"list_id", "rows", "sent", "added", "duplicates", "not_found", "rejected",
        "batches", "rejects_path"}``; ``rejected`` counts invalid rows, ``rejects_path`` is ``None``
        when nothing was written.
    """

    action = "add"
    api_fields = API_FIELDS

    summary_keys = ("rows", "sent", "added", "duplicates", "not_found", "rejected", "batches")


class RemoveAccountsFromListOperator(_ListMembershipOperator):
    """Remove accounts from a list; same sources, validation, rejects and limits as the add operator.

    Only ``id``, ``crmOrgId`` and ``crmType`` are sent (the remove request takes no name).

    :return: ``{"list_id", "rows", "sent", "removed", "not_found", "rejected", "batches",
        "rejects_path"}``; ``removed`` counts accounts the service reports as removed.
    """

    action = "remove"
    api_fields = REMOVE_FIELDS

    summary_keys = ("rows", "sent", "removed", "not_found", "rejected", "batches")


# The sync operator lives in its own module (it has its own engine); it is part of this module's API.
from abm_provider.operators.list_sync import AccountListSyncOperator  # noqa: E402

__all__ = [
    "AccountListSyncOperator",
    "AddAccountsToListOperator",
    "CreateAccountListFolderOperator",
    "CreateAccountListOperator",
    "RemoveAccountsFromListOperator",
]
