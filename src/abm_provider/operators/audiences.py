"""``AccountAudienceSyncOperator``: one source tiered over many account lists, each account on one tier.

The operator resolves the programme's lists (by id, or by name in a folder, created when missing) and
its exclusions, then runs :class:`~abm_provider.accounts.audiences.engine.AudienceSync`. See
``docs/audiences.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.audiences import Audience, AudienceSync, Exclusion
from abm_provider.accounts.audiences.engine import check_programme_lists
from abm_provider.accounts.sources import AccountSource, SqlSource, open_file_source
from abm_provider.accounts.sync.lock import open_state
from abm_provider.accounts.sync.summary import check_drifts
from abm_provider.assets import warehouse_asset
from abm_provider.common.arguments import check_id, check_text
from abm_provider.compat import AirflowFailException
from abm_provider.operators._sync import SYNC_TEMPLATE_FIELDS, _SyncOperator, check_source_options
from abm_provider.operators.base import check_account_arguments, check_known, is_deferred
from abm_provider.warehouse.connections import sql_hook
from abm_provider.warehouse.schema import TableName

if TYPE_CHECKING:
    from airflow.sdk import Context

    from abm_provider.hooks.abm import AbmHook

#: What an exclusion may name: one source (a table or query on a connection, a file) and its id column.
EXCLUSION_KEYS = ("table", "sql", "parameters", "sql_conn_id", "accounts_path", "file_format", "id_column")
#: The list a missing list given by name stands for in a dry run, which creates nothing.
NEW_LIST = "(new) {name}"


def _check_audiences(audiences: Any, name: str = "audiences") -> dict[str, Any]:
    """``{audience value: list}``, each list a list id or ``{"list_id": ...}`` / ``{"list_name": ...}``.

    Values compare as text, so two that are the same text (``1`` and ``"1"``) are refused rather than
    one silently taking the other's place.
    """
    if not isinstance(audiences, Mapping) or not audiences:
        raise ValueError(f"{name} must map each audience value to its list, e.g. {{'tier_1': '<list id>'}}")
    texts = [str(value) for value in audiences]
    twice = sorted({text for text in texts if texts.count(text) > 1})
    if twice:
        raise ValueError(f"{name} names the audience values {twice} more than once (values compare as text)")
    for value, target in audiences.items():
        where = f"{name}[{value!r}]"
        if isinstance(target, str):
            check_known(check_id, target, where)
        elif isinstance(target, Mapping):
            keys = sorted(set(target) & {"list_id", "list_name"})
            if len(keys) != 1 or set(target) - {"list_id", "list_name"}:
                raise ValueError(
                    f"{where} names its list by list_id or list_name, one of them; got {dict(target)}"
                )
            if "list_id" in target:
                check_known(check_id, target["list_id"], f"{where}['list_id']")
            else:
                check_known(check_text, target["list_name"], f"{where}['list_name']")
        elif not is_deferred(target):
            raise ValueError(f"{where} must be a list id or {{'list_name': ...}}, not {target!r}")
    return dict(audiences)


def _list_id(target: Any) -> str | None:
    """The list id a checked audience target gives as it stands; ``None`` for a list given by name or
    a value still to be rendered."""
    given = target.get("list_id") if isinstance(target, Mapping) else target
    return None if given is None or is_deferred(given) else str(given)


def _check_exclude_lists(exclude_lists: Any, name: str = "exclude_lists") -> list[str]:
    """A sequence of list ids (not one id as a string, whose characters would each be read as one)."""
    if isinstance(exclude_lists, str | bytes) or not isinstance(exclude_lists, Sequence):
        raise ValueError(f"{name} must be a list of list ids, e.g. ['<list id>'], not {exclude_lists!r}")
    for i, list_id in enumerate(exclude_lists):
        check_known(check_id, list_id, f"{name}[{i}]")
    return [str(list_id) for list_id in exclude_lists]


def _check_folder(targets: Iterable[Any], folder_id: Any) -> str:
    """Lists given by name are found or created in ``folder_id``: refuse them without one. The
    folder, ``""`` when none is given."""
    named = [t["list_name"] for t in targets if isinstance(t, Mapping) and "list_name" in t]
    if named and not folder_id:
        raise ValueError(f"lists {named} are given by name: set folder_id, where they are found or created")
    return str(folder_id or "")


def _check_lists(ordered: Sequence[tuple[str, Any]], exclude_lists: Sequence[str]) -> None:
    """The programme's rules on its lists (no list twice, none both kept and excluded), among the
    audiences' lists given by id as they stand."""
    given = [Audience(value, list_id) for value, target in ordered if (list_id := _list_id(target))]
    if given:
        check_programme_lists(given, exclude_lists)


def _check_exclusion(exclusion: Any, name: str) -> None:
    """One exclusion: exactly one of ``table``, ``sql``, ``accounts_path``, only known keys, and the
    options a source of the list sync may have
    (:func:`~abm_provider.operators._sync.check_source_options`)."""
    if not isinstance(exclusion, Mapping):
        raise ValueError(f"{name} must be a mapping such as {{'table': 'customers'}}, not {exclusion!r}")
    unknown = sorted(set(exclusion) - set(EXCLUSION_KEYS))
    if unknown:
        raise ValueError(f"{name} has keys {unknown}; an exclusion takes {list(EXCLUSION_KEYS)}")
    given = [k for k in ("table", "sql", "accounts_path") if exclusion.get(k)]
    if len(given) != 1:
        raise ValueError(f"{name} names one source: table, sql or accounts_path; got {given or 'none'}")
    try:
        check_source_options(
            exclusion.get("table"),
            exclusion.get("sql"),
            exclusion.get("accounts_path"),
            exclusion.get("parameters"),
            exclusion.get("file_format"),
        )
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from err


class AccountAudienceSyncOperator(_SyncOperator):
    """Keep a programme of account lists in step with one source: each account on the list of its
    highest audience, excluded accounts on none, every removal sent before any addition.

    The source (``table``, ``sql`` or ``accounts_path``) is read as the list sync reads it, with
    ``audience_column`` naming each row's audience. Every argument of
    :class:`~abm_provider.operators.list_sync.AccountListSyncOperator` but ``list_id`` applies, with its
    meaning; the guards count across the programme and per list (``docs/audiences.md``).

    :param audiences: ``{audience value: list}`` in priority order, the highest first (templated). A
        list is a list id, ``{"list_id": ...}``, or ``{"list_name": ...}``: found in ``folder_id``, or
        created there when missing (a dry run creates nothing and shows it as new). Values compare as
        text, so an integer column's ``1`` matches ``"1"`` (a floating-point column's is the text its
        database writes, DuckDB's ``1.0``).
    :param audience_column: the source column that names each row's audience (templated).
    :param priority: the audience values, highest first, when not the order of ``audiences``.
    :param folder_id: where lists given by name are found or created (templated).
    :param exclusions: sources of account ids kept off every list (templated): each a mapping with one
        of ``table`` or ``sql`` (on its ``sql_conn_id``, default this task's; ``parameters`` for
        ``sql``) or ``accounts_path`` (``file_format``), and ``id_column`` (default: the id column of
        ``column_map``).
    :param exclude_lists: lists another sync of this provider keeps, on the same state tables, whose
        recorded members are kept off every list of the programme (templated).
    :param mode: ``"mirror"`` only: a move between tiers is a removal from the old list, which
        ``add_only`` and ``remove_only`` would each leave half done.
    :return: ``{"lists": [one entry per list, in priority order: the list sync's counts with
        "audience", "list_id", "moved_in", "moved_out", "excluded"], "moves": [{"from", "to",
        "from_list", "to_list", "accounts"}], "totals": {...}, "run_id", "mode", "dry_run", "guard",
        "guard_at"}``: counts only, never accounts.
    """

    template_fields: Sequence[str] = (
        "audiences",
        "audience_column",
        "priority",
        "folder_id",
        "exclusions",
        "exclude_lists",
        *SYNC_TEMPLATE_FIELDS,
    )

    def __init__(
        self,
        *,
        audiences: Mapping[str, Any],
        audience_column: str,
        priority: Sequence[str] | None = None,
        folder_id: str | None = None,
        exclusions: Sequence[Mapping[str, Any]] = (),
        exclude_lists: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        exclusion_inlets = []
        if not is_deferred(exclusions):
            for i, exclusion in enumerate(exclusions):
                if is_deferred(exclusion):  # a template or an upstream task's output: checked once known
                    continue
                _check_exclusion(exclusion, f"exclusions[{i}]")
                conn = exclusion.get("sql_conn_id") or kwargs.get("sql_conn_id")
                table = exclusion.get("table")
                if table and conn and not is_deferred(table) and not is_deferred(conn):
                    exclusion_inlets.append(warehouse_asset(conn, table))
        super().__init__(**kwargs)
        if exclusion_inlets:
            self.inlets = [*self.inlets, *exclusion_inlets]
        check_account_arguments(
            None,
            self.column_map,
            self.default_crm_type,
            self.batch_size,
            self.max_in_flight,
            self.progress_interval,
        )
        check_known(_check_audiences, audiences, "audiences")
        check_known(_check_exclude_lists, exclude_lists, "exclude_lists")
        check_known(check_text, audience_column, "audience_column")
        if not is_deferred(self.mode) and self.mode != "mirror":
            raise ValueError(
                f"mode {self.mode!r}: an audience sync runs in mirror mode only (docs/audiences.md)"
            )
        self.audiences = audiences
        self.audience_column = audience_column
        self.priority = priority
        self.folder_id = folder_id
        self.exclusions = exclusions
        self.exclude_lists = exclude_lists
        if not is_deferred(audiences):
            self._check_programme_as_given()

    def _check_programme_as_given(self) -> None:
        """At parse time, what the arguments already say of the programme: a priority that names each
        audience once, a folder for lists given by name, and no list twice or both kept and excluded
        among the list ids given as they stand."""
        priority = self.priority
        if priority is not None and not is_deferred(priority) and not any(map(is_deferred, priority)):
            self._ordered()
        if not is_deferred(self.folder_id):
            _check_folder(self.audiences.values(), self.folder_id)
        exclude_lists = () if is_deferred(self.exclude_lists) else self.exclude_lists
        _check_lists(
            [(str(value), target) for value, target in self.audiences.items()],
            [str(x) for x in exclude_lists if not is_deferred(x)],
        )

    # ---- what the task resolves ---------------------------------------------------------------------

    def _ordered(self) -> list[tuple[str, Any]]:
        """The audiences in priority order: ``priority``'s, else the mapping's."""
        audiences = _check_audiences(self.audiences)
        if self.priority is None:
            return [(str(v), t) for v, t in audiences.items()]
        order = [str(v) for v in self.priority]
        mapped = {str(v): t for v, t in audiences.items()}
        if sorted(order) != sorted(mapped):
            raise ValueError(f"priority {order} must name each audience of audiences {list(mapped)} once")
        return [(v, mapped[v]) for v in order]

    def _resolve(self, target: Any, folder_id: str, dry_run: bool) -> str:
        """A list id for ``target`` (checked with the audiences): as given, or the list of that name in
        ``folder_id`` (created when missing, unless this is a dry run)."""
        list_id = _list_id(target)
        if list_id is not None:
            return list_id
        name = str(target["list_name"])
        hook: AbmHook = self.hook
        if dry_run:
            found = hook.find_list(name, folder_id)
            return NEW_LIST.format(name=name) if found is None else str(found["listId"])
        return str(hook.ensure_list(name, folder_id)["listId"])

    def _exclusion(self, exclusion: Mapping[str, Any], id_column: str) -> Exclusion:
        source: AccountSource
        if exclusion.get("accounts_path"):
            source = open_file_source(
                exclusion["accounts_path"], exclusion.get("file_format"), read_batch_size=self.batch_size
            )
        else:
            conn = exclusion.get("sql_conn_id") or self.sql_conn_id or self.state_conn_id
            if not conn:
                raise ValueError("an exclusion's table or sql needs sql_conn_id")
            table = exclusion.get("table")
            source = SqlSource(
                None if table else str(exclusion["sql"]),
                str(conn),
                table=TableName.parse(str(table)) if table else None,
                parameters=None if table else exclusion.get("parameters"),
                fetch_size=self.batch_size,
            )
        return Exclusion(source, str(exclusion.get("id_column") or id_column))

    # ---- the run ----------------------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        """Resolve the lists, then tier, plan, guard, send and record the programme; return its summary."""
        base = self._sync_options(context, "")
        tables, validator, state_conn_id = self._state()
        try:
            if base.mode != "mirror":
                raise ValueError(f"mode {base.mode!r}: an audience sync runs in mirror mode only")
            column = check_text(self.audience_column, "audience_column")
            ordered = self._ordered()
            folder_id = _check_folder([target for _, target in ordered], self.folder_id)
            for i, exclusion in enumerate(self.exclusions or ()):
                _check_exclusion(exclusion, f"exclusions[{i}]")
            exclusions = [self._exclusion(e, validator.id_column) for e in self.exclusions or ()]
            exclude_lists = _check_exclude_lists(self.exclude_lists or ())
            # Before a list given by name is found or created; again after, for a name that turns out
            # to be a list given by id too.
            _check_lists(ordered, exclude_lists)
            audiences = [
                Audience(value, self._resolve(target, folder_id, base.dry_run)) for value, target in ordered
            ]
            check_programme_lists(audiences, exclude_lists)
        except ValueError as err:
            raise AirflowFailException(str(err)) from err
        self.log.info(
            "Syncing audiences %s by column %r (%s%s) from %s; state in %s on %s",
            {a.value: a.list_id for a in audiences},
            column,
            base.mode,
            ", dry run" if base.dry_run else "",
            self.table or self.accounts_path or "the sql query",
            f"{self.state_schema + '.' if self.state_schema else ''}{self.state_table_prefix}*",
            state_conn_id,
        )
        db = open_state(
            sql_hook(state_conn_id, "state_conn_id"), audiences[0].list_id, base.run_id, base.lock_timeout
        )
        try:
            sync = AudienceSync(
                db,
                tables,
                audiences,
                column,
                base,
                validator,
                self.get_hook,
                exclusions=exclusions,
                exclude_lists=exclude_lists,
                log=self.log,
            )
            try:
                summary = sync.run(self._source())
            except ValueError as err:
                raise AirflowFailException(str(err)) from err
            if self.drift_check and not base.dry_run:
                check_drifts(self.hook, [(entry["list_id"], entry) for entry in summary["lists"]], self.log)
        finally:
            db.close()
        self._log_refusals(summary["totals"], base, tables)
        self.log.info("Audience sync done: %s", summary["totals"])
        return summary
