"""What every ABM operator shares: the connection, the request settings, a cached hook, and the
argument checks several operators make (so each rule, and its error message, is written once).

Operators only orchestrate; the hook owns requests, retries and create-or-reuse. The request
settings have one name each across the hook, the operators, the sensor and the connection extra
(``max_attempts``, ``retry_max_wait``, ``request_timeout``); any other hook setting goes in
``hook_params``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from abm_provider.compat import AirflowFailException
from abm_provider.hooks._settings import task_settings

if TYPE_CHECKING:
    from airflow.sdk import Context

    from abm_provider.hooks.abm import AbmHook


#: How the UI renders the templated source of the account-list operators.
ACCOUNT_SOURCE_RENDERERS: dict[str, str] = {"sql": "sql", "parameters": "json", "column_map": "json"}
#: The account-list membership operators' colour in the UI.
ACCOUNT_LISTS_COLOR = "#fce8e6"


def check_id(value: Any, name: str) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is safe as one URL path segment.

    A list id such as ``"../folders"`` or ``"x/accounts/remove"`` would address another endpoint; the
    hook refuses it too, but only when the first request is built, as a plain ``ValueError`` that
    Airflow retries in vain. Checking here fails the DAG at parse time, or the task without retries.
    """
    from abm_provider.hooks._urls import path_segment

    path_segment(value, name)


def check_text(value: Any, name: str) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a non-blank string."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__} {value!r}")
    if not value.strip():
        raise ValueError(f"{name} is empty")


def check_choice(value: Any, name: str, choices: Sequence[str]) -> None:
    """Raise ``ValueError`` naming ``name`` and what it accepts unless ``value`` is one of ``choices``.

    Two choices read as ``'a' or 'b'``, more as a list, so every operator words the error alike.
    """
    if value not in choices:
        allowed = " or ".join(map(repr, choices)) if len(choices) == 2 else f"one of {list(choices)}"
        raise ValueError(f"{name} must be {allowed}, got {value!r}")


def check_positive(value: float, name: str) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is above zero (an interval, a wait)."""
    if value <= 0:
        raise ValueError(f"{name} must be positive")


def fail_on_bad_argument(check: Callable[[Any, str], object], value: Any, name: str) -> None:
    """Run a parse-time check at execute time, where a rendered value is final: no retry can fix it."""
    try:
        check(value, name)
    except ValueError as err:
        raise AirflowFailException(str(err)) from err


def is_xcom_arg(value: Any) -> bool:
    """Whether ``value`` is an XComArg (or another value Airflow resolves at run time)."""
    from airflow.sdk.definitions._internal.mixins import ResolveMixin

    return isinstance(value, ResolveMixin)


def is_deferred(value: Any) -> bool:
    """Whether a value is only known at run time (a Jinja template or an XComArg), so not checked yet."""
    return (isinstance(value, str) and "{{" in value) or is_xcom_arg(value)


class AbmHookSettings:
    """The connection and request settings of an ABM task, and the hook made from them.

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
        hook_params: dict[str, Any] | None,
        **deprecated: float | None,
    ) -> None:
        """Keep the settings; a value under a deprecated name (``max_wait=...``) warns and still counts."""
        for old, value in deprecated.items():
            if value is not None:
                warnings.warn(
                    f"{type(self).__name__}: {old} is deprecated, use retry_max_wait",
                    DeprecationWarning,
                    stacklevel=4,
                )
                retry_max_wait = value if retry_max_wait is None else retry_max_wait
        self.abm_conn_id = abm_conn_id
        self.max_attempts = max_attempts
        self.retry_max_wait = retry_max_wait
        self.request_timeout = request_timeout
        self.hook_params = dict(hook_params or {})

    def get_hook(self) -> AbmHook:
        """A new hook with this task's settings (one per thread where requests run side by side)."""
        from abm_provider.hooks.abm import AbmHook

        settings = task_settings(
            self.hook_params, self.max_attempts, self.retry_max_wait, self.request_timeout
        )
        return AbmHook(self.abm_conn_id, **settings)

    @cached_property
    def hook(self) -> AbmHook:
        """The task's hook, made on first use."""
        return self.get_hook()


class AbmBaseOperator(AbmHookSettings, BaseOperator):
    """Base of the ABM operators: the settings of :class:`AbmHookSettings` (``max_wait`` is the
    deprecated name of ``retry_max_wait``), a cached ``hook``, and XCom keys of their own."""

    ui_color = "#e8f0fe"

    def __init__(
        self,
        *,
        abm_conn_id: str = "abm_default",
        max_attempts: int | None = None,
        retry_max_wait: float | None = None,
        request_timeout: float | None = None,
        hook_params: dict[str, Any] | None = None,
        max_wait: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.set_hook_settings(
            abm_conn_id, max_attempts, retry_max_wait, request_timeout, hook_params, max_wait=max_wait
        )

    @staticmethod
    def push(context: Context, **values: Any) -> None:
        """Push ``values`` under their own XCom keys, so ``op.output["list_id"]`` works in a DAG."""
        ti: Any = context.get("ti")
        if ti is not None and callable(getattr(ti, "xcom_push", None)):
            for key, value in values.items():
                ti.xcom_push(key=key, value=value)


def fail_if_final(err: Exception, what: str) -> None:
    """Raise ``AirflowFailException`` for an error no task retry can fix (409, 400, 401, 404...)."""
    if getattr(err, "http_status", None) is not None and not getattr(err, "transient", True):
        raise AirflowFailException(f"{what}: {err}") from err
