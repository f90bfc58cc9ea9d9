"""Every dialect declares what its warehouse can do, whole, and the registry refuses one that does not.

The capabilities of each registered dialect are printed (``pytest -s`` or ``-rP`` shows the table), so a
reader sees in one place what each warehouse does: its bulk path, its locks, the list sync's planning.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from abm_provider.warehouse.dialects import DIALECTS, GENERIC, Capabilities, _load, check_declared
from abm_provider.warehouse.dialects.generic import GenericDialect

REGISTERED = sorted({*DIALECTS.values(), GENERIC})


def test_every_registered_dialect_declares_its_capabilities_whole() -> None:
    rows = []
    for path in REGISTERED:
        cls = _load(path)  # the registry's own check runs here
        declared = cls.__dict__["capabilities"]
        rows.append((cls.name, declared.described()))
    names = [field.name for field in dataclasses.fields(Capabilities)]
    width = max(len(n) for n in names)
    print("\n" + " " * width + "  " + "  ".join(f"{name:>20}" for name, _ in rows))
    for field in names:
        print(f"{field:<{width}}  " + "  ".join(f"{str(caps[field]):>20}" for _, caps in rows))
    assert {name for name, _ in rows} == {"duckdb", "postgres", "mysql", "generic"}
    assert all(list(caps) == names for _, caps in rows)


def test_a_dialect_without_capabilities_of_its_own_is_refused_naming_what_to_declare() -> None:
    class Inherited(GenericDialect):
        name = "inherited"

    with pytest.raises(TypeError, match=r"Inherited declares no capabilities of its own: set capabilities = "
                       r"Capabilities\(bulk_path=\.\.\., table_lock=\.\.\."):  # fmt: skip
        check_declared(Inherited)


def test_a_capabilities_record_missing_a_field_names_it() -> None:
    given: dict[str, Any] = dataclasses.asdict(GenericDialect.capabilities)
    del given["table_lock"]
    with pytest.raises(TypeError, match="table_lock"):
        Capabilities(**given)


def test_rules_in_sql_declared_without_the_rules_is_refused() -> None:
    class Promising(GenericDialect):
        name = "promising"
        capabilities = dataclasses.replace(GenericDialect.capabilities, rules_in_sql=True)

    with pytest.raises(TypeError, match="Promising declares rules_in_sql but does not define matches_sql"):
        check_declared(Promising)
