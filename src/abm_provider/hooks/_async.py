"""``AbmAsyncHook``, the hook triggers use; import it from :mod:`abm_provider.hooks.abm`.

The same request descriptions, pipeline and retry policy as the sync hook; only the transport
(``aiohttp``) and the driver that awaits it differ.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import tenacity
from airflow.sdk import BaseHook

from abm_provider.hooks._base import AbmHookBase
from abm_provider.hooks._paging import Pager
from abm_provider.hooks._pipeline import Attempts, Call, Pipeline
from abm_provider.hooks._transports import AiohttpTransport


class AbmAsyncHook(AbmHookBase[AsyncIterator[dict[str, Any]]]):
    """Async client for triggers, with the pipeline and bounds of :class:`~.abm.AbmHook`. The
    connection is looked up asynchronously (Airflow 3 refuses a sync lookup in the triggerer); hooks
    on one event loop share one ``aiohttp`` session. Call :meth:`close` (or use ``async with``) when done.
    """

    hook_name = "ABM (Account Lists and Exports API, async)"

    def __init__(self, abm_conn_id: str = AbmHookBase.default_conn_name, **limits: Any) -> None:
        super().__init__(abm_conn_id, **limits)
        self._transport: AiohttpTransport | None = None

    async def get_pipeline(self) -> Pipeline:
        """The connection's pipeline, resolved asynchronously once."""
        if self._pipeline is None:
            getter = getattr(BaseHook, "aget_connection", None)
            if getter is not None:
                conn = await getter(self.abm_conn_id)
            else:  # Airflow 3.1: the sync lookup in a thread
                from asgiref.sync import sync_to_async

                conn = await sync_to_async(BaseHook.get_connection)(self.abm_conn_id)
            self._transport = AiohttpTransport(self._settings_from(conn))
        assert self._pipeline is not None
        return self._pipeline

    async def close(self) -> None:
        """Give back the shared session; the last hook on the loop to do so closes its connections."""
        if self._transport is not None:
            await self._transport.close()

    async def __aenter__(self) -> AbmAsyncHook:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, call: Call) -> dict[str, Any]:
        """One API call under the pipeline's retry policy, as :meth:`~.abm.AbmHook._call` does it.

        The first attempt runs outside tenacity: a trigger polls once per interval and almost no
        poll fails, and tenacity's async loop costs a good part of a poll's CPU (the waiting section
        of ``make bench``; figures in docs/performance.md). A failure is replayed as tenacity's first
        attempt, so the policy decides on it and waits, logs and counts are those of a loop run from
        the start.
        """
        pipe = await self.get_pipeline()
        assert self._transport is not None
        try:
            return pipe.interpret(call, await self._transport.send(pipe.prepare(call)))
        except Exception as err:
            first: Exception | None = err
        attempts = Attempts(call.on_unknown, self.log)
        async for attempt in tenacity.AsyncRetrying(**pipe.retrying(self.log, attempts)):
            if (look := attempts.look) is not None:
                made = attempts.found([item async for item in self._paginate(look.listing, look.key)])
                if made is not None:
                    return made
            with attempt:
                if first is not None:
                    failed, first = first, None
                    raise failed
                return pipe.interpret(call, await self._transport.send(pipe.prepare(call)))
        raise AssertionError("tenacity returns or raises")  # pragma: no cover

    async def _paginate(
        self, call: Call, key: str, deadline: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        pager = Pager(await self.get_pipeline(), call, key, deadline)
        next_call: Call | None = pager.call
        while next_call is not None:
            items, next_call = pager.read(await self._call(next_call))
            for item in items:
                yield item
