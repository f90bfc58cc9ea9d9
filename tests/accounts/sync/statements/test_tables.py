"""``abm_provider.accounts.sync.statements.tables``: a run's work tables are temporary, or ordinary tables
in the state schema where the dialect declares it has no temporary ones.
"""

from __future__ import annotations

import dataclasses
import re

from abm_provider.accounts.sync.statements import tables
from abm_provider.accounts.sync.statements.tables import WorkTables
from abm_provider.warehouse.dialects.generic import GenericDialect


def test_work_tables_are_temporary_or_in_the_state_schema_as_the_dialect_declares() -> None:
    class Ordinary(GenericDialect):
        name = "ordinary"
        options_type = GenericDialect.options_type
        capabilities = dataclasses.replace(GenericDialect.capabilities, temporary_tables=False)

    temporary = WorkTables.new(GenericDialect(None), "state")
    assert re.fullmatch(r"abm_sync_source_[0-9a-f]{12}", temporary.stage)
    assert temporary.numbered == temporary.stage.replace("source", "numbered")
    assert tables.create_work_table(GenericDialect(None), "w", "a BIGINT").bound("qmark")[0] == (
        "CREATE TEMPORARY TABLE w (a BIGINT)"
    )
    ordinary = WorkTables.new(Ordinary(None), "state")
    assert re.fullmatch(r'"state"\."abm_sync_diff_[0-9a-f]{12}"', ordinary.difference)
    assert (
        tables.create_work_table(Ordinary(None), "w", "a BIGINT").bound("qmark")[0]
        == "CREATE TABLE w (a BIGINT)"
    )
