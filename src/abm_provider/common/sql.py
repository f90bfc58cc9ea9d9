"""The one way a connection id becomes a common-sql hook, for account sources, loads and list syncs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.providers.common.sql.hooks.sql import DbApiHook


def sql_hook(conn_id: str, what: str, hook_params: Mapping[str, Any] | None = None) -> DbApiHook:
    """The connection's own hook (DuckDBHook, PostgresHook...), as common-sql operators resolve it.

    :param what: the argument that named the connection, so a connection of another kind fails
        with a message naming the setting to fix.
    """
    from airflow.providers.common.sql.hooks.sql import DbApiHook
    from airflow.sdk import BaseHook

    hook = BaseHook.get_connection(conn_id).get_hook(hook_params=dict(hook_params or {}))
    if not isinstance(hook, DbApiHook):
        raise TypeError(
            f"{what} {conn_id!r} resolves to {type(hook).__name__}, which is not a common-sql DbApiHook"
        )
    return hook


def one_statement(sql: str) -> str | None:
    """``sql`` up to the end of its one statement: without the ``;`` and comments that may follow it.

    What a query needs to be embedded as a subquery (``SELECT ... FROM (<sql>) q``), where a
    terminator would end the outer statement early. Nothing inside the statement changes: its
    literals, comments and markers stay as written. ``None`` when ``sql`` holds no statement, or more
    than one. sqlparse (what common-sql splits scripts with) tells a ``;`` in a literal or a comment
    from a terminator.
    """
    import sqlparse
    from sqlparse import tokens

    def substantive(token: Any) -> bool:
        if token.is_whitespace or token.ttype in tokens.Comment:
            return False
        return not (token.ttype is tokens.Punctuation and token.value == ";")

    end, statements, offset = 0, 0, 0
    for statement in sqlparse.parse(sql):
        found = False
        for token in statement.flatten():
            offset += len(token.value)
            if substantive(token):
                end, found = offset, True
        statements += found
    return sql[:end] if statements == 1 else None
