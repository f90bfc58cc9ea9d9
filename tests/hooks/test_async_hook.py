"""``AbmAsyncHook`` against the emulator: same connection, errors and retry policy as the sync hook."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks.abm import AbmAsyncHook, AbmHook
from support.emulator_log import seen

TYPE = "TACTIC_PERFORMANCE"
EXECUTIONS = f"/exports/v1/exportJobs/{TYPE}/executions"


async def _collect(hook: AbmAsyncHook, **kwargs: Any) -> list[dict[str, Any]]:
    return [e async for e in hook.iter_executions(TYPE, **kwargs)]


async def test_iter_executions_matches_the_sync_hook(abm: Any, hook: AbmHook) -> None:
    hook.create_export_job(TYPE, "0 6 1 * *")
    for outcome in ["FAILED"] * 4 + ["COMPLETE"] + ["FAILED"] * 2:
        abm.fire(TYPE, outcome=outcome)
        abm.advance(30)
    async with AbmAsyncHook(retry_max_wait=5) as async_hook:
        every = await _collect(async_hook, page_size=2)
        complete = await _collect(async_hook, state="COMPLETE", page_size=2)
        folders = [f async for f in async_hook.iter_folders()]
    assert [e["id"] for e in every] == [e["id"] for e in hook.iter_executions(TYPE, page_size=2)]
    assert len(every) == 7
    assert len(complete) == 1 and complete[0]["state"] == "COMPLETE"
    assert folders == []


async def test_retry_after_and_5xx_are_retried(abm: Any, hook: AbmHook) -> None:
    hook.create_export_job(TYPE, "0 6 1 * *")
    abm.inject_fault(origin="api", method="GET", path=EXECUTIONS, kind="status", status=429, retryAfter="2")
    abm.inject_fault(origin="api", method="GET", path=EXECUTIONS, kind="status", status=503)
    started = time.monotonic()
    async with AbmAsyncHook(retry_max_wait=5) as async_hook:
        assert await _collect(async_hook) == []
    assert time.monotonic() - started >= 2.0
    assert len(seen(abm, method="GET", path=EXECUTIONS)) == 3


async def test_errors_map_to_abm_api_error(abm: Any) -> None:
    async with AbmAsyncHook() as async_hook:
        with pytest.raises(AbmApiError) as info:
            await _collect(async_hook)
    assert info.value.http_status == 404 and info.value.status == "NOT_FOUND"
    assert info.value.path == EXECUTIONS and info.value.request_id
    with pytest.raises(ValueError, match="export_type"):
        async with AbmAsyncHook() as async_hook:
            [e async for e in async_hook.iter_executions("../x")]


async def test_400_is_not_retried_and_401_names_the_connection(
    abm: Any, hook: AbmHook, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook.create_export_job(TYPE, "0 6 1 * *")
    async with AbmAsyncHook() as async_hook:
        with pytest.raises(AbmApiError) as info:
            await _collect(async_hook, order_by="nonsense")
    assert (info.value.http_status, info.value.status) == (400, "INVALID_ARGUMENT")
    assert "orderBy" in str(info.value)
    monkeypatch.setenv(
        "AIRFLOW_CONN_ABM_WRONG",
        f'{{"conn_type": "abm", "host": "{abm.base_url}", "password": "bad-key-99"}}',
    )
    async with AbmAsyncHook("abm_wrong") as async_hook:
        with pytest.raises(AbmApiError) as wrong:
            await _collect(async_hook)
    assert wrong.value.http_status == 401 and "abm_wrong" in str(wrong.value)
    assert "bad-key-99" not in str(wrong.value)
    assert len(seen(abm, method="GET", path=EXECUTIONS)) == 2


async def test_attempts_and_retry_warnings_count_the_first_try(
    abm: Any, hook: AbmHook, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first attempt runs outside the retry loop; counts and warnings must not show the seam."""
    hook.create_export_job(TYPE, "0 6 1 * *")
    for _ in range(3):
        abm.inject_fault(origin="api", method="GET", path=EXECUTIONS, kind="status", status=500)
    async with AbmAsyncHook(max_attempts=3, retry_max_wait=0.1) as async_hook:
        with pytest.raises(AbmApiError) as info:
            await _collect(async_hook)
    assert info.value.http_status == 500 and info.value.attempts == 3
    assert re.findall(r"attempt (\d)/3, retrying in", capsys.readouterr().out) == ["1", "2"]

    async with AbmAsyncHook() as async_hook:
        with pytest.raises(AbmApiError) as unknown:
            await _collect(async_hook, order_by="nonsense")
    assert unknown.value.http_status == 400 and unknown.value.attempts == 1
