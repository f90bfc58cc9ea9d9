"""What a hook reads from its connection: base URL, key, TLS, and the bounds of every request.

One table (:class:`Limits`) names each bound once; the connection extra, the hook's keyword
arguments and the operators' ``hook_params`` all use these names, and each value is checked here,
with an error that names the connection and the setting.
"""

from __future__ import annotations

import base64
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from abm_provider.common.arguments import check_choice
from abm_provider.common.urls import Redactor, normalise_base_url, url_origin

AuthType = Literal["bearer", "basic"]
AUTH_TYPES: tuple[AuthType, ...] = ("bearer", "basic")


def _bound(default: float, low: float, high: float, label: str, help: str) -> Any:
    """One row of :class:`Limits`: the default and the accepted range (whole numbers when the default is
    an int), and the connection form's label and help."""
    whole = isinstance(default, int)
    return field(
        default=default, metadata={"label": label, "help": help, "low": low, "high": high, "whole": whole}
    )


@dataclass(frozen=True)
class Limits:
    """Every bound a hook puts on one call; docs/connection.md documents each one."""

    max_attempts: int = _bound(
        5, 1, 100, "Max attempts", "Attempts per call on 429/423/5xx/lost connections."
    )
    retry_max_wait: float = _bound(
        60.0,
        0,
        86400,
        "Longest retry wait (s)",
        "Longest single back-off wait in seconds; a longer Retry-After ends the call.",
    )
    request_timeout: float = _bound(
        60.0,
        0.01,
        86400,
        "Request deadline (s)",
        "Total deadline of one API attempt in seconds: connect, headers and body together.",
    )
    download_timeout: float = _bound(
        3600.0,
        0.01,
        7 * 86400,
        "Download deadline (s)",
        "Total deadline of one download attempt in seconds (a stalled read ends at request_timeout).",
    )
    max_pages: int = _bound(1000, 1, 10**6, "Max pages per listing", "Pages one listing may read.")
    page_cursor_memory: int = _bound(
        1000,
        1,
        10**6,
        "Page cursors remembered",
        "Recent page tokens (cursors) the loop guard remembers to catch a listing that loops.",
    )
    max_error_bytes: int = _bound(
        64 << 10,
        0,
        64 << 10,
        "Error body bytes read",
        "Bytes of an error body read; the rest is discarded unread.",
    )
    max_response_bytes: int = _bound(
        32 << 20, 1024, 1 << 30, "Largest answer (bytes)", "Largest JSON answer read, in bytes."
    )
    max_json_depth: int = _bound(
        32, 2, 500, "Deepest JSON nesting", "Deepest JSON nesting accepted in an answer."
    )
    max_redirects: int = _bound(5, 0, 20, "Download redirects", "Redirect hops a download follows.")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def read(cls, given: Mapping[str, Any], extra: Mapping[str, Any], where: str) -> Limits:
        """Hook arguments (``given``) win over the connection extra; ``None`` means "not set"."""
        values: dict[str, Any] = {}
        for spec in fields(cls):
            value = given.get(spec.name)
            if value is None:
                value = extra.get(spec.name)
            if value is not None:
                bounds = {k: spec.metadata[k] for k in ("low", "high", "whole")}
                values[spec.name] = _number(value, spec.name, where, **bounds)
        return cls(**values)


def limit_fields() -> dict[str, Any]:
    """The connection form's fields for the request settings, from the one table above."""
    form: dict[str, Any] = {}
    for spec in fields(Limits):
        kind = "integer" if spec.metadata["whole"] else "number"
        # The default is the field's starting value: the form shows it and saves it in the extra.
        schema: dict[str, Any] = {
            "type": [kind, "null"],
            "minimum": spec.metadata["low"],
            "default": spec.default,
        }
        if math.isfinite(spec.metadata["high"]):
            schema["maximum"] = spec.metadata["high"]
        default = spec.default if spec.metadata["whole"] else f"{spec.default:g}"
        help_text = f"{spec.metadata['help']} Default {default}."
        form[spec.name] = {"label": spec.metadata["label"], "description": help_text, "schema": schema}
    return form


def _number(value: Any, name: str, where: str, *, low: float, high: float, whole: bool) -> int | float:
    kind = "a whole number" if whole else "a number"
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
        if whole and number != int(number):
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{where}: {name} must be {kind}, got {value!r}") from None
    if not (low <= number <= high):
        raise ValueError(f"{where}: {name} must be between {low:g} and {high:g}, got {value!r}")
    return int(number) if whole else number


#: The request settings a task names besides its connection, in ``set_hook_settings``'s order.
TASK_SETTINGS = ("max_attempts", "retry_max_wait", "request_timeout", "hook_params")


class TaskSettings:
    """The connection and request settings of a task (operator, sensor or trigger), one name each.

    :param abm_conn_id: connection of type ``abm``.
    :param max_attempts: attempts per request on 429/5xx/connection errors (connection default if None).
    :param retry_max_wait: longest single back-off wait in seconds (connection default if None).
    :param request_timeout: total deadline of one request in seconds (connection default if None).
    :param hook_params: any other hook setting by name (``max_pages``, ``download_timeout``...).
    """

    abm_conn_id: str
    max_attempts: int | None
    retry_max_wait: float | None
    request_timeout: float | None
    hook_params: dict[str, Any]

    def set_hook_settings(
        self,
        abm_conn_id: str,
        max_attempts: int | None,
        retry_max_wait: float | None,
        request_timeout: float | None,
        hook_params: Mapping[str, Any] | None,
    ) -> None:
        """Keep the settings (``None``: as the connection says)."""
        self.abm_conn_id = abm_conn_id
        self.max_attempts = max_attempts
        self.retry_max_wait = retry_max_wait
        self.request_timeout = request_timeout
        self.hook_params = dict(hook_params or {})

    def hook_settings(self) -> dict[str, Any]:
        """The settings under their argument names, as a trigger takes and serializes them."""
        return {name: getattr(self, name) for name in ("abm_conn_id", *TASK_SETTINGS)}

    def hook_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of the task's hook: ``hook_params``, with the named settings winning."""
        named = {name: getattr(self, name) for name in TASK_SETTINGS if name != "hook_params"}
        return {**self.hook_params, **named}


#: Airflow's connection test (the UI's Test button) runs the hook on a copy of the form's values under
#: a random 8-character id, exported as ``AIRFLOW_CONN_<ID>`` for the length of the test.
_TRANSIENT_TEST_ID = re.compile(r"[A-Za-z0-9]{8}")


def is_test_copy(conn_id: str) -> bool:
    """Whether ``conn_id`` is the throwaway id under which Airflow's connection test runs a form.

    That id means nothing to the person who pressed Test (the form may not even be saved yet).
    """
    return bool(_TRANSIENT_TEST_ID.fullmatch(conn_id)) and f"AIRFLOW_CONN_{conn_id.upper()}" in os.environ


def connection_name(conn_id: str) -> str:
    """How a message names a connection: ``connection 'abm_prod'``, or ``this connection`` for a test copy."""
    return "this connection" if is_test_copy(conn_id) else f"connection {conn_id!r}"


@dataclass(frozen=True)
class AbmSettings:
    """Everything a hook needs from the connection, checked once; ``repr`` leaves the key out."""

    conn_id: str
    base_url: str
    api_key: str
    auth_type: AuthType
    verify: bool | str
    limits: Limits

    def __repr__(self) -> str:
        return (
            f"AbmSettings(conn_id={self.conn_id!r}, base_url={self.base_url!r}, api_key='***', "
            f"auth_type={self.auth_type!r}, verify={self.verify!r}, limits={self.limits!r})"
        )

    @property
    def origin(self) -> tuple[str, str, int]:
        """The API origin; the key goes to this origin and no other."""
        return url_origin(self.base_url)

    @property
    def name(self) -> str:
        """The connection as messages name it (see :func:`connection_name`)."""
        return connection_name(self.conn_id)

    def auth_header(self) -> dict[str, str]:
        """``Authorization`` for the API: ``Bearer <key>``, or Basic with the key as user name."""
        if self.auth_type == "basic":
            token = base64.b64encode(f"{self.api_key}:".encode()).decode("ascii")
            return {"Authorization": f"Basic {token}"}
        return {"Authorization": f"Bearer {self.api_key}"}

    def redactor(self) -> Redactor:
        """The redactor for this connection: the key in every form it is sent."""
        token = self.auth_header()["Authorization"].split(" ", 1)[1]
        return Redactor([self.api_key, token, token.rstrip("=")])

    def with_limits(self, **changes: Any) -> AbmSettings:
        """The same connection with some bounds changed (a connection test makes one short attempt)."""
        return replace(self, limits=replace(self.limits, **changes))

    @classmethod
    def from_connection(cls, conn: Any, **given: Any) -> AbmSettings:
        """Read base URL, key, auth type, TLS and bounds; ``given`` (hook arguments) win over the extra.

        Extra keys may be plain (``max_attempts``) or as older connection forms stored them
        (``extra__abm__max_attempts``); empty values mean "not set".
        """
        conn_id = str(getattr(conn, "conn_id", None) or "abm_default")
        where = connection_name(conn_id)
        extra = _extra(conn, where)
        base_url = normalise_base_url(getattr(conn, "host", None), getattr(conn, "port", None), where=where)
        api_key = getattr(conn, "password", None) or ""
        if not api_key:
            raise ValueError(f"{where} has no API key: put the key in its password field")
        auth_type = str(extra.get("auth_type") or "bearer").strip().lower()
        return cls(
            conn_id=conn_id,
            base_url=base_url,
            api_key=api_key,
            auth_type=check_choice(auth_type, f"{where} extra auth_type", AUTH_TYPES),
            verify=_verify(extra.get("verify"), extra.get("ca_bundle"), where),
            limits=Limits.read(given, extra, where),
        )


def _extra(conn: Any, where: str) -> dict[str, Any]:
    try:
        raw = getattr(conn, "extra_dejson", None) or {}
    except Exception as err:  # a malformed extra string
        raise ValueError(f"{where} has an extra that is not a JSON object: {err}") from err
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} extra must be a JSON object")
    known = {*Limits.names(), "verify", "ca_bundle", "auth_type"}
    settings: dict[str, Any] = {}
    for key, value in raw.items():
        name = str(key).removeprefix("extra__abm__")
        if name in known and value not in (None, ""):
            settings[name] = value
    return settings


def _verify(value: Any, ca_bundle: Any, where: str) -> bool | str:
    """TLS verification for ``requests``/``aiohttp``: ``True``, ``False`` or the CA bundle path to trust.

    ``verify`` is ``true``/``false`` (also as text; the connection form's checkbox) and ``ca_bundle``
    the path of a CA bundle file (the form's text field). ``verify`` may also hold the path itself,
    as connections made before the form had ``ca_bundle`` do.
    """
    if value is None or isinstance(value, bool):
        checked: bool | str = value is not False
    elif isinstance(value, str):
        lowered = value.strip().lower()
        flags = ("true", "1", "yes", "false", "0", "no")
        checked = lowered in ("true", "1", "yes") if lowered in flags else value.strip()
    else:
        raise ValueError(f"{where} extra verify must be true, false or a CA bundle path, got {value!r}")
    if ca_bundle is None:
        return checked
    if not isinstance(ca_bundle, str) or not ca_bundle.strip():
        raise ValueError(f"{where} extra ca_bundle must be the path of a CA bundle file, got {ca_bundle!r}")
    if checked is False:
        raise ValueError(
            f"{where} sets ca_bundle {ca_bundle!r} with verify off: turn verify on to trust that CA, "
            "or leave ca_bundle empty"
        )
    if isinstance(checked, str) and checked != ca_bundle.strip():
        raise ValueError(f"{where} gives two CA bundles, verify {checked!r} and ca_bundle {ca_bundle!r}")
    return ca_bundle.strip()
