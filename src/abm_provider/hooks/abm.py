"""Hooks for the Account Lists v2 and Export Jobs v1 API: ``AbmHook`` (sync) and ``AbmAsyncHook``.

The hooks own everything about talking to the service so that operators only orchestrate: the base
URL and key from the connection, one typed method per endpoint, pagination, batching of membership
changes, streaming downloads with resume, the error body, and retries.

Why the retry loop is our own and not ``HttpHook.run_with_advanced_retry``: ``HttpHook.check_response``
turns an HTTP error into ``AirflowException("503:...")``, so a retry predicate can no longer see the
status (apache/airflow#9569) and ``Retry-After`` is lost. Here every request goes through one
tenacity loop that sees the status, honours ``Retry-After``, never repeats a 400/401/403, and never
blindly repeats a create that may already have happened (see :mod:`abm_provider.hooks._policy`).

Why the key cannot leak: it is attached by an auth object that adds ``Authorization`` only to
requests for the API's own origin, so a download link on another origin (object storage) never sees
it, even though downloads share the session; redirects are not followed for API calls; error texts
pass through a redactor; and the settings object's ``repr`` hides it.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from itertools import islice
from typing import Any, BinaryIO

import requests
import tenacity
from airflow.providers.http.hooks.http import HttpHook
from airflow.sdk import BaseHook

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks import _sessions
from abm_provider.hooks._answers import (
    EXPORT_JOBS_PATH,
    FOLDERS_PATH,
    LISTS_PATH,
    MAX_ACCOUNTS_PER_REQUEST,
    TokenGuard,
    account_payloads,
    batch_result,
    check_batch_size,
    check_name,
    check_page_size,
    executions_request,
    folder_from_listing,
    list_from_listing,
    page_items,
    parse_json_object,
    with_hint,
)
from abm_provider.hooks._download import ResumableDownload
from abm_provider.hooks._policy import (
    DEFAULT_BASE_URL,
    REQUEST_ID_HEADER,
    AbmSettings,
    BackoffWait,
    RetryBudget,
    api_error,
    encode_query,
    path_segment,
    retry_logger,
    should_retry,
    transport_error,
)
from abm_provider.hooks._transport import OriginBoundAuth, innermost, request_was_sent, tls_error
from abm_provider.models import AccountsResult, BatchResult, DownloadResult

__all__ = ["MAX_ACCOUNTS_PER_REQUEST", "AbmAsyncHook", "AbmHook"]

_USER_AGENT = "airflow-provider-abm"
#: test_connection answers in the UI, so it makes one short attempt instead of the full budget.
_TEST_CONNECTION_TIMEOUT = 15.0


# --- sync hook -----------------------------------------------------------------------------------


class AbmHook(HttpHook):
    """Sync client for the ABM API, for operators and sensors running in workers.

    :param abm_conn_id: connection of type ``abm``: host = base URL (default
        ``https://api.terminusplatform.com``), password = API key; extra ``max_attempts``,
        ``max_wait``, ``timeout``, ``verify`` (true/false/CA bundle path), ``auth_type``
        (``bearer`` default, or ``basic``).
    :param max_attempts: requests per call on 429/423/5xx/connection errors (default 5); wins over
        the connection extra.
    :param max_wait: longest single wait between attempts in seconds (default 60); a
        ``Retry-After`` longer than this ends the call with an error that says so.
    :param timeout: connect and read timeout per request in seconds (default 60).
    """

    conn_name_attr = "abm_conn_id"
    default_conn_name = "abm_default"
    conn_type = "abm"
    hook_name = "ABM (Account Lists and Exports API)"
    default_host = DEFAULT_BASE_URL

    def __init__(
        self,
        abm_conn_id: str = default_conn_name,
        *,
        max_attempts: int | None = None,
        max_wait: float | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__(method="GET", http_conn_id=abm_conn_id)
        self.abm_conn_id = abm_conn_id
        self.max_attempts = max_attempts
        self.max_wait = max_wait
        self.timeout = timeout
        self._settings: AbmSettings | None = None
        self._session: requests.Session | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Connection form for Airflow versions that read it from the hook (3.3 reads provider info)."""
        from abm_provider import ui_field_behaviour

        return ui_field_behaviour()

    # -- connection and session -------------------------------------------------------------------

    @property
    def settings(self) -> AbmSettings:
        """The connection's base URL, key, TLS and retry settings, read once."""
        if self._settings is None:
            conn = self.get_connection(self.abm_conn_id)
            self._settings = AbmSettings.from_connection(
                conn, max_attempts=self.max_attempts, max_wait=self.max_wait, timeout=self.timeout
            )
            self.base_url = self._settings.base_url
            self._base_url_initialized = True
            if self._settings.verify is False:
                self.log.warning("TLS certificate verification is off for connection %r", self.abm_conn_id)
        return self._settings

    def get_conn(
        self, headers: dict[Any, Any] | None = None, extra_options: dict[str, Any] | None = None
    ) -> requests.Session:
        """A ``requests.Session`` for the API: TLS per the connection, keep-alive, origin-bound auth.

        Built here rather than by ``HttpHook.get_conn`` because that one copies every unknown extra
        key (``max_attempts``, ``auth_type``...) into request headers and attaches credentials to
        every origin. ``headers`` are added to the session; ``extra_options`` is accepted for
        signature compatibility and ignored.
        """
        if self._session is None or headers:
            settings = self.settings
            session = requests.Session()
            session.auth = OriginBoundAuth(settings)
            session.verify = settings.verify
            session.headers.update({"User-Agent": _USER_AGENT, "Accept": "application/json"})
            if self.keep_alive_adapter is not None:
                session.mount("https://", self.keep_alive_adapter)
                session.mount("http://", self.keep_alive_adapter)
            if headers:
                session.headers.update(headers)
                return session
            self._session = session
        return self._session

    def close(self) -> None:
        """Close the pooled connections (the hook reopens them if used again)."""
        if self._session is not None:
            self._session.close()
            self._session = None

    # -- the request loop ---------------------------------------------------------------------------

    def _retrying(self, budget: RetryBudget, *, may_repeat_uncertain: bool) -> tenacity.Retrying:
        def retry(err: BaseException) -> bool:
            return should_retry(err, budget=budget, may_repeat_uncertain=may_repeat_uncertain)

        return tenacity.Retrying(
            stop=tenacity.stop_after_attempt(budget.max_attempts),
            wait=BackoffWait(budget.max_wait),
            retry=tenacity.retry_if_exception(retry),
            before_sleep=retry_logger(self.log, budget),
            reraise=True,
        )

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        idempotent: bool = True,
        reconcile: Callable[[], dict[str, Any] | None] | None = None,
        repost: bool = False,
        budget: RetryBudget | None = None,
    ) -> dict[str, Any]:
        """One API call with retries; returns the answer's JSON object.

        ``idempotent`` calls repeat after any transient failure. A non-idempotent call (a create)
        repeats after a refused attempt (429, 423, no connection) but after an *uncertain* one (5xx,
        lost answer) only if it can check first: ``reconcile`` returns the resource when the earlier
        attempt did create it (then it is returned instead of posting again) or ``None`` when it did
        not; ``repost`` re-posts because the service refuses a duplicate with 409, which is then
        raised with a note that an earlier attempt may have created the resource.
        """
        settings = self.settings
        budget = budget or settings.budget
        query = encode_query(params or {})
        url = settings.base_url + path + (f"?{query}" if query else "")
        uncertain: AbmApiError | None = None
        settled = False
        may_repeat = idempotent or reconcile is not None or repost
        for attempt in self._retrying(budget, may_repeat_uncertain=may_repeat):
            with attempt:
                number = attempt.retry_state.attempt_number
                try:
                    if uncertain is not None and reconcile is not None:
                        if uncertain.http_status is None and not settled:
                            settled = True
                            self._let_slow_request_finish(method, path, budget)
                        found = reconcile()
                        if found is not None:
                            self.log.warning(
                                "%s %s: the attempt that failed (%s) did take effect; using the result "
                                "instead of sending it again",
                                method,
                                path,
                                uncertain.message,
                            )
                            return found
                    return self._send_once(method, path, url, body, idempotent, budget)
                except AbmApiError as err:
                    err.attempts = number
                    if err.outcome_unknown:
                        uncertain = err
                    elif uncertain is not None and err.http_status == 409:
                        err.message += (
                            f" (an earlier attempt failed with "
                            f"{uncertain.http_status or 'no answer'} and may have created it)"
                        )
                    raise
        raise AssertionError("tenacity returns or raises")  # pragma: no cover

    def _let_slow_request_finish(self, method: str, path: str, budget: RetryBudget) -> None:
        """Before looking for the result of a create that got no answer, give it time to land.

        A timed-out request may still be running on the server; listing at once would miss it and
        the create would be sent again, making a duplicate. Waiting as long again as the request was
        allowed (capped at ``max_wait``) covers a server that is slow rather than stuck; one that
        takes longer than that can still race, which nothing but server-side idempotency keys avoids.
        """
        settle = min(budget.timeout, budget.max_wait)
        self.log.warning(
            "%s %s got no answer; waiting %.1f s for it to finish before checking whether it took effect",
            method,
            path,
            settle,
        )
        time.sleep(settle)

    def _send_once(
        self,
        method: str,
        path: str,
        url: str,
        body: Mapping[str, Any] | None,
        idempotent: bool,
        budget: RetryBudget,
    ) -> dict[str, Any]:
        settings = self.settings
        redact = settings.redactor()
        session = self.get_conn()
        try:
            response = session.request(
                method,
                url,
                json=body,
                timeout=(budget.timeout, budget.timeout),
                # per request: requests lets REQUESTS_CA_BUNDLE override a session's verify
                verify=settings.verify,
                allow_redirects=False,
            )
        except requests.exceptions.SSLError as exc:
            raise tls_error(method, path, exc, redact, settings.conn_id) from None
        except (
            requests.exceptions.ConnectionError,
            requests.exceptions.Timeout,
            requests.exceptions.ChunkedEncodingError,
            requests.exceptions.ContentDecodingError,
        ) as exc:
            raise transport_error(
                method=method,
                path=path,
                exc=innermost(exc),
                sent=request_was_sent(exc),
                idempotent=idempotent,
                redact=redact,
            ) from None
        request_id = response.headers.get(REQUEST_ID_HEADER)
        if response.status_code >= 300:
            err = api_error(
                method=method,
                path=path,
                http_status=response.status_code,
                body=response.content,
                content_type=response.headers.get("Content-Type"),
                request_id=request_id,
                retry_after=response.headers.get("Retry-After"),
                idempotent=idempotent,
                redact=redact,
            )
            raise with_hint(err, settings.conn_id)
        return parse_json_object(
            method=method,
            path=path,
            http_status=response.status_code,
            body=response.content,
            request_id=request_id,
            idempotent=idempotent,
        )

    def _paginate(self, path: str, params: Mapping[str, Any], key: str) -> Iterator[dict[str, Any]]:
        """Every item of a listing, following ``nextPageToken`` through empty pages to the end."""
        guard = TokenGuard(path)
        token = ""
        while True:
            page = self._call("GET", path, params={**params, "pageToken": token or None})
            items, token = page_items(page, key, path)
            yield from items
            if not token:
                return
            guard.check(token)

    # -- connection test ------------------------------------------------------------------------------

    def test_connection(self) -> tuple[bool, str]:
        """One authenticated read (a one-folder page); says whether the URL, TLS or the key failed."""
        try:
            settings = self.settings
        except Exception as err:
            return False, f"Connection {self.abm_conn_id!r} is not usable: {err}"
        budget = replace(
            settings.budget,
            max_attempts=1,
            timeout=min(settings.budget.timeout or 1, _TEST_CONNECTION_TIMEOUT),
        )
        try:
            self._call("GET", FOLDERS_PATH, params={"pageSize": 1}, budget=budget)
        except AbmApiError as err:
            if err.http_status == 401:
                return False, f"{settings.base_url} refused the API key: {err}"
            if err.http_status is None:
                return False, f"Could not reach {settings.base_url}: {err}"
            return False, f"{settings.base_url} answered with an error: {err}"
        finally:
            self.close()
        return True, f"Connected to {settings.base_url}; the API key was accepted"

    # -- folders and lists --------------------------------------------------------------------------

    def create_folder(self, folder_name: str, folder_access: str = "PUBLIC") -> dict[str, Any]:
        """Create a folder; returns ``{folderId, displayName, folderAccess}``.

        Folder names need not be unique, so a create whose outcome is unknown (5xx, lost answer) is
        reconciled against a listing taken before it: exactly one new folder of that name is the one
        this call made and is returned; none means nothing was created and the create is sent again;
        several (someone else creating the same name at once) cannot be told apart and the original
        error is raised.
        """
        check_name(folder_name, "folder_name")
        check_name(folder_access, "folder_access")
        known = {f.get("uuid") for f in self.iter_folders() if f.get("name") == folder_name}

        def reconcile() -> dict[str, Any] | None:
            new = [
                f for f in self.iter_folders() if f.get("name") == folder_name and f.get("uuid") not in known
            ]
            return self._one_new(new, f"folder {folder_name!r}", folder_from_listing, FOLDERS_PATH)

        return self._call(
            "POST",
            FOLDERS_PATH,
            body={"folderName": folder_name, "folderAccess": folder_access},
            idempotent=False,
            reconcile=reconcile,
        )

    def iter_folders(self, page_size: int = 100) -> Iterator[dict[str, Any]]:
        """All folders: ``{uuid, name, orgUuid, folderAccess, createdMomentUtc}`` each."""
        check_page_size(page_size)
        return self._paginate(FOLDERS_PATH, {"pageSize": page_size}, "folders")

    def create_account_list(self, list_name: str, folder_id: str) -> dict[str, Any]:
        """Create a list in a folder; returns ``{listId, listName, folderId}``.

        Reconciled like :meth:`create_folder`, among the lists of ``folder_id``.
        """
        check_name(list_name, "list_name")
        check_name(folder_id, "folder_id")

        def named(items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
            return [
                i
                for i in items
                if (i.get("displayName") if "displayName" in i else i.get("listName")) == list_name
                and i.get("folderId") in (None, folder_id)
            ]

        known = {i.get("id") for i in named(self.iter_account_lists([folder_id]))}

        def reconcile() -> dict[str, Any] | None:
            new = [i for i in named(self.iter_account_lists([folder_id])) if i.get("id") not in known]
            return self._one_new(
                new, f"list {list_name!r}", lambda item: list_from_listing(item, folder_id), LISTS_PATH
            )

        return self._call(
            "POST",
            LISTS_PATH,
            body={"listName": list_name, "folderId": folder_id},
            idempotent=False,
            reconcile=reconcile,
        )

    @staticmethod
    def _one_new(
        new: list[dict[str, Any]],
        what: str,
        shape: Callable[[dict[str, Any]], dict[str, Any]],
        path: str,
    ) -> dict[str, Any] | None:
        if not new:
            return None
        if len(new) == 1:
            return shape(new[0])
        ids = [shape(n) for n in new]
        raise AbmApiError(
            method="POST",
            path=path,
            http_status=None,
            status=None,
            message=(
                f"creating {what} failed with an unknown outcome and {len(new)} new items of that name "
                f"appeared meanwhile ({ids}); cannot tell which one this call made"
            ),
            outcome_unknown=True,
        )

    def iter_account_lists(
        self, folder_ids: Sequence[str] | None = None, page_size: int = 100
    ) -> Iterator[dict[str, Any]]:
        """All lists, or those of ``folder_ids``.

        Each is ``{id, displayName, createTime, estimatedAccountsCount, folderId}``.
        """
        if isinstance(folder_ids, (str, bytes)):
            raise ValueError("folder_ids must be a list of folder ids, not a single string")
        ids = [check_name(f, "folder_ids[]") for f in folder_ids] if folder_ids else None
        check_page_size(page_size)
        return self._paginate(LISTS_PATH, {"folderIds": ids, "pageSize": page_size}, "lists")

    # -- membership ---------------------------------------------------------------------------------

    def add_accounts(
        self,
        list_id: str,
        accounts: Iterable[Mapping[str, Any]],
        *,
        batch_size: int = MAX_ACCOUNTS_PER_REQUEST,
        on_batch: Callable[[BatchResult], None] | None = None,
        keep_not_found: bool = True,
    ) -> AccountsResult:
        """Add accounts (any iterable, read lazily) in requests of at most ``batch_size`` (max 1000).

        Adding is idempotent (an account already on the list counts as a duplicate), so every
        request is retried freely; a retried request whose first attempt did land reports its
        accounts as duplicates. ``on_batch`` sees each request's result as it arrives (for progress
        or rejects); ``keep_not_found=False`` keeps only the count of unknown accounts, for very
        large sources.
        """
        return self._membership("add", list_id, accounts, batch_size, on_batch, keep_not_found)

    def remove_accounts(
        self,
        list_id: str,
        accounts: Iterable[Mapping[str, Any]],
        *,
        batch_size: int = MAX_ACCOUNTS_PER_REQUEST,
        on_batch: Callable[[BatchResult], None] | None = None,
        keep_not_found: bool = True,
    ) -> AccountsResult:
        """Remove accounts, batched like :meth:`add_accounts`; ``added`` counts removed accounts.

        Only ``id``, ``crmOrgId`` and ``crmType`` are sent (a ``name`` is dropped: the remove request
        has no such field). Accounts sent but not reported removed are counted as not found.
        """
        return self._membership("remove", list_id, accounts, batch_size, on_batch, keep_not_found)

    def _membership(
        self,
        action: str,
        list_id: str,
        accounts: Iterable[Mapping[str, Any]],
        batch_size: int,
        on_batch: Callable[[BatchResult], None] | None,
        keep_not_found: bool,
    ) -> AccountsResult:
        path = f"{LISTS_PATH}/{path_segment(list_id, 'list_id')}/accounts/{action}"
        check_batch_size(batch_size)
        if isinstance(accounts, (str, bytes, Mapping)):
            raise TypeError(
                f"accounts must be an iterable of account mappings, not a {type(accounts).__name__}"
            )
        result = AccountsResult()
        source = iter(accounts)
        index = 0
        offset = 0
        while batch := list(islice(source, batch_size)):
            payload = account_payloads(batch, action, offset)
            answer = self._call("POST", path, body={"accounts": payload}, idempotent=True)
            outcome = batch_result(action, index, payload, answer)
            result.include(outcome, keep_not_found=keep_not_found)
            if on_batch is not None:
                on_batch(outcome)
            index += 1
            offset += len(batch)
        return result

    # -- export jobs ----------------------------------------------------------------------------------

    def create_export_job(self, export_type: str, schedule: str) -> dict[str, Any]:
        """Schedule an export job; returns ``{type, schedule, createTime, updateTime}``.

        One job per type per account: an existing job answers 409, raised as
        ``AbmApiError(http_status=409)`` for the operator's ``if_exists``. After an uncertain failure
        the create is sent again, since a duplicate cannot be made: the 409 that follows then means
        the earlier attempt created the job, and its message says so.
        """
        path_segment(export_type, "export_type")
        check_name(schedule, "schedule")
        return self._call(
            "POST",
            EXPORT_JOBS_PATH,
            body={"type": export_type, "schedule": schedule},
            idempotent=False,
            repost=True,
        )

    def iter_executions(
        self,
        export_type: str,
        *,
        state: str | None = None,
        order_by: str | None = "updateTime desc",
        page_size: int = 100,
        filter: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Every execution of a job, page by page.

        Each is ``{id, exportId, state, createTime, updateTime, downloadUri}``.

        :param state: only executions in this state (sent as ``filter=status=<state>``).
        :param order_by: ``"createTime"``/``"updateTime"`` then ``asc``/``desc``; ``None`` for the
            service's default order.
        :param filter: a raw filter expression instead of ``state``.
        """
        path, params = executions_request(
            export_type, state=state, order_by=order_by, page_size=page_size, filter=filter
        )
        return self._paginate(path, params, "exportJobExecutions")

    # -- downloads ------------------------------------------------------------------------------------

    def download(
        self,
        download_uri: str,
        fileobj: BinaryIO,
        *,
        chunk_size: int = 8 << 20,
        on_progress: Callable[[int, int | None], None] | None = None,
    ) -> DownloadResult:
        """Stream ``download_uri`` into ``fileobj`` in ``chunk_size`` pieces, resuming after drops.

        Memory stays at a few chunks whatever the file size. After a dropped connection the transfer
        resumes with ``Range: bytes=<written>-`` and ``If-Match: <ETag>``; a failure that made
        progress does not use up an attempt, so a long file survives many drops. The byte count is
        checked against ``Content-Length``. A link on another origin than the API gets no
        ``Authorization`` header. Raises ``AbmApiError(http_status=403)`` when the link has
        expired (list the execution again for a fresh one) and ``http_status=412`` when the file
        changed between attempts (start again with an empty file).
        """
        download = ResumableDownload(
            self.get_conn(), self.settings, self.log, retry_logger(self.log, self.settings.budget)
        )
        return download.run(download_uri, fileobj, chunk_size=chunk_size, on_progress=on_progress)


# --- async hook ----------------------------------------------------------------------------------


async def _aget_connection(conn_id: str) -> Any:
    """Resolve a connection without blocking the triggerer's event loop.

    Airflow 3.2+ has ``BaseHook.aget_connection``; on older 3.x the sync lookup runs in a thread.
    """
    getter = getattr(BaseHook, "aget_connection", None)
    if getter is not None:
        return await getter(conn_id)
    from asgiref.sync import sync_to_async

    return await sync_to_async(BaseHook.get_connection)(conn_id)


class AbmAsyncHook(BaseHook):
    """Async client for triggers: same connection, auth, errors and retry policy as :class:`AbmHook`.

    The connection is resolved with the async lookup on first use (a sync lookup inside the
    triggerer's event loop is refused on Airflow 3). Hooks on one event loop with the same TLS and
    timeout settings share one ``aiohttp`` session (:mod:`abm_provider.hooks._sessions`), so a
    triggerer polling for a thousand tasks keeps one connection pool, not a thousand; call
    :meth:`close` (or use ``async with``) when done.
    """

    conn_name_attr = "abm_conn_id"
    default_conn_name = "abm_default"
    conn_type = "abm"
    hook_name = "ABM (Account Lists and Exports API, async)"

    def __init__(
        self,
        abm_conn_id: str = default_conn_name,
        *,
        max_attempts: int | None = None,
        max_wait: float | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__()
        self.abm_conn_id = abm_conn_id
        self.max_attempts = max_attempts
        self.max_wait = max_wait
        self.timeout = timeout
        self._settings: AbmSettings | None = None
        self._session: Any = None
        self._session_key: Hashable = None

    async def get_settings(self) -> AbmSettings:
        """The connection's settings, resolved asynchronously once."""
        if self._settings is None:
            conn = await _aget_connection(self.abm_conn_id)
            self._settings = AbmSettings.from_connection(
                conn, max_attempts=self.max_attempts, max_wait=self.max_wait, timeout=self.timeout
            )
        return self._settings

    async def _get_session(self) -> Any:
        if self._session is None or self._session.closed:
            if self._session is not None:
                await self.close()
            settings = await self.get_settings()
            self._session_key, self._session = _sessions.acquire(
                settings.verify,
                settings.budget.timeout,
                {"User-Agent": _USER_AGENT, "Accept": "application/json"},
            )
        return self._session

    async def close(self) -> None:
        """Give back the shared session; the last hook on the loop to do so closes its connections."""
        session, self._session = self._session, None
        if session is not None:
            await _sessions.release(self._session_key, session)

    async def __aenter__(self) -> AbmAsyncHook:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(
        self, method: str, path: str, *, params: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """An idempotent call (reads only) with the shared retry policy."""
        settings = await self.get_settings()
        budget = settings.budget
        query = encode_query(params or {})
        url = settings.base_url + path + (f"?{query}" if query else "")

        def retry(err: BaseException) -> bool:
            return should_retry(err, budget=budget, may_repeat_uncertain=True)

        # The first attempt runs outside tenacity: setting up and stepping its async loop cost a
        # fifth of the CPU of a poll, paid by every one of a triggerer's polls though almost none
        # fail. A failure worth retrying is replayed as tenacity's first attempt, so the waits, the
        # log lines and the attempt count are exactly those of a loop that ran from the start.
        try:
            return await self._send_once(method, path, url, settings)
        except AbmApiError as err:
            if budget.max_attempts <= 1 or not retry(err):
                err.attempts = 1
                raise
            first_failure: AbmApiError | None = err
        retrying = tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(budget.max_attempts),
            wait=BackoffWait(budget.max_wait),
            retry=tenacity.retry_if_exception(retry),
            before_sleep=retry_logger(self.log, budget),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                try:
                    if first_failure is not None:
                        failed, first_failure = first_failure, None
                        raise failed
                    return await self._send_once(method, path, url, settings)
                except AbmApiError as err:
                    err.attempts = attempt.retry_state.attempt_number
                    raise
        raise AssertionError("tenacity returns or raises")  # pragma: no cover

    async def _send_once(self, method: str, path: str, url: str, settings: AbmSettings) -> dict[str, Any]:
        import aiohttp

        redact = settings.redactor()
        session = await self._get_session()
        try:
            async with session.request(
                method, url, headers=settings.auth_header(), allow_redirects=False
            ) as response:
                body = await response.read()
                status = response.status
                headers = response.headers
        except (aiohttp.ClientSSLError, ssl.SSLError) as exc:
            raise tls_error(method, path, exc, redact, settings.conn_id) from None
        except aiohttp.ClientConnectorError as exc:
            raise transport_error(
                method=method, path=path, exc=exc, sent=False, idempotent=True, redact=redact
            ) from None
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise transport_error(
                method=method, path=path, exc=exc, sent=True, idempotent=True, redact=redact
            ) from None
        request_id = headers.get(REQUEST_ID_HEADER)
        if status >= 300:
            err = api_error(
                method=method,
                path=path,
                http_status=status,
                body=body,
                content_type=headers.get("Content-Type"),
                request_id=request_id,
                retry_after=headers.get("Retry-After"),
                idempotent=True,
                redact=redact,
            )
            raise with_hint(err, settings.conn_id)
        return parse_json_object(
            method=method, path=path, http_status=status, body=body, request_id=request_id, idempotent=True
        )

    async def _paginate(
        self, path: str, params: Mapping[str, Any], key: str
    ) -> AsyncIterator[dict[str, Any]]:
        guard = TokenGuard(path)
        token = ""
        while True:
            page = await self._call("GET", path, params={**params, "pageToken": token or None})
            items, token = page_items(page, key, path)
            for item in items:
                yield item
            if not token:
                return
            guard.check(token)

    async def iter_executions(
        self,
        export_type: str,
        *,
        state: str | None = None,
        order_by: str | None = "updateTime desc",
        page_size: int = 100,
        filter: str | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Every execution of a job, page by page, as :meth:`AbmHook.iter_executions`."""
        path, params = executions_request(
            export_type, state=state, order_by=order_by, page_size=page_size, filter=filter
        )
        async for item in self._paginate(path, params, "exportJobExecutions"):
            yield item

    async def iter_folders(self, page_size: int = 100) -> AsyncIterator[dict[str, Any]]:
        """All folders, as :meth:`AbmHook.iter_folders` (also a cheap authenticated read)."""
        check_page_size(page_size)
        async for item in self._paginate(FOLDERS_PATH, {"pageSize": page_size}, "folders"):
            yield item
