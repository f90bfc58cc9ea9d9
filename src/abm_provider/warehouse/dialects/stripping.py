"""What Python's ``str.strip()`` takes off a text, for the dialects' SQL that must strip the same.

The account validator strips an id and an org with ``str.strip()``; the audience sync works out the
same keys in SQL (``Dialect.strip_sql``), each dialect from these characters.
"""

from __future__ import annotations

#: What Python's ``str.strip()`` takes off both ends of a text (``str.isspace()``), as the account
#: validator strips an id and an org: the ASCII whitespace and separators, and Unicode's spaces.
STRIPPED = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)


def stripped_class(escape: str) -> str:
    """A regular expression's bracket of the :data:`STRIPPED` characters, each written as ``escape``
    (``"\\x{{{:04x}}}"``) formats its code point: ASCII text, whatever the characters."""
    return "[" + "".join(escape.format(ord(c)) for c in STRIPPED) + "]"


def regexp_stripped_sql(expression: str) -> str:
    """``expression`` without the :data:`STRIPPED` characters around it, by a ``REGEXP_REPLACE`` that
    replaces every match of ``^[...]+|[...]+$`` (Snowflake's does, by default).

    The characters are spelled by :func:`stripped_chr_sql`, for a database whose string literals read
    a backslash as their own escape (Snowflake's) and whose emulator ignores ``TRIM``'s set of
    characters (fakesnow's). Whitespace has no special meaning inside a POSIX bracket.
    """
    bracket = " || ".join(["'['", stripped_chr_sql(), "']'"])
    return f"REGEXP_REPLACE({expression}, '^' || {bracket} || '+|' || {bracket} || '+$', '')"


def stripped_chr_sql() -> str:
    """The :data:`STRIPPED` characters as a SQL text expression, each ``CHR(code point)``, joined with
    ``||``: ASCII SQL whatever the characters."""
    return " || ".join(f"CHR({ord(c)})" for c in STRIPPED)
