"""Operators for Account Lists v2: folders, lists, and adding or removing accounts at scale.

The API has no get-by-name, answers unknown accounts inside a 200 response, and takes at most 1000
accounts a request. So the create operators look a name up through the list endpoints before
creating (re-runs reuse instead of duplicating), and the membership operators stream their source,
validate every row before it is sent, and write every row that was not sent or that the service did
not know to a rejects file: nothing disappears silently, and XCom carries only a summary. That run
lives in :mod:`abm_provider.accounts.membership`; the classes here are arguments, checks and one call.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import ObjectStoragePath

from abm_provider.accounts.membership import (
    Action,
    MembershipRun,
    MembershipSettings,
    SourceArgs,
)
from abm_provider.accounts.sources import AccountSource, detect_file_format
from abm_provider.accounts.validation import MAX_BATCH_SIZE
from abm_provider.common.arguments import check_choice, check_id, check_text
from abm_provider.common.paths import as_storage_path
from abm_provider.common.rejects import Limit, check_limit, task_rejects_location
from abm_provider.compat import AirflowFailException
from abm_provider.exceptions import AbmApiError
from abm_provider.hooks.endpoints import IF_EXISTS, IfExists
from abm_provider.operators.base import (
    AbmBaseOperator,
    AccountSourceOperator,
    check_account_arguments,
    check_known,
    fail_if_final,
    fail_on_bad_argument,
    is_deferred,
    is_xcom_arg,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

_FOLDER_ACCESS = ("FOLDER_ACCESS_UNSPECIFIED", "PUBLIC", "READ_ONLY")

__all__ = [
    "AccountAudienceSyncOperator",
    "AccountListSyncOperator",
    "AddAccountsToListOperator",
    "CreateAccountListFolderOperator",
    "CreateAccountListOperator",
    "RemoveAccountsFromListOperator",
]


def _check_folder_access(value: Any, name: str = "folder_access") -> None:
    check_choice(value, name, _FOLDER_ACCESS)


Check = Callable[[Any, str], object]


class _CreateOrReuseOperator(AbmBaseOperator):
    """An operator whose work is one of the hook's create-or-reuse calls: ``if_exists`` and the
    named arguments' checks (at parse time when known, and once rendered), a conflict or an error no
    retry can fix failing the task, and the resource's ``<kind>Id`` pushed under ``<kind>_id``."""

    #: The resource: ``folder`` or ``list``.
    kind: ClassVar[str]
    #: Each argument's check, by name: run when the operator is made and again once it is rendered.
    argument_checks: ClassVar[tuple[tuple[str, Check], ...]]

    def __init__(self, *, if_exists: IfExists = "reuse", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_choice(if_exists, "if_exists", IF_EXISTS)
        self.if_exists = if_exists

    def check_arguments(self) -> None:
        """The checks of the values already known, at DAG parse time."""
        for name, check in self.argument_checks:
            check_known(check, getattr(self, name), name)

    @abstractmethod
    def create_or_reuse(self) -> dict[str, Any]:
        """The hook's call, with the rendered arguments."""

    def execute(self, context: Context) -> dict[str, Any]:
        """Check the rendered arguments, then the hook's create-or-reuse with this task's policy."""
        for name, check in self.argument_checks:
            fail_on_bad_argument(check, getattr(self, name), name)
        try:
            found = self.create_or_reuse()
        except AbmApiError as err:
            if err.http_status == 409:  # if_exists="fail" met an existing one: no retry changes that
                raise AirflowFailException(str(err)) from err
            fail_if_final(err, self.describe())
            raise
        self.push(context, **{f"{self.kind}_id": found[f"{self.kind}Id"]})
        return found

    @abstractmethod
    def describe(self) -> str:
        """The resource, as error messages name it."""


class CreateAccountListFolderOperator(_CreateOrReuseOperator):
    """Create an account-list folder, or reuse the one of that name; XCom is the folder resource.

    :param folder_name: folder name (templated). Names need not be unique in the service, so with
        ``if_exists="reuse"`` (default) a re-run returns the existing folder (the oldest when several
        share the name) instead of creating another; ``"create"`` always creates; ``"fail"`` fails
        the task when one exists.
    :param folder_access: ``PUBLIC`` (default), ``READ_ONLY`` or ``FOLDER_ACCESS_UNSPECIFIED``; used
        only when creating (an existing folder's access is not changed, a difference is logged).
    :return: ``{"folderId", "displayName", "folderAccess"}``; the id is also pushed under the XCom
        key ``folder_id``. Connection and request settings: :class:`AbmBaseOperator`.
    """

    template_fields: Sequence[str] = ("folder_name", "folder_access")
    kind = "folder"
    argument_checks = (("folder_name", check_text), ("folder_access", _check_folder_access))

    def __init__(self, *, folder_name: str, folder_access: str = "PUBLIC", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.folder_name = folder_name
        self.folder_access = folder_access
        self.check_arguments()

    def describe(self) -> str:
        return f"Folder {self.folder_name!r}"

    def create_or_reuse(self) -> dict[str, Any]:
        return self.hook.ensure_folder(self.folder_name, self.folder_access, self.if_exists)


class CreateAccountListOperator(_CreateOrReuseOperator):
    """Create an account list in a folder, or reuse the list of that name there; XCom is the list.

    :param list_name: list name (templated); matched exactly, within ``folder_id`` only.
    :param folder_id: folder to create the list in (templated; typically
        ``create_folder.output["folder_id"]``).
    :param if_exists: ``"reuse"`` (default), ``"create"`` or ``"fail"``, as for the folder operator.
    :return: ``{"listId", "listName", "folderId"}``; the id is also pushed under the XCom key
        ``list_id``. Connection and request settings: :class:`AbmBaseOperator`.
    """

    template_fields: Sequence[str] = ("list_name", "folder_id")
    kind = "list"
    argument_checks = (("list_name", check_text), ("folder_id", check_text))

    def __init__(self, *, list_name: str, folder_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.list_name = list_name
        self.folder_id = folder_id
        self.check_arguments()

    def describe(self) -> str:
        return f"List {self.list_name!r} in folder {self.folder_id!r}"

    def create_or_reuse(self) -> dict[str, Any]:
        return self.hook.ensure_list(self.list_name, self.folder_id, self.if_exists)


class _ListMembershipOperator(AccountSourceOperator):
    """The arguments and checks the add and remove operators share; the run is
    :class:`~abm_provider.accounts.membership.MembershipRun`."""

    template_fields: Sequence[str] = (
        "list_id",
        "accounts_path",
        "file_format",
        "sql",
        "sql_conn_id",
        "parameters",
        "column_map",
        "default_crm_org_id",
        "rejects_path",
        "rejects_base",
    )

    #: What the run does to the list.
    action: ClassVar[Action]

    def __init__(
        self,
        *,
        list_id: str,
        accounts: Iterable[Mapping[str, Any]] | Any | None = None,
        accounts_path: str | ObjectStoragePath | None = None,
        file_format: str | None = None,
        sql: str | None = None,
        sql_conn_id: str | None = None,
        parameters: Mapping[str, Any] | Sequence[Any] | None = None,
        sql_hook_params: Mapping[str, Any] | None = None,
        column_map: Mapping[str, str] | None = None,
        default_crm_type: str | None = None,
        default_crm_org_id: str | None = None,
        batch_size: int = MAX_BATCH_SIZE,
        max_rejected: Limit = 0,
        max_not_found: Limit = None,
        rejects_path: str | ObjectStoragePath | None = None,
        rejects_base: str | ObjectStoragePath | None = None,
        progress_interval: float = 5.0,
        max_in_flight: int = 2,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        max_rejected = check_limit(max_rejected, "max_rejected")
        max_not_found = check_limit(max_not_found, "max_not_found")
        if rejects_path is not None and rejects_base is not None:
            raise ValueError("give rejects_path (a file) or rejects_base (a folder), not both")
        check_account_arguments(
            list_id, column_map, default_crm_type, batch_size, max_in_flight, progress_interval
        )
        if file_format is not None and not is_deferred(str(file_format)):
            detect_file_format("", file_format)
        elif accounts_path is not None and file_format is None and not is_deferred(str(accounts_path)):
            detect_file_format(str(accounts_path))
        self.list_id = list_id
        self.accounts = accounts
        self.accounts_path = accounts_path
        self.file_format = file_format
        self.sql = sql
        self.sql_conn_id = sql_conn_id
        self.parameters = parameters
        self.sql_hook_params = sql_hook_params
        self.column_map = column_map
        self.default_crm_type = default_crm_type
        self.default_crm_org_id = default_crm_org_id
        self.batch_size = batch_size
        self.max_rejected = max_rejected
        self.max_not_found = max_not_found
        self.rejects_path = rejects_path
        self.rejects_base = rejects_base
        self.progress_interval = progress_interval
        self.max_in_flight = max_in_flight
        # The source as one (exactly one given, and only the arguments it uses).
        SourceArgs.of(self).check(type(self).__name__)
        # accounts is deliberately not a template field: rendering would run every account name
        # through Jinja (slow, and a name containing "{{" would be altered) and copy the whole list.
        # An XComArg still becomes an upstream dependency and is resolved in execute.
        if is_xcom_arg(accounts):
            from airflow.sdk.definitions.xcom_arg import XComArg

            XComArg.apply_upstream_relationship(self, accounts)

    def build_source(self, context: Context) -> AccountSource:
        """The one configured source, with XComArg resolved and paths already rendered."""
        accounts: Any = self.accounts
        if is_xcom_arg(accounts):
            accounts = accounts.resolve(context)
            if accounts is None:
                raise AirflowFailException("accounts resolved to None (the upstream XCom is empty)")
        return SourceArgs.of(self, accounts=accounts).open()

    def rejects_target(self, context: Context) -> ObjectStoragePath:
        """The rejects file: ``rejects_path`` as given, else keyed by dag/run/task/try under a base."""
        if self.rejects_path is not None:
            return as_storage_path(self.rejects_path)
        return task_rejects_location(self.rejects_base, context, self)

    def execute(self, context: Context) -> dict[str, Any]:
        """Check the rendered arguments, then the membership run; XCom is its summary."""
        fail_on_bad_argument(check_id, self.list_id, "list_id")
        run = MembershipRun(MembershipSettings.of(self), self.get_hook, self.log)
        source = self.build_source(context)
        try:
            result = run.run(source, self.rejects_target(context))
        except AbmApiError as err:
            fail_if_final(err, f"{self.action} accounts on list {self.list_id!r}")
            raise
        return result.summary()


class AddAccountsToListOperator(_ListMembershipOperator):
    """Add accounts to a list from an iterable/XCom, a CSV or Parquet file, or a SQL query.

    Exactly one source: ``accounts`` (an iterable of mappings, a pandas DataFrame, a pyarrow Table or
    an ``XComArg``), ``accounts_path``
    (``.csv`` or ``.parquet``, optionally compressed, local or any ``ObjectStoragePath`` such as
    ``s3://``), or ``sql`` with ``sql_conn_id`` (any common-sql connection; ``.sql`` files are
    templates). The source is streamed in batches of at most ``batch_size`` (max 1000), so memory
    stays flat whatever its size.

    Each row is validated before it is sent (id present, a string, no whitespace, within
    ``DEFAULT_MAX_FIELD_LENGTH``; name/crmOrgId strings; crmType known). Only ``id`` is required:
    the service fills a missing ``crmOrgId`` with the customer's CRM org and a missing ``crmType``
    with ``SALESFORCE``, so a row is sent with what it has (``default_crm_org_id`` and
    ``default_crm_type`` fill the gaps here instead, when set).
    Invalid rows and accounts the service reports as not found are written with a reason to a CSV
    rejects file (the format of :mod:`abm_provider.common.rejects`, shared with the warehouse loader:
    ``line`` of a CSV source, ``record`` number, ``reason``, ``raw`` row as JSON): ``rejects_path``
    if given, else ``<rejects_base or [abm] state_dir>/rejects/<dag_id>/<run_id>/<task_id>/try_<n>.csv``.

    :param list_id: list to add to (templated; typically ``create_list.output["list_id"]``).
    :param column_map: ``{api_field: source_column}`` for ``id``, ``name``, ``crmOrgId``, ``crmType``.
    :param max_rejected: invalid rows tolerated: an int is a count, checked as each invalid row is met
        so the task fails as soon as there are more (default 0); a float in [0, 1) is a share of all
        rows, checked at the end; ``None``: no limit. Past it the task fails without retries
        (:class:`~abm_provider.common.rejects.TooManyRejects`), the rejects written so far kept.
    :param max_not_found: not-found accounts tolerated, as a count or a share of all rows like
        ``max_rejected`` (default ``None``: no limit); checked at the end.
    :param progress_interval: seconds between progress log lines.
    :param max_in_flight: requests open at once (default 2, at most 8; 1 sends one at a time).
        Batches are independent, so a second request hides the round trip; raise it for a distant
        service, lower it to 1 if the service's rate limit keeps answering 429.
    :return: ``{"list_id", "rows", "sent", "added", "duplicates", "not_found", "rejected",
        "batches", "rejects_path"}``; ``rejected`` counts invalid rows, ``rejects_path`` is ``None``
        when nothing was written.
    """

    action = "add"


class RemoveAccountsFromListOperator(_ListMembershipOperator):
    """Remove accounts from a list; same sources, validation, rejects and limits as the add operator.

    Only ``id``, ``crmOrgId`` and ``crmType`` are sent (the remove request takes no name).

    :return: ``{"list_id", "rows", "sent", "removed", "not_found", "rejected", "batches",
        "rejects_path"}``; ``removed`` counts accounts the service reports as removed.
    """

    action = "remove"


# The sync operators live in their own modules (each has its own engine); they are part of this
# module's API.
from abm_provider.operators.audiences import AccountAudienceSyncOperator  # noqa: E402
from abm_provider.operators.list_sync import AccountListSyncOperator  # noqa: E402
