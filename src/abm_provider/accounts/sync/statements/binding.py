"""SQL text with its values kept beside their places, bound in the parameter style of the state database.

A statement of the list sync is built from a template (:func:`sql`) whose fields are either SQL (an
:class:`Sql` fragment: a table's name, a condition another statement built) or a value. A value is
never written into the text: it stays beside its place, and :meth:`Sql.bound` writes the driver's
marker there (``?``, ``%s``, ``:p1``, ``%(p1)s``) when the statement runs. So each statement is
written once for every parameter style a dialect declares
(:attr:`~abm_provider.warehouse.dialects.capabilities.Capabilities.param_style`), its values line up
with their markers however the fragments were put together, and no SQL text is rewritten: a ``?``
in a quoted name or a user's query stays what it is.

A field that is not an :class:`Sql` is bound, so a value can never reach the text by mistake; SQL
the sync trusts (names the dialect quoted, what a dialect method returns) is made a fragment with
:func:`text`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from string import Formatter
from typing import TYPE_CHECKING, Any

from abm_provider.warehouse.dialects.capabilities import POSITIONAL_MARKERS, ParamStyle

if TYPE_CHECKING:
    from abm_provider.warehouse.dialects import Dialect

#: The style a common-sql hook's ``placeholder`` stands for (common-sql allows these two).
_BY_PLACEHOLDER = {marker: style for style, marker in POSITIONAL_MARKERS.items()}
#: Stands for the text a dialect method wraps around a bound value (:func:`around`); a NUL byte never
#: occurs in SQL the dialects write.
_HOLE = "\x00abm_value\x00"

#: The values of one statement, as the driver takes them in the style it was bound in.
Params = list[Any] | dict[str, Any]


@dataclass(frozen=True)
class _Value:
    """A value bound at its place."""

    value: Any


@dataclass(frozen=True)
class _Column:
    """The ``index``-th value of each row a statement is run for (:meth:`Sql.bound_rows`)."""

    index: int


@dataclass(frozen=True)
class Sql:
    """A statement or a fragment of one: its text, with each bound value at its place."""

    parts: tuple[str | _Value | _Column, ...] = ()

    def __add__(self, other: Sql) -> Sql:
        return Sql(self.parts + other.parts)

    def bound(self, style: ParamStyle) -> tuple[str, Params]:
        """The text with ``style``'s markers, and the values in the driver's form for that style."""
        text, places = self._marked(style)
        if any(isinstance(place, _Column) for place in places):
            raise ValueError("a statement of row values is run for each row: bind it with bound_rows")
        return text, _params(style, [place.value for place in places if isinstance(place, _Value)])

    def bound_rows(self, style: ParamStyle, rows: Iterable[Sequence[Any]]) -> tuple[str, list[Params]]:
        """The text with ``style``'s markers, and the values for each of ``rows`` (``executemany``)."""
        text, places = self._marked(style)
        return text, [
            _params(style, [row[p.index] if isinstance(p, _Column) else p.value for p in places])
            for row in rows
        ]

    def _marked(self, style: ParamStyle) -> tuple[str, list[_Value | _Column]]:
        pieces: list[str] = []
        places: list[_Value | _Column] = []
        for part in self.parts:
            if isinstance(part, str):
                pieces.append(part)
            else:
                places.append(part)
                pieces.append(_marker(style, len(places)))
        return "".join(pieces), places


def _marker(style: ParamStyle, number: int) -> str:
    """The marker of the ``number``-th value (from 1) in ``style``."""
    marker = POSITIONAL_MARKERS.get(style)
    if marker is not None:
        return marker
    return f":p{number}" if style == "named" else f"%(p{number})s"


def _params(style: ParamStyle, values: list[Any]) -> Params:
    """The values as the driver takes them: a sequence in the positional styles, else by name."""
    if style in ("qmark", "format"):
        return values
    return {f"p{number}": value for number, value in enumerate(values, start=1)}


def sql(template: str, /, **fields: Any) -> Sql:
    """``template`` with each ``{name}`` replaced by ``fields[name]``: an :class:`Sql` by its text and
    values, anything else bound as a value. ``{{`` and ``}}`` stand for braces."""
    parts: list[str | _Value | _Column] = []
    for literal, name, spec, conversion in Formatter().parse(template):
        if literal:
            parts.append(literal)
        if name is None:
            continue
        if spec or conversion or name not in fields:
            raise ValueError(f"template field {{{name}}} has no value, or a format of its own: {template!r}")
        field = fields[name]
        parts.extend(field.parts if isinstance(field, Sql) else [_Value(field)])
    return Sql(tuple(parts))


def text(trusted: str) -> Sql:
    """SQL the sync trusts as it is: names the dialect quoted, what a dialect method wrote."""
    return Sql((trusted,))


def join(separator: str, fragments: Iterable[Sql]) -> Sql:
    """The fragments one after the other, ``separator`` between them."""
    parts: list[str | _Value | _Column] = []
    for number, fragment in enumerate(fragments):
        if number:
            parts.append(separator)
        parts.extend(fragment.parts)
    return Sql(tuple(parts))


def values(items: Iterable[Any]) -> Sql:
    """Each item bound, comma-separated (an ``IN`` list)."""
    return join(", ", (sql("{v}", v=item) for item in items))


def row_values(count: int) -> Sql:
    """The places of a row's ``count`` values, comma-separated (a ``VALUES`` list run for each row)."""
    return join(", ", (Sql((_Column(index),)) for index in range(count)))


def around(wrap: Callable[[str], str], inner: Sql) -> Sql:
    """``inner`` inside the SQL a dialect method writes around an expression (``dialect.cast_sql``)."""
    before, hole, after = wrap(_HOLE).partition(_HOLE)
    if not hole or _HOLE in after:
        raise ValueError("the dialect's expression must hold the wrapped one exactly once")
    return text(before) + inner + text(after)


def text_value(dialect: Dialect, value: str | None) -> Sql:
    """``value`` bound and typed as text: a server that binds on its side cannot type a bare marker in a
    select list or ``COALESCE``."""
    return around(lambda expression: dialect.cast_sql(expression, "TEXT"), sql("{value}", value=value))


def param_style(dialect: Dialect) -> ParamStyle:
    """The style the state database's driver binds in, as its dialect declares it.

    A dialect that declares ``hook`` binds as its common-sql hook's ``placeholder`` says (the generic
    dialect: any DB-API driver).
    """
    declared = dialect.capabilities.param_style
    if declared != "hook":
        return declared
    found = _BY_PLACEHOLDER.get(dialect.placeholder)
    if found is None:
        raise ValueError(
            f"the {dialect.name} dialect binds as its hook's placeholder, {dialect.placeholder!r}, which is "
            f"none of {sorted(_BY_PLACEHOLDER)}: set the connection extra 'placeholder' to one of them"
        )
    return found
