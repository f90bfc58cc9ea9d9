"""The API origin: FastAPI routes for Account Lists v2 and Export Jobs v1, and their error mapping.

Request models give the OpenAPI document real schemas (so a fuzzer reaches valid requests) and catch
shape errors; every rule beyond shape lives in `service.Emulator`. FastAPI's default 422 and HTML/plain
errors are replaced by the service's error body so a client only ever parses one error shape.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.json_schema import WithJsonSchema
from starlette.exceptions import HTTPException as StarletteHTTPException

from abm_emulator.admin import admin_router
from abm_emulator.errors import ApiError, error_payload, status_name
from abm_emulator.model import Account
from abm_emulator.service import MAX_ACCOUNTS_PER_REQUEST, Emulator

NonEmpty = Annotated[str, Field(min_length=1, max_length=1024)]
Text = Annotated[str, Field(max_length=1024)]
# Optional fields: None only stands for "left out" (explicit null is refused by `AccountRef`), so the
# OpenAPI schema shows the type a value must have when given, without null.
OptionalNonEmpty = Annotated[
    NonEmpty | None, WithJsonSchema({"type": "string", "minLength": 1, "maxLength": 1024})
]
OptionalCrmType = Annotated[
    Literal["SALESFORCE"] | None, WithJsonSchema({"type": "string", "enum": ["SALESFORCE"]})
]


class _Body(BaseModel):
    # strict: "5" is not a number and 5 is not a string, as in a protobuf JSON gateway.
    model_config = ConfigDict(strict=True, extra="ignore")


class FolderCreate(_Body):
    folderName: NonEmpty
    folderAccess: Literal["FOLDER_ACCESS_UNSPECIFIED", "PUBLIC", "READ_ONLY"] = "FOLDER_ACCESS_UNSPECIFIED"


class ListCreate(_Body):
    listName: NonEmpty
    folderId: NonEmpty


class AccountRef(_Body):
    """Only ``id`` is required. ``crmOrgId`` and ``crmType`` may be left out (the service fills them with
    the customer account's CRM org and ``SALESFORCE``); when given they must be well formed, and an
    explicit ``null`` is not "left out"."""

    id: NonEmpty
    name: Text = ""
    crmOrgId: OptionalNonEmpty = None
    crmType: OptionalCrmType = None

    @field_validator("crmOrgId", "crmType", mode="before")
    @classmethod
    def _given_not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("must not be null: leave the field out to use the default")
        return value


class AccountsBody(_Body):
    accounts: Annotated[list[AccountRef], Field(json_schema_extra={"maxItems": MAX_ACCOUNTS_PER_REQUEST})]


class ExportJobCreate(_Body):
    type: Literal["TACTIC_PERFORMANCE", "DISPLAY_TACTIC_ACCOUNT_PERFORMANCE"]
    schedule: NonEmpty


def _key_from_authorization(header: str | None) -> str | None:
    """``Bearer KEY``, or ``Basic base64(KEY:)`` with an empty password, as the real service accepts."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer":
        return value or None
    if scheme.lower() == "basic":
        try:
            user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return user if sep and not password else None
    return None


def emulator_of(request: Request) -> Emulator:
    emulator: Emulator = request.app.state.emulator
    return emulator


def current_account(request: Request) -> Account:
    emulator = emulator_of(request)
    account = emulator.account_for_key(_key_from_authorization(request.headers.get("authorization")))
    emulator.sync()
    return account


AccountDep = Annotated[Account, Depends(current_account)]
EmulatorDep = Annotated[Emulator, Depends(emulator_of)]
PageSize = Annotated[int | None, Query(description="0 or absent: 100; above 100: clamped to 100")]
PageToken = Annotated[str | None, Query()]


def _field_path(loc: tuple[Any, ...]) -> str:
    """``("body", "accounts", 3, "id")`` -> ``accounts[3].id``: the field naming clients see."""
    parts = list(loc[1:]) if loc and loc[0] in {"body", "query", "path", "header"} else list(loc)
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not str(part).startswith(("function-", "literal[", "json-or-python")):
            text += ("." if text else "") + str(part)
    return text


def _validation_error(exc: RequestValidationError) -> ApiError:
    violations: list[tuple[str, str]] = []
    body_not_object = False
    for error in exc.errors():
        loc = tuple(error.get("loc", ()))
        field = _field_path(loc)
        kind = error.get("type", "")
        if kind == "json_invalid":
            return ApiError(400, "Request body is not valid JSON", "INVALID_ARGUMENT")
        if not field:
            body_not_object = True
            continue
        description = "is required" if kind == "missing" else str(error.get("msg", "is invalid"))
        violations.append((field, description))
    if body_not_object and not violations:
        return ApiError(400, "Request body must be a JSON object", "INVALID_ARGUMENT")
    fields = ", ".join(dict.fromkeys(f for f, _ in violations))
    return ApiError(400, f"Invalid request: {fields}", "INVALID_ARGUMENT", violations)


def _error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.payload(), status_code=error.code, headers=error.headers or None)


def create_api_app(emulator: Emulator) -> FastAPI:
    app = FastAPI(
        title="Account Lists v2 and Export Jobs v1 (abm-emulator)",
        version="1.0.0",
        description="Local emulator of the account-based-marketing API; see docs/service-behaviour.md.",
    )
    app.state.emulator = emulator

    @app.exception_handler(ApiError)
    async def on_api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return _error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error_response(_validation_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            message = f"No route {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"Method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        return JSONResponse(
            error_payload(exc.status_code, message, status_name(exc.status_code)),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def on_crash(_request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(error_payload(500, f"Internal error: {type(exc).__name__}", "INTERNAL"), 500)

    @app.post("/accountLists/v2/folders", tags=["Account Lists"])
    async def create_folder(body: FolderCreate, account: AccountDep, emu: EmulatorDep) -> dict[str, Any]:
        return emu.create_folder(account, body.folderName, body.folderAccess)

    @app.get("/accountLists/v2/folders", tags=["Account Lists"])
    async def list_folders(
        account: AccountDep, emu: EmulatorDep, pageSize: PageSize = None, pageToken: PageToken = None
    ) -> dict[str, Any]:
        return emu.list_folders(account, pageSize, pageToken)

    @app.post("/accountLists/v2/accountLists", tags=["Account Lists"])
    async def create_list(body: ListCreate, account: AccountDep, emu: EmulatorDep) -> dict[str, Any]:
        return emu.create_list(account, body.listName, body.folderId)

    @app.get("/accountLists/v2/accountLists", tags=["Account Lists"])
    async def list_lists(
        account: AccountDep,
        emu: EmulatorDep,
        folderIds: Annotated[list[str] | None, Query()] = None,
        pageSize: PageSize = None,
        pageToken: PageToken = None,
    ) -> dict[str, Any]:
        return emu.list_lists(account, folderIds, pageSize, pageToken)

    @app.post("/accountLists/v2/accountLists/{listId}/accounts/add", tags=["Account Lists"])
    async def add_accounts(
        listId: str, body: AccountsBody, account: AccountDep, emu: EmulatorDep
    ) -> dict[str, Any]:
        return emu.add_accounts(account, listId, [a.model_dump() for a in body.accounts])

    @app.post("/accountLists/v2/accountLists/{listId}/accounts/remove", tags=["Account Lists"])
    async def remove_accounts(
        listId: str, body: AccountsBody, account: AccountDep, emu: EmulatorDep
    ) -> dict[str, Any]:
        return emu.remove_accounts(account, listId, [a.model_dump() for a in body.accounts])

    @app.post("/exports/v1/exportJobs", tags=["Export Jobs"])
    async def create_export_job(
        body: ExportJobCreate, account: AccountDep, emu: EmulatorDep
    ) -> dict[str, Any]:
        return emu.create_job(account, body.type, body.schedule)

    @app.get("/exports/v1/exportJobs/{type}/executions", tags=["Export Jobs"])
    async def list_executions(
        type: str,
        account: AccountDep,
        emu: EmulatorDep,
        pageSize: PageSize = None,
        pageToken: PageToken = None,
        orderBy: Annotated[str | None, Query()] = None,
        filter: Annotated[str | None, Query()] = None,
    ) -> dict[str, Any]:
        return await emu.list_executions(
            account, type, page_size=pageSize, page_token=pageToken, order_by=orderBy, filter_=filter
        )

    app.include_router(admin_router, include_in_schema=False)
    return app
