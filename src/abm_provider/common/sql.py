"""SQL text as a user wrote it: where one statement ends."""

from __future__ import annotations

from typing import Any


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
