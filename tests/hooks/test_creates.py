"""Creates whose outcome is unknown: one retry driver per hook, steered by the call's ``on_unknown``.

A folder or list create looks for its effect before it is sent again (``Reconcile``); an export job
create is sent again and reads a conflict that follows as "an earlier attempt may have made it"
(``"resend"``). Either way a create spends one attempt budget, waits as the policy says (honouring
``Retry-After``) and reports how many attempts it made. Against the emulator, whose request log is
the judge, and :class:`~abm_provider.hooks._pipeline.Attempts` alone for what a server will not do.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks._pipeline import Attempts, Call, Reconcile
from abm_provider.hooks.abm import AbmAsyncHook, AbmHook
from abm_provider.hooks.endpoints import create_folder_call
from abm_provider.hooks.settings import Limits
from support.emulator_log import seen

FOLDERS = "/accountLists/v2/folders"
JOBS = "/exports/v1/exportJobs"
TYPE = "TACTIC_PERFORMANCE"


def _create_folder(hook: AbmHook) -> Any:
    return hook.create_folder("made once")


def _create_job(hook: AbmHook) -> Any:
    return hook.create_export_job(TYPE, "0 6 1 * *")


CREATES = [pytest.param(FOLDERS, _create_folder, id="folder"), pytest.param(JOBS, _create_job, id="job")]


@pytest.mark.parametrize(("path", "create"), CREATES)
def test_a_5xx_retry_after_on_a_create_is_waited_out(abm: Any, hook: AbmHook, path: str, create: Any) -> None:
    abm.inject_fault(origin="api", method="POST", path=path, kind="status", status=503, retryAfter="2")
    started = time.monotonic()
    create(hook)
    assert time.monotonic() - started >= 2.0, "sent again before the service's Retry-After"
    assert len(seen(abm, method="POST", path=path)) == 2


@pytest.mark.parametrize(("path", "create"), CREATES)
def test_a_create_that_keeps_failing_reports_every_attempt(abm: Any, path: str, create: Any) -> None:
    abm.inject_fault(origin="api", method="POST", path=path, kind="status", status=503, count=10)
    with pytest.raises(AbmApiError) as info:
        create(AbmHook(max_attempts=3, retry_max_wait=1))
    err = info.value
    assert err.http_status == 503 and err.outcome_unknown and err.transient
    assert err.attempts == 3 and "after 3 attempts" in str(err)
    assert len(seen(abm, method="POST", path=path)) == 3


@pytest.mark.parametrize(("path", "create"), CREATES)
def test_a_create_spends_one_attempt_budget(abm: Any, path: str, create: Any) -> None:
    # An unknown outcome, then refusals: the create's attempts are max_attempts in all, not per look.
    abm.inject_fault(origin="api", method="POST", path=path, kind="status", status=503)
    abm.inject_fault(origin="api", method="POST", path=path, kind="status", status=429, count=10)
    with pytest.raises(AbmApiError) as info:
        create(AbmHook(max_attempts=2, retry_max_wait=1))
    assert info.value.http_status == 429 and info.value.attempts == 2
    assert len(seen(abm, method="POST", path=path)) == 2


def test_a_failed_look_ends_the_create(abm: Any) -> None:
    """The look's listing has its own retries; when it fails, that is the error, without a re-post."""
    abm.inject_fault(origin="api", method="POST", path=FOLDERS, kind="status", status=503, when="after")
    abm.inject_fault(origin="api", method="GET", path=FOLDERS, kind="status", status=500, count=10)
    with pytest.raises(AbmApiError) as info:
        AbmHook(max_attempts=3, retry_max_wait=1)._call(create_folder_call("looked for", "PUBLIC", set()))
    assert info.value.method == "GET" and info.value.http_status == 500 and info.value.attempts == 3
    assert len(seen(abm, method="POST", path=FOLDERS)) == 1


async def test_the_async_driver_reconciles_a_create_as_the_sync_one_does(abm: Any) -> None:
    abm.inject_fault(origin="api", method="POST", path=FOLDERS, kind="status", status=503, when="after")
    async with AbmAsyncHook(retry_max_wait=1) as hook:
        made = await hook._call(create_folder_call("async", "PUBLIC", set()))
        listed = [f async for f in hook.iter_folders()]
    assert [f["uuid"] for f in listed] == [made["uuid"]] and made["name"] == "async"
    assert len(seen(abm, method="POST", path=FOLDERS)) == 1, "found by listing, not re-posted"


# --- Attempts alone ---------------------------------------------------------------------------------


def _error(status: int | None, *, unknown: bool = False, kind: str | None = None) -> AbmApiError:
    return AbmApiError(
        method="POST",
        path="/x",
        http_status=status,
        status=None,
        message="m",
        outcome_unknown=unknown,
        transient=unknown,
        kind=kind,
    )


def test_resend_reads_a_conflict_after_an_unknown_outcome_as_possibly_its_own() -> None:
    plain = Attempts("resend")
    conflict = _error(409)
    plain.failed(conflict)
    assert not conflict.outcome_unknown and "earlier attempt" not in str(conflict)
    after = Attempts("resend")
    after.failed(_error(None, unknown=True))
    after.failed(_error(429))
    conflict = _error(409)
    after.failed(conflict)
    assert conflict.outcome_unknown and "an earlier attempt failed with no answer" in str(conflict)


def test_a_look_that_finds_several_new_items_raises_the_unknown_outcome() -> None:
    look = Reconcile(Call("GET", "/x"), "items", lambda item: item.get("name") == "n")
    attempts = Attempts(look, logging.getLogger("test"))
    assert attempts.look is None
    unknown = _error(503, unknown=True)
    attempts.failed(unknown)
    assert attempts.look is look
    with pytest.raises(AbmApiError) as info:
        attempts.found([{"name": "n", "id": 1}, {"name": "other"}, {"name": "n", "id": 2}])
    assert info.value is unknown and info.value.outcome_unknown
    assert "2 new items of that name appeared" in str(info.value)


def test_a_look_that_finds_nothing_sends_again_and_looks_only_after_the_next_unknown() -> None:
    look = Reconcile(Call("GET", "/x"), "items", lambda item: True)
    attempts = Attempts(look, logging.getLogger("test"))
    attempts.failed(_error(None, unknown=True))
    assert attempts.found([]) is None and attempts.look is None
    attempts.failed(_error(429))
    assert attempts.look is None, "a refused attempt did nothing to look for"


def test_settling_waits_only_after_no_answer() -> None:
    bounds = Limits(request_timeout=4, retry_max_wait=3)
    look = Reconcile(Call("GET", "/x"), "items", lambda item: True)
    lost = Attempts(look)
    lost.failed(_error(None, unknown=True))
    assert lost.settle(0.5, bounds) == 3
    answered = Attempts(look)
    answered.failed(_error(503, unknown=True))
    assert answered.settle(0.5, bounds) == 0.5
    assert Attempts("resend").settle(0.5, bounds) == 0.5


def test_progress_resets_the_count_except_after_a_timeout() -> None:
    written = [0]
    attempts = Attempts(progress=lambda: written[0])
    assert attempts.failed(_error(None, unknown=True)) == 1
    written[0] = 100
    assert attempts.failed(_error(None, unknown=True, kind="lost")) == 1
    assert attempts.failed(_error(None, unknown=True, kind="lost")) == 2
    written[0] = 200
    assert attempts.failed(_error(None, unknown=True, kind="timeout")) == 3
