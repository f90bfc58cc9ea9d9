"""Async hooks on one event loop share one connection pool, and the last one closed closes it."""

from __future__ import annotations

import asyncio
from typing import Any

from abm_provider.hooks import _sessions
from abm_provider.hooks.abm import AbmAsyncHook, AbmHook
from abm_provider.triggers.exports import ExecutionCompleteTrigger

TYPE = "TACTIC_PERFORMANCE"


async def _first(hook: AbmAsyncHook) -> list[dict[str, Any]]:
    return [e async for e in hook.iter_executions(TYPE)]


async def test_hooks_on_one_loop_share_a_session_until_the_last_closes(abm: Any, hook: AbmHook) -> None:
    hook.create_export_job(TYPE, "0 6 1 * *")
    first, second = AbmAsyncHook(), AbmAsyncHook()
    await _first(first)
    await _first(second)
    shared = first._session
    assert shared is second._session and _sessions.open_sessions() == 1
    assert shared.connector.limit == _sessions.CONNECTION_LIMIT

    await first.close()
    assert not shared.closed, "closing one hook must not cut the other's connections"
    assert await _first(second) == []
    await second.close()
    assert shared.closed and _sessions.open_sessions() == 0

    # A hook used again after close takes a fresh session rather than a closed one.
    assert await _first(first) == []
    assert first._session is not shared and not first._session.closed
    await first.close()
    assert _sessions.open_sessions() == 0


async def test_different_timeouts_get_different_sessions(abm: Any, hook: AbmHook) -> None:
    hook.create_export_job(TYPE, "0 6 1 * *")
    async with AbmAsyncHook(timeout=5) as short, AbmAsyncHook(timeout=50) as long:
        await _first(short)
        await _first(long)
        assert short._session is not long._session
        assert _sessions.open_sessions() == 2
    assert _sessions.open_sessions() == 0


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
    assert _sessions.open_sessions() == 1, "150 polling triggers must share one session"
    # Timestamps have whole seconds: an execution finishing now could carry the cut-off's second.
    abm.fire(TYPE, outcome="COMPLETE", runningSeconds=2)
    assert await asyncio.wait_for(waiting, 60) == ["success"] * 150
    assert _sessions.open_sessions() == 0
