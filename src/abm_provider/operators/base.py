"""What every ABM operator shares: the connection, the request settings, a cached hook, and when
an argument is checked.

The rules for a value are :mod:`abm_provider.common.arguments`' (hooks and engines check with them
too); what is the operators' own is the moment: a value known when the DAG is parsed is checked then
(:func:`check_known`), a template or an XComArg once rendered, where a bad value fails the task
without retries (:func:`fail_on_bad_argument`).

Operators only orchestrate; the hook owns requests, retries and create-or-reuse. The request
settings have one name each across the hook, the operators, the sensor and the connection extra
(``max_attempts``, ``retry_max_wait``, ``request_timeout``); any other hook setting goes in
``hook_params``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator

from abm_provider.accounts.validation import KNOWN_CRM_TYPES, check_batch_size, normalise_column_map
from abm_provider.common.arguments import check_choice, check_id, check_positive
from abm_provider.common.concurrency import check_in_flight
from abm_provider.compat import AirflowFailException
from abm_provider.hooks.settings import TaskSettings

if TYPE_CHECKING:
    from airflow.sdk import Context

    from abm_provider.hooks.abm import AbmHook


def check_known(check: Callable[[Any, str], object], value: Any, name: str) -> None:
    """Run a check at DAG parse time when the value is already known; a template or an XComArg is
    checked in execute, once rendered (:func:`fail_on_bad_argument`)."""
    if not is_deferred(value):
        check(value, name)


def check_account_arguments(
    list_id: Any,
    column_map: Any,
    default_crm_type: str | None,
    batch_size: int,
    max_in_flight: int,
    progress_interval: float,
) -> None:
    """The checks every account-list membership operator (add, remove, sync) makes of its rows'
    arguments: the list (``None`` for an operator of many lists, which checks its own), how rows
    read, and how they are sent."""
    check_batch_size(batch_size)
    check_in_flight(max_in_flight)
    check_positive(progress_interval, "progress_interval")
    if column_map is not None and isinstance(column_map, Mapping):
        normalise_column_map(column_map)
    if default_crm_type is not None:
        check_choice(default_crm_type, "default_crm_type", sorted(KNOWN_CRM_TYPES))
    if list_id is not None:
        check_known(check_id, list_id, "list_id")


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


class AbmBaseOperator(TaskSettings, BaseOperator):
    """Base of the ABM operators and the sensor: the connection and request settings of
    :class:`~abm_provider.hooks.settings.TaskSettings`, the hook made from them (cached as ``hook``),
    and XCom keys of their own."""

    ui_color = "#e8f0fe"

    def __init__(
        self,
        *,
        abm_conn_id: str = "abm_default",
        max_attempts: int | None = None,
        retry_max_wait: float | None = None,
        request_timeout: float | None = None,
        hook_params: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.set_hook_settings(abm_conn_id, max_attempts, retry_max_wait, request_timeout, hook_params)

    def get_hook(self) -> AbmHook:
        """A new hook with this task's settings (one per thread where requests run side by side)."""
        from abm_provider.hooks.abm import AbmHook

        return AbmHook(self.abm_conn_id, **self.hook_kwargs())

    @cached_property
    def hook(self) -> AbmHook:
        """The task's hook, made on first use."""
        return self.get_hook()

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


class AccountSourceOperator(AbmBaseOperator):
    """Base of the operators that send a list the accounts of a source (add, remove, sync): ``.sql``
    files are templates, and the UI renders the source's query and values and shows them in one colour."""

    template_ext: Sequence[str] = (".sql",)
    template_fields_renderers: ClassVar[dict[str, str]] = {
        "sql": "sql",
        "parameters": "json",
        "column_map": "json",
    }
    ui_color = "#fce8e6"
