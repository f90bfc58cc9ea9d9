"""What every hostile test asserts: an ``AbmApiError`` of the right kind, in time, with no secret in it.

``failure(...)``/``afailure(...)`` run one call and return the exception it raised with the time it
took; ``assert_api_error`` checks the type first (a raw ``requests``/``aiohttp``/``RecursionError``/
``ValueError`` is the most important failure to report), then the time, then (given ``caplog``) that
no secret is in it, then the kind;
``assert_no_secret`` searches the error (text, repr, attributes, pickle, formatted traceback) and every
captured log record for the key, raw and inside the Basic token, and for the download signature.

The calls themselves are named (``SYNC_CALLS``, ``ASYNC_CALLS``) so a test can be parametrized over
the sync and async hooks without repeating their set-up and clean-up; ``trigger_events`` runs an
``ExecutionCompleteTrigger`` to its end, bounded by its deadline.
"""

from __future__ import annotations

import asyncio
import base64
import pickle
import time
import traceback
import tracemalloc
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import pytest

from abm_provider.exceptions import AbmApiError

KEY = "hostile-KEY-5e1c9a"
SIGNATURE = "hostileSig0b7d4e2f9a"
TYPE = "TACTIC_PERFORMANCE"
#: A kind each error must carry: see the contract in the suite's task description.
KINDS = {
    "answer",
    "connect",
    "lost",
    "timeout",
    "tls",
    "redirect",
    "unsafe_url",
    "too_large",
    "malformed",
    "paging",
}
#: Longest message the contract allows from an error body.
MAX_MESSAGE = 400


def key_forms(key: str = KEY) -> list[str]:
    """The key as it travels: raw, and base64 of ``key:`` in a Basic token, with and without padding."""
    token = base64.b64encode(f"{key}:".encode()).decode()
    return [key, token, token.rstrip("=")]


def secrets(key: str = KEY) -> list[str]:
    return [*key_forms(key), SIGNATURE]


def signed_link(base: str, path: str = "/bucket/file.csv") -> str:
    """A pre-signed-looking download link on ``base`` whose signature is :data:`SIGNATURE`."""
    return f"{base}{path}?X-Amz-Expires=900&X-Amz-Signature={SIGNATURE}"


# --- running one call -------------------------------------------------------------------------------


def failure(call: Callable[[], Any]) -> tuple[Exception | None, float]:
    """Run ``call``; the exception it raised (``None`` if it returned) and the seconds it took."""
    started = time.monotonic()
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - what it raised is the subject of the test
        return exc, time.monotonic() - started
    return None, time.monotonic() - started


async def afailure(call: Callable[[], Awaitable[Any]]) -> tuple[Exception | None, float]:
    started = time.monotonic()
    try:
        await call()
    except Exception as exc:  # noqa: BLE001
        return exc, time.monotonic() - started
    return None, time.monotonic() - started


def traced_peak(call: Callable[[], Any]) -> tuple[Exception | None, float, int]:
    """:func:`failure` under ``tracemalloc``: also the peak of Python memory allocated meanwhile."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        err, elapsed = failure(call)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return err, elapsed, peak - base


async def atraced_peak(call: Callable[[], Awaitable[Any]]) -> tuple[Exception | None, float, int]:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        err, elapsed = await afailure(call)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return err, elapsed, peak - base


def describe(err: BaseException | None) -> str:
    if err is None:
        return "no exception"
    return f"{type(err).__module__}.{type(err).__name__}: {str(err)[:500]}"


def assert_api_error(
    err: BaseException | None,
    elapsed: float,
    *,
    kinds: Iterable[str] | None,
    within: float,
    http_status: int | None | type[Ellipsis] = ...,
    caplog: pytest.LogCaptureFixture | None = None,
) -> AbmApiError:
    """``err`` is an :class:`AbmApiError` raised within ``within`` seconds, of one of ``kinds``.

    ``kinds=None`` skips the kind (a test that checks it itself); ``http_status`` is checked when given;
    with ``caplog``, :func:`assert_no_secret` runs before the kind is checked.
    """
    assert isinstance(err, AbmApiError), f"expected AbmApiError, got {describe(err)}"
    assert elapsed < within, f"took {elapsed:.1f} s (bound {within} s): {describe(err)}"
    if http_status is not ...:
        assert err.http_status == http_status, f"http_status {err.http_status}, expected {http_status}: {err}"
    if caplog is not None:
        assert_no_secret(err, caplog)
    if kinds is not None:
        allowed = set(kinds)
        kind = getattr(err, "kind", "<no kind attribute>")
        assert kind in allowed, f"kind {kind!r}, expected one of {sorted(allowed)}: {describe(err)}"
    return err


# --- secrets ------------------------------------------------------------------------------------------


def _texts_of_error(err: BaseException) -> list[tuple[str, str | bytes]]:
    found: list[tuple[str, str | bytes]] = [
        ("str(err)", str(err)),
        ("repr(err)", repr(err)),
        ("err.args", repr(err.args)),
        ("traceback", "".join(traceback.format_exception(err))),
    ]
    for name, value in vars(err).items():
        found.append((f"err.{name}", repr(value)))
    try:
        found.append(("pickle.dumps(err)", pickle.dumps(err)))
    except Exception as exc:  # noqa: BLE001 - an error that cannot be pickled is reported, not hidden
        found.append(("pickle.dumps(err) failed", repr(exc)))
    return found


def _texts_of_logs(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for record in caplog.records:
        where = f"log record {record.name}:{record.levelname}"
        try:
            message = record.getMessage()
        except Exception as exc:  # noqa: BLE001
            message = f"<getMessage failed: {exc!r}> {record.msg!r}"
        found.append((where, message))
        found.append((f"{where} args", repr(record.args)))
        if record.exc_info and record.exc_info[1] is not None:
            found.append((f"{where} exc_info", "".join(traceback.format_exception(record.exc_info[1]))))
        if record.exc_text:
            found.append((f"{where} exc_text", record.exc_text))
    return found


def leaks(
    err: BaseException | None,
    caplog: pytest.LogCaptureFixture | None,
    hidden: Iterable[str],
    *,
    events: Iterable[Any] = (),
) -> list[str]:
    """Where any of ``hidden`` appears (empty when nowhere)."""
    texts: list[tuple[str, str | bytes]] = []
    if err is not None:
        texts += _texts_of_error(err)
    if caplog is not None:
        texts += _texts_of_logs(caplog)
    for index, event in enumerate(events):
        texts.append((f"event {index}", repr(getattr(event, "payload", event))))
    found = []
    for secret in hidden:
        for where, text in texts:
            needle: str | bytes = secret.encode() if isinstance(text, bytes) else secret
            if needle in text:  # type: ignore[operator]
                found.append(f"{secret!r} in {where}")
    return sorted(set(found))


def assert_no_secret(
    err: BaseException | None,
    caplog: pytest.LogCaptureFixture | None,
    hidden: Iterable[str] | None = None,
    *,
    events: Iterable[Any] = (),
) -> None:
    found = leaks(err, caplog, secrets() if hidden is None else hidden, events=events)
    assert not found, "secret leaked: " + "; ".join(found[:8])


def assert_short_message(err: AbmApiError) -> None:
    assert len(err.message) <= MAX_MESSAGE, f"message of {len(err.message)} chars: {err.message[:200]}..."


# --- named calls ----------------------------------------------------------------------------------------


def _sync_calls() -> dict[str, Callable[[Any], Any]]:
    return {
        "iter_folders": lambda hook: list(hook.iter_folders()),
        "iter_account_lists": lambda hook: list(hook.iter_account_lists()),
        "iter_executions": lambda hook: list(hook.iter_executions(TYPE)),
        "create_folder": lambda hook: hook.create_folder("f"),
        "add_accounts": lambda hook: hook.add_accounts("list-1", [{"id": "001000000000001"}]),
    }


SYNC_CALLS = _sync_calls()
ASYNC_CALLS = ("iter_folders", "iter_executions")


def sync_call(conn_id: str, name: str = "iter_folders", **hook_kwargs: Any) -> Callable[[], Any]:
    """A no-argument call of ``AbmHook(conn_id).<name>`` that closes the hook afterwards."""
    from abm_provider.hooks.abm import AbmHook

    def call() -> Any:
        hook = AbmHook(conn_id, **hook_kwargs)
        try:
            return SYNC_CALLS[name](hook)
        finally:
            hook.close()

    return call


def async_call(conn_id: str, name: str = "iter_folders", **hook_kwargs: Any) -> Callable[[], Awaitable[Any]]:
    """The same for ``AbmAsyncHook``; the hook is closed (``await hook.close()``) afterwards."""
    from abm_provider.hooks.abm import AbmAsyncHook

    async def call() -> Any:
        hook = AbmAsyncHook(conn_id, **hook_kwargs)
        try:
            if name == "iter_folders":
                return [e async for e in hook.iter_folders()]
            return [e async for e in hook.iter_executions(TYPE)]
        finally:
            await hook.close()

    return call


def download_call(conn_id: str, uri: str, **hook_kwargs: Any) -> Callable[[], Any]:
    """``AbmHook(conn_id).download(uri, BytesIO())``."""
    import io

    from abm_provider.hooks.abm import AbmHook

    def call() -> Any:
        hook = AbmHook(conn_id, **hook_kwargs)
        try:
            return hook.download(uri, io.BytesIO())
        finally:
            hook.close()

    return call


async def trigger_events(
    conn_id: str, *, request_timeout: float, late: Callable[[], str], seconds: float = 2, grace: float = 10
) -> tuple[list[Any], float]:
    """Run an ``ExecutionCompleteTrigger`` whose deadline is ``seconds`` away; its events and deadline.

    The test fails with ``late()`` in the message when no event came ``grace`` seconds after the deadline.
    """
    from abm_provider.triggers.exports import ExecutionCompleteTrigger

    deadline = time.time() + seconds
    trigger = ExecutionCompleteTrigger(
        abm_conn_id=conn_id,
        export_type=TYPE,
        poll_interval=1,
        deadline=deadline,
        request_timeout=request_timeout,
    )

    async def collect() -> list[Any]:
        return [event async for event in trigger.run()]

    try:
        events = await asyncio.wait_for(collect(), timeout=deadline + grace - time.time())
    except TimeoutError:
        pytest.fail(f"no event {grace:g} s after the deadline: {late()}")
    return events, deadline
