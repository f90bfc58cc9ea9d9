"""The checks of a load: the file's columns against the table, and the records set aside as rejects.

Before a byte is loaded, :func:`plan_columns` compares the header with the table (or the export
type's schema when there is no table yet): a missing or unknown column fails naming it, unless
``on_schema_change="add_columns"`` adds the unknown ones. Once staged, the rows with a ``_reason``
and all but the last row of any natural key the file repeats are rejected
(:func:`~abm_provider.warehouse.sql.value_rejects`, :func:`~abm_provider.warehouse.sql.duplicate_rejects`);
:func:`report_rejects` resolves their record numbers to file lines with
one Python pass (only when there are rejects), writes the rejects file, and stops past
``max_rejected``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from abm_provider.common.rejects import RejectsWriter, check_rejects, describe_reject
from abm_provider.warehouse.records import locate
from abm_provider.warehouse.schema import LINEAGE_COLUMNS, Kind, check_identifier

if TYPE_CHECKING:
    from abm_provider.warehouse.load import LoadRequest


class SchemaMismatch(ValueError):
    """The file's columns do not match the table's; the message names the columns at fault."""


@dataclass(frozen=True)
class ColumnPlan:
    """The file's columns with their kinds, and the ones to add to an existing table."""

    header: tuple[str, ...]
    kinds: dict[str, Kind]
    to_add: tuple[str, ...]
    table_exists: bool


def plan_columns(request: LoadRequest, header: Sequence[str], existing: Sequence[str] | None) -> ColumnPlan:
    """Match the header against the table, or the export schema when the table does not exist yet."""
    for name in header:
        check_identifier(name, f"column in the header of {request.path.name}:")
    duplicated = sorted({name for name in header if list(header).count(name) > 1})
    if duplicated:
        raise SchemaMismatch(
            f"{request.path.name}: column(s) {duplicated} appear more than once in the header"
        )
    lineage = set(LINEAGE_COLUMNS)
    clash = sorted(lineage.intersection(header))
    if clash:
        raise SchemaMismatch(f"{request.path.name}: column(s) {clash} are reserved for lineage")
    expected = [c for c in existing if c not in lineage] if existing is not None else []
    if existing is None:
        expected = list(request.export.column_names)
    missing = [c for c in expected if c not in header]
    missing += [k for k in request.key_columns if k not in header and k not in missing]
    where = f"table {request.table}" if existing is not None else f"export type {request.export.export_type}"
    if missing:
        raise SchemaMismatch(
            f"{request.path.name}: column(s) {missing} of {where} are missing from the file "
            f"(file columns: {list(header)})"
        )
    unknown = tuple(c for c in header if c not in expected)
    if unknown and request.on_schema_change != "add_columns":
        raise SchemaMismatch(
            f"{request.path.name}: column(s) {list(unknown)} are not in {where}; "
            "pass on_schema_change='add_columns' to add them"
        )
    kinds = request.export.kinds()
    plan_kinds = {name: kinds.get(name, Kind.TEXT) for name in header}
    to_add = unknown if existing is not None else ()
    return ColumnPlan(tuple(header), plan_kinds, to_add, existing is not None)


def report_rejects(
    request: LoadRequest, width: int, rejects: dict[int, str], total: int, log: logging.Logger
) -> str | None:
    """Write the rejects file (removing a stale one when there are none); its path, or ``None``.

    Raises :class:`~abm_provider.common.rejects.TooManyRejects` past ``request.max_rejected``.
    """
    path = request.rejects_path
    found = locate(request.path, width, set(rejects)) if rejects else {}
    examples: list[str] = []
    # remove_stale: a clean load removes the file an earlier load left there, which would mislead.
    with RejectsWriter(path, remove_stale=True) as writer:
        for number in sorted(rejects):
            record = found.get(number)
            line = record.line if record is not None else None
            writer.write(
                rejects[number],
                record=number,
                line=line,
                raw=record.raw.rstrip("\r\n") if record is not None else "",
            )
            if len(examples) < 2:
                examples.append(describe_reject(rejects[number], number, line))
    if not writer.written:
        return None
    log.warning("%d of %d records rejected; written to %s", writer.count, total, path)
    check_rejects(
        len(rejects),
        request.max_rejected,
        total=total,
        examples=examples,
        rejects_path=path,
        outcome="Nothing was loaded.",
    )
    return str(path)
