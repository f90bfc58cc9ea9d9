"""Adding accounts to a list, or removing them, from any source: the run behind the membership operators.

The API has no way to say which row an answer is about, answers unknown accounts inside a 200
response, and takes at most 1000 accounts a request. So a run streams its source, validates every
row before it is sent, sends batches with a few requests open at once, and writes every row that
was not sent, or that the service did not know, to one rejects file: nothing disappears silently,
and the result holds only counts.

``AddAccountsToListOperator`` and ``RemoveAccountsFromListOperator``
(:mod:`abm_provider.operators.account_lists`) turn their rendered arguments into
:class:`MembershipSettings`, a source (:class:`SourceArgs`) and a rejects path, and the
:class:`MembershipResult` into their XCom value. Nothing here needs an Airflow context, so the run
can be driven and tested on its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

from airflow.sdk import ObjectStoragePath

from abm_provider.accounts.sources import (
    AccountSource,
    IterableSource,
    SqlSource,
    TableSource,
    is_table,
    open_file_source,
)
from abm_provider.accounts.validation import (
    API_FIELDS,
    MAX_BATCH_SIZE,
    NOT_FOUND_REASON,
    REMOVE_FIELDS,
    AccountValidator,
    InvalidRow,
    SourceRow,
    iter_batches,
)
from abm_provider.common.collector import fewer_collections
from abm_provider.common.concurrency import PerThread, in_order
from abm_provider.common.progress import RowProgress
from abm_provider.common.rejects import (
    Limit,
    RejectsWriter,
    check_rejects,
    describe_reject,
    raw_json,
)
from abm_provider.compat import AirflowFailException

if TYPE_CHECKING:
    from abm_provider.hooks.abm import AbmHook
    from abm_provider.hooks.results import AccountsResult

Action = Literal["add", "remove"]
#: Valid accounts, each with the source row it came from, so a not-found answer can point back at it.
Batch = list[tuple[dict[str, str], SourceRow]]

#: Fields each action sends: the remove request takes no name.
FIELDS: dict[str, tuple[str, ...]] = {"add": API_FIELDS, "remove": REMOVE_FIELDS}
#: What a run counts; :class:`MembershipResult` has a field for each.
_COUNTS = ("rows", "sent", "applied", "duplicates", "not_found", "rejected", "batches")
#: Invalid rows a limit message quotes, so the error alone shows what is wrong with the source.
_EXAMPLES = 2


@dataclass(frozen=True)
class MembershipSettings:
    """What one add or remove run does, with every value rendered and checked by the operator.

    :param action: ``"add"`` or ``"remove"``.
    :param list_id: the list, already checked as one URL path segment.
    :param column_map: ``{api_field: source_column}``; ``None`` reads the API's own field names.
    :param default_crm_type: / ``default_crm_org_id``: fill what a row lacks; ``None`` leaves it to
        the service.
    :param batch_size: accounts per request (at most 1000).
    :param max_rejected: / ``max_not_found``: limits as :mod:`abm_provider.common.rejects` defines them.
    :param progress_interval: seconds between progress lines.
    :param max_in_flight: requests open at once.
    """

    action: Action
    list_id: str
    column_map: Mapping[str, str] | None = None
    default_crm_type: str | None = None
    default_crm_org_id: str | None = None
    batch_size: int = MAX_BATCH_SIZE
    max_rejected: Limit = 0
    max_not_found: Limit = None
    progress_interval: float = 5.0
    max_in_flight: int = 2

    @classmethod
    def of(cls, holder: Any) -> MembershipSettings:
        """The settings from an object that has each as an attribute of the same name (the operator)."""
        return cls(**{spec.name: getattr(holder, spec.name) for spec in fields(cls)})


@dataclass(frozen=True)
class MembershipResult:
    """The counts of a finished run; ``rejects_path`` is ``None`` when nothing was refused.

    ``applied`` counts the accounts the service reports as added (add) or removed (remove);
    ``duplicates`` (accounts already on the list) only an add can have.
    """

    action: Action
    list_id: str
    rows: int
    sent: int
    applied: int
    duplicates: int
    not_found: int
    rejected: int
    batches: int
    rejects_path: str | None

    def summary(self) -> dict[str, Any]:
        """The operators' XCom value: the counts under the action's own names, never an account."""
        counts: dict[str, Any] = {"list_id": self.list_id, "rows": self.rows, "sent": self.sent}
        if self.action == "add":
            counts.update(added=self.applied, duplicates=self.duplicates)
        else:
            counts["removed"] = self.applied
        counts.update(not_found=self.not_found, rejected=self.rejected, batches=self.batches)
        counts["rejects_path"] = self.rejects_path
        return counts


@dataclass(frozen=True)
class SourceArgs:
    """The membership operators' source: exactly one of ``accounts`` (an iterable of mappings, a pandas
    DataFrame or a pyarrow Table; an XComArg resolved before :meth:`open`), ``accounts_path`` (CSV or
    Parquet, ``file_format`` when the name does not tell), or ``sql`` over ``sql_conn_id`` (with
    ``parameters`` and the hook's ``sql_hook_params``); ``batch_size`` rows are read at a time."""

    accounts: Any = None
    accounts_path: str | ObjectStoragePath | None = None
    file_format: str | None = None
    sql: str | None = None
    sql_conn_id: str | None = None
    parameters: Mapping[str, Any] | Sequence[Any] | None = None
    sql_hook_params: Mapping[str, Any] | None = None
    batch_size: int = MAX_BATCH_SIZE

    @classmethod
    def of(cls, holder: Any, **given: Any) -> SourceArgs:
        """The arguments from an object that has each as an attribute of the same name (the operator);
        ``given`` wins (a resolved ``accounts``)."""
        return cls(**{spec.name: getattr(holder, spec.name) for spec in fields(cls)} | given)

    def check(self, owner: str) -> None:
        """Raise ``ValueError`` unless exactly one source is given, with only the arguments it uses.

        An argument that belongs to another source (``parameters`` without ``sql``) would be silently
        ignored, so it is refused instead; ``owner`` (the operator's class name) starts the message.
        """
        accounts, sql = self.accounts, self.sql
        given = [
            name
            for name, value in (("accounts", accounts), ("accounts_path", self.accounts_path), ("sql", sql))
            if value is not None
        ]
        if len(given) != 1:
            raise ValueError(
                f"{owner} needs exactly one of accounts, accounts_path or sql (with sql_conn_id); "
                f"got {given or 'none'}"
            )
        if sql is not None and not self.sql_conn_id:
            raise ValueError("sql needs sql_conn_id (any common-sql connection)")
        if sql is None and self.sql_conn_id is not None:
            raise ValueError("sql_conn_id is only used with sql")
        if self.parameters is not None and sql is None:
            raise ValueError("parameters are only used with sql")
        if self.file_format is not None and self.accounts_path is None:
            raise ValueError("file_format is only used with accounts_path")
        if accounts is not None and isinstance(accounts, (str, bytes, Mapping)):
            kind = type(accounts).__name__
            raise ValueError(f"accounts must be an iterable of account mappings or an XComArg, not a {kind}")

    def open(self) -> AccountSource:
        """The one source given, from rendered values; a value no retry can fix fails without retries."""
        accounts, batch_size = self.accounts, self.batch_size
        if accounts is not None:
            if is_table(accounts):
                return TableSource(accounts, read_batch_size=batch_size)
            if isinstance(accounts, (str, bytes, Mapping)) or not isinstance(accounts, Iterable):
                raise AirflowFailException(
                    f"accounts must be an iterable of account mappings, got {type(accounts).__name__}"
                )
            return IterableSource(accounts)
        if self.accounts_path is not None:
            try:  # a rendered path or format that does not name CSV or Parquet: final
                return open_file_source(self.accounts_path, self.file_format, read_batch_size=batch_size)
            except ValueError as err:
                raise AirflowFailException(str(err)) from err
        if self.sql is None or self.sql_conn_id is None:
            raise ValueError("give accounts, accounts_path, or sql with sql_conn_id")
        return SqlSource(
            self.sql,
            self.sql_conn_id,
            parameters=self.parameters,
            hook_params=self.sql_hook_params,
            fetch_size=batch_size,
        )


class MembershipRun:
    """One add or remove run: stream, validate, batch and send; write rejects as they appear.

    :param settings: what to do (:class:`MembershipSettings`).
    :param new_hook: makes a hook; each sending thread gets its own, since a hook's HTTP session is
        not shared between threads.
    :param log: where progress, the summary and warnings go (the task's log in Airflow).

    The validator is made here, before any source is read, so a wrong ``column_map`` or default
    fails the task (without retries: its values are final) before anything is sent.
    """

    def __init__(
        self, settings: MembershipSettings, new_hook: Callable[[], AbmHook], log: logging.Logger | Any
    ) -> None:
        self.settings = settings
        self.new_hook = new_hook
        self.log = log
        try:
            self.validator = AccountValidator(
                settings.column_map,
                fields=FIELDS[settings.action],
                default_crm_type=settings.default_crm_type,
                default_crm_org_id=settings.default_crm_org_id,
            )
        except (TypeError, ValueError) as err:
            raise AirflowFailException(str(err)) from err
        self._counts: dict[str, int] = {}
        self._examples: list[str] = []

    def run(self, source: AccountSource, rejects_path: ObjectStoragePath) -> MembershipResult:
        """Send every valid row of ``source``; fail past a reject limit; return the counts.

        An ``AbmApiError`` from the service is raised as it is: whether a retry can fix it is the
        caller's decision. The rejects written before any failure are kept.
        """
        settings = self.settings
        self._counts = dict.fromkeys(_COUNTS, 0)
        self._examples = []
        progress = RowProgress(
            self.log, f"{settings.action} list {settings.list_id}", settings.progress_interval
        )
        self.log.info(
            "%s accounts %s list %s from %s; rejects go to %s",
            settings.action.capitalize(),
            "to" if settings.action == "add" else "from",
            settings.list_id,
            source.description,
            rejects_path,
        )
        with RejectsWriter(rejects_path) as rejects, source.open() as opened:
            try:
                self.validator.check_columns(opened.columns, source.description)
            except ValueError as err:
                raise AirflowFailException(str(err)) from err
            on_invalid = self._on_invalid(rejects, rejects_path)
            batches = iter_batches(
                self._counted(opened.rows), self.validator, settings.batch_size, on_invalid
            )
            with fewer_collections():
                self._send_all(batches, rejects, progress)
        progress.log_now(self._counts)
        result = MembershipResult(
            settings.action,
            settings.list_id,
            **self._counts,
            rejects_path=str(rejects_path) if rejects.written else None,
        )
        self._finish(result, progress)
        return result

    def _counted(self, rows: Iterable[SourceRow]) -> Iterator[SourceRow]:
        for row in rows:
            self._counts["rows"] += 1
            yield row

    def _on_invalid(
        self, rejects: RejectsWriter, rejects_path: ObjectStoragePath
    ) -> Callable[[InvalidRow], None]:
        """Write an invalid row as it is met, and fail as soon as a count limit is passed.

        A count is checked at once so a wrong mapping fails in the first rows, not after sending a
        million of them; a share of all rows can only be known at the end (:meth:`_finish`).
        """

        def on_invalid(invalid: InvalidRow) -> None:
            row = invalid.row
            self._counts["rejected"] += 1
            _write_row(rejects, invalid.reason, row)
            if len(self._examples) < _EXAMPLES:
                self._examples.append(describe_reject(invalid.reason, row.row_number, row.line))
            limit = self.settings.max_rejected
            if isinstance(limit, int):
                check_rejects(
                    self._counts["rejected"],
                    limit,
                    total=row.row_number,
                    final=False,
                    examples=self._examples,
                    rejects_path=rejects_path,
                )

        return on_invalid

    def _send_all(self, batches: Iterator[Batch], rejects: RejectsWriter, progress: RowProgress) -> None:
        """Send every batch, with up to ``max_in_flight`` requests open; count answers in order.

        Why concurrent: one request at a time leaves the service idle while the next batch is read
        and validated, and the worker idle while the service works; with a remote service the round
        trip, not either side's work, sets the pace. Adding and removing are idempotent and do not
        depend on order, so batches can travel side by side. Answers are counted and not-found
        accounts written here, in source order. A failed request stops the run: requests not yet
        started are cancelled, open ones finish. When the source fails or a reject limit is passed,
        the batches already formed are still sent and counted first, exactly as a one-at-a-time run
        would have sent them.
        """
        settings = self.settings
        hooks = PerThread(self.new_hook)

        def send(batch: Batch) -> AccountsResult:
            # One request's worth; the hook splits further only if given more than a batch.
            return hooks.get().change_membership(
                settings.action,
                settings.list_id,
                [account for account, _ in batch],
                batch_size=settings.batch_size,
                keep_not_found=True,
            )

        try:
            for batch, answer in in_order(send, batches, settings.max_in_flight, f"abm-{settings.action}"):
                self._count_batch(batch, answer, rejects)
                progress.maybe_log(self._counts)
        finally:
            hooks.close()

    def _count_batch(self, batch: Batch, answer: AccountsResult, rejects: RejectsWriter) -> None:
        """Add one answer to the counts and write the accounts the service did not find."""
        counts = self._counts
        counts["batches"] += 1
        counts["sent"] += answer.sent
        counts["applied"] += answer.applied
        counts["duplicates"] += answer.duplicates
        counts["not_found"] += answer.not_found_count
        if answer.not_found:
            _write_not_found(rejects, batch, answer.not_found)

    def _finish(self, result: MembershipResult, progress: RowProgress) -> None:
        """Log the summary, warn of rejects, and fail past a limit only the whole run can judge."""
        summary = result.summary()
        elapsed = progress.elapsed()
        self.log.info(
            "%s done in %.1fs (%.0f accounts/s): %s",
            result.action.capitalize(),
            elapsed,
            result.sent / max(elapsed, 1e-9),
            summary,
        )
        if result.rejected or result.not_found:
            self.log.warning(
                "%d invalid rows and %d not-found accounts written to %s",
                result.rejected,
                result.not_found,
                result.rejects_path,
            )
        # A count limit passed was raised as it was met (:meth:`_on_invalid`); a share is judged here.
        check_rejects(
            result.rejected,
            self.settings.max_rejected,
            total=result.rows,
            examples=self._examples,
            rejects_path=result.rejects_path,
        )
        check_rejects(
            result.not_found,
            self.settings.max_not_found,
            total=result.rows,
            name="max_not_found",
            what="accounts were not found by the service",
            rejects_path=result.rejects_path,
        )


def _write_row(rejects: RejectsWriter, reason: str, row: SourceRow) -> None:
    """One source row to the rejects file: its number, its CSV line if any, the row as JSON."""
    rejects.write(reason, record=row.row_number, line=row.line, raw=raw_json(row.data))


def _write_not_found(rejects: RejectsWriter, batch: Batch, not_found: Sequence[Mapping[str, Any]]) -> None:
    """Write each account the service did not know with the source row it came from.

    The service echoes accounts, not row numbers, so they are matched back by id within the batch
    (bounded by the batch size); an id that cannot be matched is still written, from the response.
    """
    by_id: dict[str, list[SourceRow]] = {}
    for account, row in batch:
        by_id.setdefault(account["id"], []).append(row)
    for item in not_found:
        rows = by_id.get(str(item.get("id", "")))
        if rows:
            _write_row(rejects, NOT_FOUND_REASON, rows.pop(0))
        else:
            rejects.write(NOT_FOUND_REASON, raw=raw_json(dict(item)))
