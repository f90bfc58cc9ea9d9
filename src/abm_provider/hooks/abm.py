"""Hooks for the Account Lists v2 and Export Jobs v1 API: ``AbmHook`` (sync) and ``AbmAsyncHook``.

The hooks own talking to the service: one typed method per endpoint, pagination, batching,
create-or-reuse (``ensure_*``), streaming downloads with resume, errors and retries. Every request
goes through one pipeline (:mod:`._pipeline`); only the transport differs. They subclass ``BaseHook``,
not ``HttpHook``, whose ``run()`` would reach the network around the key's origin binding, the
redaction and the bounds. The key goes only to the API's origin and never into a log or an error.
``AbmAsyncHook`` lives in :mod:`._async` and is imported from here, its public path.
"""

from __future__ import annotations

import email.utils
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from itertools import islice
from typing import Any, BinaryIO, TypedDict, Unpack

import requests
import tenacity

from abm_provider.common.arguments import check_choice, check_text
from abm_provider.common.urls import path_segment
from abm_provider.exceptions import AbmApiError
from abm_provider.hooks._async import AbmAsyncHook
from abm_provider.hooks._base import AbmHookBase
from abm_provider.hooks._download import Download
from abm_provider.hooks._paging import Pager
from abm_provider.hooks._pipeline import Answer, Attempts, Call, ErrorBody, Pipeline
from abm_provider.hooks._responses import clip
from abm_provider.hooks._transports import RequestsTransport
from abm_provider.hooks.connection_form import ui_field_behaviour
from abm_provider.hooks.endpoints import (
    EXPORT_JOBS_PATH,
    FOLDERS_PATH,
    IF_EXISTS,
    JOB_IF_EXISTS,
    LISTS_PATH,
    MAX_ACCOUNTS_PER_REQUEST,
    IfExists,
    JobIfExists,
    account_payloads,
    check_batch_size,
    create_folder_call,
    create_job_call,
    create_list_call,
    folder_resource,
    folders_call,
    is_list,
    list_resource,
    lists_call,
)
from abm_provider.hooks.results import AccountsResult, BatchResult, DownloadResult, batch_result
from abm_provider.hooks.settings import AbmSettings, connection_name, is_test_copy

__all__ = ["MAX_ACCOUNTS_PER_REQUEST", "AbmAsyncHook", "AbmHook"]

#: A connection test answers in the UI, so it makes one short attempt instead of the full budget.
_TEST_CONNECTION_TIMEOUT = 15.0
#: Longest part of an unusable ``Date`` header a warning quotes.
_DATE_QUOTE_CHARS = 60


def _http_date(value: str | None) -> datetime | None:
    """An HTTP ``Date`` header as an aware UTC datetime in whole seconds; ``None`` if it is not one.

    A date without a zone (``-0000``) is read as UTC, which is what HTTP dates are.
    """
    if value is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return when.astimezone(UTC).replace(microsecond=0)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


class MembershipOptions(TypedDict, total=False):
    """The options of :meth:`AbmHook.change_membership` that :meth:`AbmHook.add_accounts` and
    :meth:`AbmHook.remove_accounts` pass on (its signature has their defaults)."""

    batch_size: int
    on_batch: Callable[[BatchResult], None] | None
    keep_not_found: bool


class AbmHook(AbmHookBase[Iterator[dict[str, Any]]]):
    """Sync client for the ABM API, for operators and sensors running in workers."""

    hook_name = "ABM (Account Lists and Exports API)"

    def __init__(self, abm_conn_id: str = AbmHookBase.default_conn_name, **limits: Any) -> None:
        super().__init__(abm_conn_id, **limits)
        self._transport: RequestsTransport | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Connection form for Airflow versions that read it from the hook (3.3 reads provider info)."""
        return ui_field_behaviour()

    # -- connection and pipeline ------------------------------------------------------------------

    @property
    def pipeline(self) -> Pipeline:
        """The connection's request pipeline, read once."""
        if self._pipeline is None:
            self._settings_from(self.get_connection(self.abm_conn_id))
        assert self._pipeline is not None
        return self._pipeline

    @property
    def settings(self) -> AbmSettings:
        """The connection's base URL, key, TLS and request bounds."""
        return self.pipeline.settings

    @property
    def transport(self) -> RequestsTransport:
        if self._transport is None:
            self._transport = RequestsTransport(self.settings)
        return self._transport

    def get_conn(self) -> requests.Session:
        """The ``requests`` session every call goes through (keep-alive, TLS per the connection)."""
        return self.transport.session

    def close(self) -> None:
        """Close the pooled connections (the hook reopens them if used again)."""
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    # -- the request loop -------------------------------------------------------------------------

    def _call(self, call: Call) -> dict[str, Any]:
        """One API call under the pipeline's retry policy; the answer's JSON object."""
        return self._exchange(call)[0]

    def _exchange(self, call: Call) -> tuple[dict[str, Any], Answer | None]:
        """One API call under the pipeline's retry policy: the answer's JSON object and the
        :class:`Answer` it was read from, for the callers that need a header (:meth:`service_time`).

        After an attempt whose outcome is unknown, a create that reconciles (``Call.on_unknown``)
        lists what exists before it is sent again. The listing is read outside the attempt, with its
        own retries: its failure ends the call rather than spending the create's attempts. When the
        listing shows the create took effect, that item is the result and there is no answer (``None``).
        """
        pipe = self.pipeline
        attempts = Attempts(call.on_unknown, self.log)
        for attempt in tenacity.Retrying(**pipe.retrying(self.log, attempts)):
            if (look := attempts.look) is not None:
                made = attempts.found(self._paginate(look.listing, look.key))
                if made is not None:
                    return made, None
            with attempt:
                answer = self.transport.send(pipe.prepare(call))
                return pipe.interpret(call, answer), answer
        raise AssertionError("tenacity returns or raises")  # pragma: no cover

    def _paginate(self, call: Call, key: str, deadline: float | None = None) -> Iterator[dict[str, Any]]:
        """Every item of a listing, following ``nextPageToken`` through empty pages, within bounds."""
        pager = Pager(self.pipeline, call, key, deadline)
        next_call: Call | None = pager.call
        while next_call is not None:
            items, next_call = pager.read(self._call(next_call))
            yield from items

    def test_connection(self) -> tuple[bool, str]:
        """One authenticated read (a one-folder page); says whether the URL, TLS or the key failed.

        Each message names the base URL it tried, and the connection id only when it is the user's:
        the UI's Test button runs this under a random throwaway id (see ``connection_name``).
        """
        try:
            settings = self.settings
        except Exception as err:
            return False, f"Not tested: {err}"
        short = min(settings.limits.request_timeout, _TEST_CONNECTION_TIMEOUT)
        self._pipeline = Pipeline(settings.with_limits(max_attempts=1, request_timeout=short))
        of = "" if is_test_copy(self.abm_conn_id) else f" of {connection_name(self.abm_conn_id)}"
        try:
            self._call(folders_call(page_size=1))
        except AbmApiError as err:
            if err.http_status == 401:
                return False, f"{settings.base_url} refused the API key{of}: {err}"
            if err.http_status is None:
                return False, f"Could not reach {settings.base_url}: {err}"
            return False, f"{settings.base_url} answered with an error: {err}"
        finally:
            self._pipeline = Pipeline(settings)
            self.close()
        return True, f"Connected to {settings.base_url}: the API key{of} was accepted"

    def service_time(self) -> datetime:
        """The service's clock: the ``Date`` header of a one-folder page (the read
        :meth:`test_connection` makes), under the usual retry policy; aware UTC, whole seconds.

        The list sync retries the accounts the service did not find a day later, and that day is
        measured on the service's clock, so a worker whose own clock is skewed retries neither early
        nor late (the emulator serves ``Date`` from its emulated clock). A missing or unreadable
        ``Date`` falls back to this worker's clock, with one warning quoting the value (redacted and
        cut short): a day measured a little off is better than a sync that cannot run.
        """
        _, answer = self._exchange(folders_call(page_size=1))
        value = answer.headers.get("Date") if answer is not None else None
        when = _http_date(value)
        if when is not None:
            return when
        if value is None:
            self.log.warning("The service sent no Date header; using this worker's clock instead")
        else:
            quoted = clip(self.pipeline.redact(value), _DATE_QUOTE_CHARS)
            self.log.warning("The service's Date header %r is not a date; using this worker's clock", quoted)
        return datetime.now(UTC).replace(microsecond=0)

    # -- folders and lists --------------------------------------------------------------------------

    def iter_account_lists(
        self, folder_ids: Sequence[str] | None = None, page_size: int = 100
    ) -> Iterator[dict[str, Any]]:
        """All lists, or those of ``folder_ids``: ``{id, displayName, createTime, estimatedAccountsCount,
        folderId}`` each."""
        return self._paginate(lists_call(folder_ids, page_size), "lists")

    def create_folder(self, folder_name: str, folder_access: str = "PUBLIC") -> dict[str, Any]:
        """Create a folder (even if one of that name exists); ``{folderId, displayName, folderAccess}``."""
        return self.ensure_folder(folder_name, folder_access, if_exists="create")

    def ensure_folder(
        self, folder_name: str, folder_access: str = "PUBLIC", if_exists: IfExists = "reuse"
    ) -> dict[str, Any]:
        """The folder ``folder_name``: ``"reuse"`` the oldest of that name, ``"create"`` always, or
        ``"fail"`` (``AbmApiError`` 409) when one exists. Listed once before a create; after an unknown
        outcome, listed again: exactly one new folder of that name is the one this call made.
        """
        check_text(folder_name, "folder_name")
        check_text(folder_access, "folder_access")
        matches = [f for f in self.iter_folders() if f.get("name") == folder_name]
        chosen = self._existing(matches, if_exists, f"folder {folder_name!r}", folder_resource, FOLDERS_PATH)
        if chosen is not None:
            if chosen["folderAccess"] and chosen["folderAccess"] != folder_access:
                self.log.info("The folder's access %s is left as it is (asked: %s)", chosen, folder_access)
            return chosen
        known = {folder_resource(m)["folderId"] for m in matches}
        return folder_resource(self._call(create_folder_call(folder_name, folder_access, known)))

    def create_account_list(self, list_name: str, folder_id: str) -> dict[str, Any]:
        """Create a list in a folder (even if one of that name exists); ``{listId, listName, folderId}``."""
        return self.ensure_list(list_name, folder_id, if_exists="create")

    def ensure_list(self, list_name: str, folder_id: str, if_exists: IfExists = "reuse") -> dict[str, Any]:
        """The list ``list_name`` in ``folder_id``: reused, created or refused, as :meth:`ensure_folder`."""
        matches = self._lists_named(list_name, folder_id)
        what = f"list {list_name!r} in folder {folder_id}"
        chosen = self._existing(matches, if_exists, what, lambda item: item, LISTS_PATH)
        if chosen is not None:
            return chosen
        known = {m["listId"] for m in matches}
        return list_resource(self._call(create_list_call(list_name, folder_id, known)), folder_id)

    def find_list(self, list_name: str, folder_id: str) -> dict[str, Any] | None:
        """The list ``list_name`` in ``folder_id`` that :meth:`ensure_list` would reuse, or ``None``;
        creates nothing (what a dry run asks)."""
        matches = self._lists_named(list_name, folder_id)
        return self._existing(
            matches, "reuse", f"list {list_name!r} in folder {folder_id}", lambda i: i, LISTS_PATH
        )

    def _lists_named(self, list_name: str, folder_id: str) -> list[dict[str, Any]]:
        """The lists named ``list_name`` in ``folder_id``, as :func:`list_resource` shapes them."""
        check_text(list_name, "list_name")
        check_text(folder_id, "folder_id")
        listed = (list_resource(i, folder_id) for i in self.iter_account_lists([folder_id]))
        return [i for i in listed if is_list(i, list_name, folder_id)]

    def _existing(
        self,
        matches: list[dict[str, Any]],
        if_exists: IfExists,
        what: str,
        shape: Callable[..., Any],
        path: str,
    ) -> dict[str, Any] | None:
        """The match to reuse (the oldest: the one earlier runs have been reusing), or ``None``."""
        check_choice(if_exists, "if_exists", IF_EXISTS)
        if not matches or if_exists == "create":
            return None
        shaped = [shape(m) for m in matches]
        if if_exists == "fail":
            raise self._exists(path, f"{what} already exists: {shaped} (if_exists='fail')")
        created = [str(m.get("createdMomentUtc") or m.get("createTime") or "\uffff") for m in matches]
        chosen = shaped[created.index(min(created))]
        if len(matches) > 1:
            self.log.warning("%d items are %s; reusing the oldest, %s", len(matches), what, chosen)
        else:
            self.log.info("Reusing %s: %s", what, chosen)
        return chosen

    def _exists(self, path: str, message: str) -> AbmApiError:
        """``if_exists="fail"`` met an existing resource: the 409 the service would give."""
        return self.pipeline.error(
            Call("POST", path), "answer", message, 409, body=ErrorBody("ALREADY_EXISTS", "", [])
        )

    # -- membership ---------------------------------------------------------------------------------

    def change_membership(
        self,
        action: str,
        list_id: str,
        accounts: Iterable[Mapping[str, Any]],
        *,
        batch_size: int = MAX_ACCOUNTS_PER_REQUEST,
        on_batch: Callable[[BatchResult], None] | None = None,
        keep_not_found: bool = True,
    ) -> AccountsResult:
        """``"add"`` or ``"remove"`` accounts (any iterable, read lazily) in requests of at most
        ``batch_size`` (max 1000), each retried freely: an account already on the list is a duplicate, one
        sent for removal but not reported removed counts as not found. ``on_batch`` sees each answer;
        ``keep_not_found=False`` keeps only the count of unknown accounts. ``name`` is not sent to remove.
        """
        check_choice(action, "action", ("add", "remove"))
        path = f"{LISTS_PATH}/{path_segment(list_id, 'list_id')}/accounts/{action}"
        check_batch_size(batch_size)
        if isinstance(accounts, (str, bytes, Mapping)):
            raise TypeError(
                f"accounts must be an iterable of account mappings, not a {type(accounts).__name__}"
            )
        result = AccountsResult()
        source = iter(accounts)
        index = offset = 0
        while batch := list(islice(source, batch_size)):
            payload = account_payloads(batch, action, offset)
            answer = self._call(Call("POST", path, body={"accounts": payload}))
            outcome = batch_result(action, index, payload, answer)
            result.include(outcome, keep_not_found=keep_not_found)
            if on_batch is not None:
                on_batch(outcome)
            index += 1
            offset += len(batch)
        return result

    def add_accounts(
        self, list_id: str, accounts: Iterable[Mapping[str, Any]], **options: Unpack[MembershipOptions]
    ) -> AccountsResult:
        """Add accounts to the list (:meth:`change_membership`); ``applied`` counts those added."""
        return self.change_membership("add", list_id, accounts, **options)

    def remove_accounts(
        self, list_id: str, accounts: Iterable[Mapping[str, Any]], **options: Unpack[MembershipOptions]
    ) -> AccountsResult:
        """Remove accounts from the list (:meth:`change_membership`); ``applied`` counts those removed."""
        return self.change_membership("remove", list_id, accounts, **options)

    # -- export jobs ----------------------------------------------------------------------------------

    def create_export_job(self, export_type: str, schedule: str) -> dict[str, Any]:
        """Schedule an export job; ``{type, schedule, createTime, updateTime}``.

        One job per type per account: an existing job answers 409, raised as ``AbmApiError``. After
        an unknown outcome the create is sent again, since the service refuses a duplicate: a 409
        that follows then says an earlier attempt may have created it (``outcome_unknown``).
        """
        return self._call(create_job_call(export_type, schedule))

    def job_exists(self, export_type: str) -> bool:
        """Whether a job of this type exists: its executions listing answers 200, not 404.

        The API has no "read job" call; listing one execution is the cheapest question it answers.
        """
        try:
            next(iter(self.iter_executions(export_type, page_size=1)), None)
        except AbmApiError as err:
            if err.http_status == 404:
                return False
            raise
        return True

    def ensure_export_job(
        self, export_type: str, schedule: str, if_exists: JobIfExists = "ignore"
    ) -> dict[str, Any]:
        """The job of ``export_type``: the created job plus ``created: True``, or ``{"type", "created":
        False, "requested_schedule"}`` for an existing one (its schedule cannot be read or changed);
        ``if_exists="fail"`` raises ``AbmApiError`` 409 instead. An unknown outcome is settled by
        looking whether the job exists now.
        """
        check_choice(if_exists, "if_exists", JOB_IF_EXISTS)
        if if_exists == "fail" and self.job_exists(export_type):
            raise self._exists(
                EXPORT_JOBS_PATH, f"an export job of type {export_type} already exists (if_exists='fail')"
            )
        try:
            job = dict(self.create_export_job(export_type, schedule))
        except AbmApiError as err:
            if err.outcome_unknown and (err.http_status == 409 or self.job_exists(export_type)):
                self.log.warning(
                    "Creating the %s job failed (%s) but it exists now", export_type, err.message
                )
                return {"type": export_type, "schedule": schedule, "created": True}
            if err.http_status != 409 or if_exists == "fail":
                raise
            self.log.info(
                "Export job %s exists; it keeps its schedule (the API cannot change it)", export_type
            )
            return {"type": export_type, "created": False, "requested_schedule": schedule}
        job.setdefault("type", export_type)
        job.setdefault("schedule", schedule)
        job["created"] = True
        self.log.info("Created export job %s with schedule %r", export_type, job["schedule"])
        return job

    # -- downloads ------------------------------------------------------------------------------------

    def download(
        self,
        download_uri: str,
        fileobj: BinaryIO,
        *,
        chunk_size: int = 8 << 20,
        on_progress: Callable[[int, int | None], None] | None = None,
    ) -> DownloadResult:
        """Stream ``download_uri`` into ``fileobj``, resuming after drops; memory is three chunks.

        Every redirect hop meets the URL rules; the length is checked against ``Content-Length``; the
        key goes only to the API's origin. ``AbmApiError`` 403: the link expired; 412: the file
        changed. ``fileobj.write`` gets views of reused buffers: it must be done with each on return.
        """
        return Download(self, download_uri, fileobj, chunk_size, on_progress).run()
