"""The admin API under ``/_admin``: what tests and demos use to drive and inspect the emulator.

It needs no credentials and is left out of the OpenAPI document: it is not part of the emulated
service, only of the harness around it. Bodies are parsed by hand so that a typo in a test's admin
call fails with a message naming the field rather than being ignored.
"""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from abm_emulator.errors import ApiError, invalid
from abm_emulator.faults import FaultInjector
from abm_emulator.model import EXPORT_TYPES
from abm_emulator.ratelimit import RateLimiter
from abm_emulator.requestlog import RequestLog
from abm_emulator.service import Emulator

admin_router = APIRouter(prefix="/_admin")


def _parts(request: Request) -> tuple[Emulator, FaultInjector, RequestLog, RateLimiter | None]:
    state = request.app.state
    return state.emulator, state.faults, state.request_log, state.rate_limiter


async def _json_object(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise ApiError(400, "Admin request body is not valid JSON", "INVALID_ARGUMENT") from None
    if not isinstance(body, dict):
        raise ApiError(400, "Admin request body must be a JSON object", "INVALID_ARGUMENT")
    return body


def _number(body: dict[str, Any], name: str, default: float, *, minimum: float = 0.0) -> float:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid(name, f"must be a number, got {value!r}")
    if value < minimum:
        raise invalid(name, f"must be >= {minimum:g}, got {value!r}")
    return float(value)


@admin_router.get("/health")
async def health() -> dict[str, Any]:
    return {"ok": True}


@admin_router.post("/reset")
async def reset(request: Request) -> dict[str, Any]:
    emulator, faults, request_log, limiter = _parts(request)
    emulator.reset()
    faults.clear()
    request_log.clear()
    if limiter is not None:
        limiter.clear()
    return {"ok": True, "clock": emulator.clock.describe()}


@admin_router.get("/state")
async def state(request: Request) -> dict[str, Any]:
    return _parts(request)[0].admin_state()


@admin_router.get("/accounts/{apiKey}/lists/{listId}/members")
async def members(apiKey: str, listId: str, request: Request) -> dict[str, Any]:
    emulator = _parts(request)[0]
    return {"members": emulator.members(emulator.account_for_key(apiKey), listId)}


@admin_router.get("/clock")
async def clock(request: Request) -> dict[str, Any]:
    return _parts(request)[0].clock.describe()


@admin_router.post("/clock/advance")
async def advance(request: Request) -> dict[str, Any]:
    emulator = _parts(request)[0]
    body = await _json_object(request)
    if "seconds" not in body:
        raise invalid("seconds", "is required")
    emulator.clock.advance(_number(body, "seconds", 0.0))
    emulator.sync()
    await emulator.render_recent()
    return emulator.clock.describe()


@admin_router.post("/exportJobs/{type}/fire")
async def fire(type: str, request: Request) -> dict[str, Any]:
    emulator = _parts(request)[0]
    body = await _json_object(request)
    if type not in EXPORT_TYPES:
        raise invalid("type", f"unknown export type {type!r}; known: {', '.join(EXPORT_TYPES)}")
    api_key = body.get("apiKey", next(iter(emulator.settings.api_keys)))
    if not isinstance(api_key, str) or api_key not in emulator.settings.api_keys:
        raise invalid("apiKey", "is not one of the emulator's --api-key values")
    outcome = body.get("outcome", "COMPLETE")
    if outcome not in ("COMPLETE", "FAILED"):
        raise invalid("outcome", f"must be COMPLETE or FAILED, got {outcome!r}")
    size = _number(body, "sizeBytes", emulator.settings.export_size_bytes, minimum=1)
    account = emulator.account_for_key(api_key)
    if type not in account.jobs:
        raise ApiError(
            404,
            f"No export job {type} in the account of this apiKey: create it with POST "
            "/exports/v1/exportJobs first",
            "NOT_FOUND",
        )
    return await emulator.fire(
        account,
        type,
        outcome=outcome,
        pending=_number(body, "pendingSeconds", 0.0),
        running=_number(body, "runningSeconds", 0.0),
        size_bytes=int(size),
    )


def _account_ids(body: dict[str, Any]) -> list[str]:
    unknown = sorted(set(body) - {"ids"})
    if unknown:
        raise invalid(unknown[0], "unknown field; known: ids")
    ids = body.get("ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
        raise invalid("ids", f"must be a non-empty list of account ids, got {ids!r}")
    return ids


def _unknown_ids(emulator: Emulator) -> dict[str, Any]:
    return {"ids": sorted(emulator.unknown_account_ids)}


@admin_router.get("/unknownAccounts")
async def unknown_accounts(request: Request) -> dict[str, Any]:
    return _unknown_ids(_parts(request)[0])


@admin_router.post("/unknownAccounts")
async def make_accounts_unknown(request: Request) -> dict[str, Any]:
    """``{"ids": [...]}``: the CRM no longer knows these ids, in every customer account: add answers
    them in ``accountsNotFound``, remove leaves them on the list and out of its answer."""
    emulator = _parts(request)[0]
    emulator.make_unknown(_account_ids(await _json_object(request)))
    return _unknown_ids(emulator)


@admin_router.delete("/unknownAccounts")
async def make_accounts_known(request: Request) -> dict[str, Any]:
    """``{"ids": [...]}``: these ids known again; no body: every id."""
    emulator = _parts(request)[0]
    body = await _json_object(request)
    emulator.make_known(_account_ids(body) if body else None)
    return _unknown_ids(emulator)


@admin_router.get("/faults")
async def list_faults(request: Request) -> dict[str, Any]:
    return {"faults": _parts(request)[1].describe()}


@admin_router.post("/faults")
async def add_fault(request: Request) -> dict[str, Any]:
    faults = _parts(request)[1]
    return faults.add(await _json_object(request))


@admin_router.delete("/faults")
async def clear_faults(request: Request) -> dict[str, Any]:
    _parts(request)[1].clear()
    return {"faults": []}


@admin_router.get("/requests")
async def requests_seen(request: Request) -> JSONResponse:
    """The log, with the JSON bodies it kept (up to 64 MiB of them).

    Answered as a `JSONResponse` so the C encoder serializes it: FastAPI's ``jsonable_encoder`` walks
    every value in Python, which takes seconds on the bodies of a long sync.
    """
    return JSONResponse({"requests": _parts(request)[2].entries()})


@admin_router.delete("/requests")
async def clear_requests(request: Request) -> dict[str, Any]:
    _parts(request)[2].clear()
    return {"requests": []}
