"""Every dialect declares what its warehouse can do, whole, and the registry refuses one that does not.

The capabilities of each registered dialect are printed (``pytest -s`` or ``-rP`` shows the table), so a
reader sees in one place what each warehouse does: its bulk path, its locks, the list sync's planning.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from abm_provider.warehouse.dialects import DIALECTS, GENERIC, Capabilities, _load, check_declared
from abm_provider.warehouse.dialects.capabilities import POSITIONAL_MARKERS
from abm_provider.warehouse.dialects.generic import GenericDialect
from abm_provider.warehouse.dialects.options import NoOptions

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
    assert {name for name, _ in rows} == {"duckdb", "postgres", "mysql", "snowflake", "bigquery", "generic"}
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


@pytest.mark.parametrize(
    ("capability", "method"),
    [
        ("rules_in_sql", "matches_sql"),
        # The audience sync trusts its grouping of keys only where the dialect strips them as the
        # validator does: a dialect claiming that with standard SQL's TRIM is refused.
        ("strips_like_python", "strip_sql"),
    ],
)
def test_a_capability_declared_without_the_method_behind_it_is_refused(capability: str, method: str) -> None:
    class Promising(GenericDialect):
        name = "promising"
        capabilities = dataclasses.replace(GenericDialect.capabilities, **{capability: True})
        options_type = NoOptions

    with pytest.raises(TypeError, match=f"Promising declares {capability} but does not define {method}"):
        check_declared(Promising)


def test_a_dialects_placeholder_is_the_marker_of_the_style_it_declares() -> None:
    """Declared once: the loader's marker follows ``param_style`` (or, for ``"hook"``, the hook's)."""
    for path in REGISTERED:
        dialect = _load(path)(None)
        style = dialect.capabilities.param_style
        assert dialect.placeholder == POSITIONAL_MARKERS["format" if style == "hook" else style], path
    assert GenericDialect(SimpleNamespace(placeholder="?")).placeholder == "?"


def test_a_style_by_name_without_a_positional_marker_is_refused() -> None:
    class Named(GenericDialect):
        name = "named"
        capabilities = dataclasses.replace(GenericDialect.capabilities, param_style="named")
        options_type = NoOptions

    with pytest.raises(
        TypeError, match="Named declares param_style='named' but does not define positional_marker"
    ):
        check_declared(Named)
    with pytest.raises(TypeError, match="declares param_style='named', which has no positional marker"):
        Named(None)

    class NamedAndPositional(Named):
        capabilities = Named.capabilities
        options_type = NoOptions

        def positional_marker(self) -> str:
            return "?"

    check_declared(NamedAndPositional)
    assert NamedAndPositional(None).placeholder == "?"
