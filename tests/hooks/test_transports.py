"""``abm_provider.hooks._transports``: async hooks on one event loop share one connection pool, and the
last one closed closes it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks import _transports
from abm_provider.hooks.abm import AbmAsyncHook, AbmHook
from abm_provider.triggers.exports import ExecutionCompleteTrigger

TYPE = "TACTIC_PERFORMANCE"
EXECUTIONS = f"/exports/v1/exportJobs/{TYPE}/executions"


def _session(hook: AbmAsyncHook) -> Any:
    """The aiohttp session the hook's transport holds (``None`` before use and after close)."""
    assert hook._transport is not None
    return hook._transport._session


async def _first(hook: AbmAsyncHook) -> list[dict[str, Any]]:
    return [e async for e in hook.iter_executions(TYPE)]


async def test_hooks_on_one_loop_share_a_session_until_the_last_closes(abm: Any, hook: AbmHook) -> None:
    hook.create_export_job(TYPE, "0 6 1 * *")
    first, second = AbmAsyncHook(), AbmAsyncHook()
    await _first(first)
    await _first(second)
    shared = _session(first)
    assert shared is _session(second) and _transports.open_sessions() == 1
    assert shared.connector.limit == _transports.CONNECTION_LIMIT

    await first.close()
    assert not shared.closed, "closing one hook must not cut the other's connections"
    assert await _first(second) == []
    await second.close()
    assert shared.closed and _transports.open_sessions() == 0

    # A hook used again after close takes a fresh session rather than a closed one.
    assert await _first(first) == []
    assert _session(first) is not shared and not _session(first).closed
    await first.close()
    assert _transports.open_sessions() == 0


async def test_each_hook_keeps_its_own_timeout_on_a_shared_session(abm: Any, hook: AbmHook) -> None:
    """Timeouts are per request, so hooks that differ only in them share one pool, each bound by its own."""
    hook.create_export_job(TYPE, "0 6 1 * *")
    abm.inject_fault(origin="api", method="GET", path=EXECUTIONS, kind="delay", delaySeconds=2, count=2)
    async with (
        AbmAsyncHook(request_timeout=0.5, max_attempts=1) as short,
        AbmAsyncHook(request_timeout=30) as long,
    ):
        with pytest.raises(AbmApiError) as info:
            await _first(short)
        assert info.value.kind == "timeout" and info.value.http_status is None
        assert await _first(long) == [], "the slow answer arrived within the long hook's timeout"
        assert _session(short) is _session(long)
        assert _transports.open_sessions() == 1
    assert _transports.open_sessions() == 0


async def test_different_tls_settings_get_different_sessions(
    abm: Any, hook: AbmHook, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook.create_export_job(TYPE, "0 6 1 * *")
    unverified = {
        "conn_type": "abm",
        "host": abm.base_url,
        "password": abm.api_key,
        "extra": {"verify": False},
    }
    monkeypatch.setenv("AIRFLOW_CONN_ABM_UNVERIFIED", json.dumps(unverified))
    async with AbmAsyncHook() as checked, AbmAsyncHook("abm_unverified") as unchecked:
        await _first(checked)
        await _first(unchecked)
        assert _session(checked) is not _session(unchecked)
        assert _transports.open_sessions() == 2
    assert _transports.open_sessions() == 0


async def test_many_triggers_poll_through_one_pool_and_leave_nothing_open(abm: Any, hook: AbmHook) -> None:
    hook.create_export_job(TYPE, "0 6 1 * *")
    after = abm.clock()["now"]
    triggers = [
        ExecutionCompleteTrigger(
            abm_conn_id="abm_default", export_type=TYPE, updated_after=after, poll_interval=0.2
        )
        for _ in range(150)
    ]

    async def first_event(trigger: ExecutionCompleteTrigger) -> str:
        async for event in trigger.run():
            return str(event.payload["status"])
        return "none"

    waiting = asyncio.gather(*(first_event(t) for t in triggers))
    await asyncio.sleep(0.5)
    assert _transports.open_sessions() == 1, "150 polling triggers must share one session"
    # Timestamps have whole seconds: an execution finishing now could carry the cut-off's second.
    abm.fire(TYPE, outcome="COMPLETE", runningSeconds=2)
    assert await asyncio.wait_for(waiting, 60) == ["success"] * 150
    assert _transports.open_sessions() == 0
