"""What both hooks share: the connection id, the request settings, the pipeline, and the reads both
offer, written once over each hook's own page driver.

Apart from :mod:`.abm` so the async hook can live in a module of its own without importing the sync
one (``abm`` re-exports it, so each import path stays as it was).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Generic, TypeVar

from airflow.sdk import BaseHook

from abm_provider.common.urls import DEFAULT_BASE_URL, UnsafeUrlError
from abm_provider.exceptions import AbmApiError
from abm_provider.hooks._pipeline import Call, Pipeline
from abm_provider.hooks.endpoints import executions_call, folders_call
from abm_provider.hooks.settings import AbmSettings, Limits

#: What a listing gives: an iterator of items for the sync hook, an async iterator for the async one.
Pages = TypeVar("Pages")


class AbmHookBase(BaseHook, Generic[Pages]):
    """Connection id, request settings and the reads, the same for both hooks.

    :param abm_conn_id: connection of type ``abm``: host = base URL, password = API key.
    :param limits: request settings that win over the connection extra, by the names of
        :class:`~abm_provider.hooks.settings.Limits`; ``None`` means "as the connection says".
    """

    conn_name_attr = "abm_conn_id"
    default_conn_name = "abm_default"
    conn_type = "abm"
    default_host = DEFAULT_BASE_URL

    def __init__(self, abm_conn_id: str = default_conn_name, **limits: Any) -> None:
        super().__init__()
        self.abm_conn_id = abm_conn_id
        self.hook_params = dict(limits)
        unknown = sorted(set(self.hook_params) - set(Limits.names()))
        if unknown:
            raise TypeError(
                f"{type(self).__name__} got unknown settings {unknown}; known: {list(Limits.names())}"
            )
        self._pipeline: Pipeline | None = None

    def _settings_from(self, conn: Any) -> AbmSettings:
        try:
            settings = AbmSettings.from_connection(conn, **self.hook_params)
        except UnsafeUrlError as err:
            raise AbmApiError(
                method="-", path="-", http_status=None, status=None, message=str(err), kind="unsafe_url"
            ) from None
        if settings.verify is False:
            self.log.warning("TLS certificate verification is off for %s", settings.name)
        self._pipeline = Pipeline(settings)
        return settings

    @abstractmethod
    def _paginate(self, call: Call, key: str, deadline: float | None = None) -> Pages:
        """Every item of a listing, following ``nextPageToken`` through empty pages, within bounds."""

    def iter_folders(self, page_size: int = 100) -> Pages:
        """All folders: ``{uuid, name, orgUuid, folderAccess, createdMomentUtc}`` each (also the
        cheapest authenticated read)."""
        return self._paginate(folders_call(page_size), "folders")

    def iter_executions(
        self,
        export_type: str,
        *,
        state: str | None = None,
        order_by: str | None = "updateTime desc",
        page_size: int = 100,
        filter: str | None = None,
        deadline: float | None = None,
    ) -> Pages:
        """Every execution of a job, page by page: ``{id, exportId, state, createTime, updateTime,
        downloadUri}`` each. ``state`` filters (``status=<state>``), or ``filter`` is a raw
        expression; ``order_by`` is ``createTime``/``updateTime`` then ``asc``/``desc``; past
        ``deadline`` (POSIX time) no page is read (kind ``"timeout"``), for a sensor's own timeout.
        """
        call = executions_call(
            export_type, state=state, order_by=order_by, page_size=page_size, filter=filter
        )
        return self._paginate(call, "exportJobExecutions", deadline)
