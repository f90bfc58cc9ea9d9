"""``abm_provider.hooks.endpoints``: the calls the hooks make, described without a server."""

from __future__ import annotations

import pytest

from abm_provider.hooks.endpoints import executions_call


def test_executions_query() -> None:
    call = executions_call("TACTIC_PERFORMANCE", state="COMPLETE", page_size=10)
    assert (call.method, call.path) == ("GET", "/exports/v1/exportJobs/TACTIC_PERFORMANCE/executions")
    assert call.query == {"pageSize": 10, "orderBy": "updateTime desc", "filter": "status=COMPLETE"}
    with pytest.raises(ValueError, match="page_size"):
        executions_call("TACTIC_PERFORMANCE", page_size=0)
    with pytest.raises(ValueError, match="state must be one execution state"):
        executions_call("TACTIC_PERFORMANCE", state="COMPLETE OR 1")
