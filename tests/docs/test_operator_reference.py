"""docs/operators.md lists every argument of every operator, and marks the templated ones truly.

Each class has a ``### `ClassName` `` section whose table rows start with the argument in backticks;
the shared arguments of ``AbmBaseOperator`` are listed once, in its own section. A new or renamed
argument without a row fails here.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from abm_provider.operators.account_lists import (
    AccountAudienceSyncOperator,
    AccountListSyncOperator,
    AddAccountsToListOperator,
    CreateAccountListFolderOperator,
    CreateAccountListOperator,
    RemoveAccountsFromListOperator,
)
from abm_provider.operators.base import AbmBaseOperator
from abm_provider.operators.exports import CreateExportJobOperator, DownloadExecutionCsvOperator
from abm_provider.sensors.exports import ExecutionCompleteSensor
from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator
from abm_provider.triggers.exports import ExecutionCompletedEventTrigger, ExecutionCompleteTrigger

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operators.md"
CLASSES = [
    AbmBaseOperator,
    CreateAccountListFolderOperator,
    CreateAccountListOperator,
    AddAccountsToListOperator,
    RemoveAccountsFromListOperator,
    AccountListSyncOperator,
    AccountAudienceSyncOperator,
    CreateExportJobOperator,
    ExecutionCompleteSensor,
    ExecutionCompleteTrigger,
    ExecutionCompletedEventTrigger,
    DownloadExecutionCsvOperator,
    ExecutionCsvToSqlOperator,
]
#: Arguments kept under another attribute name (none today; the table names the attribute).
ATTRIBUTE: dict[str, str] = {}
_ROW = re.compile(r"^\| `(?P<name>\w+)` \|[^|]*\| (?P<templated>[^|]*) \|")


def _rows(cls: type) -> dict[str, str]:
    """{argument: templated column} of the class's section."""
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    heading = next(i for i, line in enumerate(lines) if re.match(rf"^#+ .*`{cls.__name__}`", line))
    level = len(lines[heading]) - len(lines[heading].lstrip("#"))
    rows: dict[str, str] = {}
    for line in lines[heading + 1 :]:
        if line.startswith("#") and len(line) - len(line.lstrip("#")) <= level:
            break
        if match := _ROW.match(line):
            rows[match.group("name")] = match.group("templated").strip()
    return rows


def _own_arguments(cls: type) -> set[str]:
    own = inspect.signature(cls.__init__).parameters.values()
    return {p.name for p in own if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD}


def _arguments(cls: type) -> set[str]:
    """The class's arguments, with those of its private bases (``_CreateOrReuseOperator``'s ``if_exists``)."""
    names = _own_arguments(cls)
    for base in cls.__mro__[1:]:
        if base.__name__.startswith("_") and "__init__" in vars(base):
            names |= _own_arguments(base)
    if cls is not AbmBaseOperator and issubclass(cls, AbmBaseOperator):
        names -= _own_arguments(AbmBaseOperator)  # listed once, in the shared section
    return names


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_every_argument_has_a_row(cls: type) -> None:
    rows = _rows(cls)
    assert set(rows) >= _arguments(cls), f"undocumented: {sorted(_arguments(cls) - set(rows))}"
    assert set(rows) <= _arguments(cls) | set(_rows(AbmBaseOperator)), sorted(set(rows) - _arguments(cls))


OPERATORS = [c for c in CLASSES if hasattr(c, "template_fields")]


@pytest.mark.parametrize("cls", OPERATORS, ids=lambda c: c.__name__)
def test_the_templated_column_matches_template_fields(cls: type) -> None:
    templated = set(cls.template_fields)  # type: ignore[attr-defined]
    for name, column in _rows(cls).items():
        if name in _arguments(cls):
            expected = ATTRIBUTE.get(name, name) in templated
            assert column.lower().startswith("yes") == expected, (cls.__name__, name, column)
