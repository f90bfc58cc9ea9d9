"""The state tables' names and lock keys (``accounts/sync/state.py``).

A lock key is shared by every running version of the provider: two releases syncing one list at
once must compute the same key, so its text is pinned here.
"""

from __future__ import annotations

import pytest

from abm_provider.accounts.sync.state import DEFAULT_PREFIX, StateTables


def test_the_tables_are_named_by_prefix_in_the_schema_given() -> None:
    tables = StateTables.named("crm_sync_", "ops")
    named = [(t.schema, t.name) for t in (tables.members, tables.plan, tables.rejects, tables.runs)]
    assert named == [
        ("ops", "crm_sync_members"),
        ("ops", "crm_sync_plan"),
        ("ops", "crm_sync_rejects"),
        ("ops", "crm_sync_runs"),
    ]
    default = StateTables.named().members
    assert (default.schema, default.name) == (None, f"{DEFAULT_PREFIX}members")


def test_lock_keys_are_the_text_every_release_agrees_on() -> None:
    assert StateTables.named().lock_key("L1") == "abm_provider.sync:.abm_sync_:list:L1"
    assert StateTables.named().lock_key() == "abm_provider.sync:.abm_sync_:tables"
    assert StateTables.named("crm_", "ops").lock_key("L1") == "abm_provider.sync:ops.crm_:list:L1"


@pytest.mark.parametrize(
    ("prefix", "schema", "argument"),
    [("abm sync_", None, "state_table_prefix"), ("abm_", "ops;drop", "state_schema")],
)
def test_names_that_are_not_plain_identifiers_are_refused(
    prefix: str, schema: str | None, argument: str
) -> None:
    with pytest.raises(ValueError, match=argument):
        StateTables.named(prefix, schema)
