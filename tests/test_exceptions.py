"""``abm_provider.exceptions``: an ``AbmApiError``'s message stays short and readable however many field
violations the service sent, with all of them kept on the error. How the hooks raise these errors is
``tests/hooks/test_pipeline.py``'s; that each error names its cause,
``tests/reliability/test_errors_name_the_cause.py``'s.
"""

from __future__ import annotations

from abm_provider.exceptions import AbmApiError


def test_many_field_violations_are_summarised_in_the_message() -> None:
    violations = [{"field": f"accounts[{i}].crmOrgId", "description": "is required"} for i in range(1000)]
    err = AbmApiError(
        method="POST",
        path="/x",
        http_status=400,
        status="INVALID_ARGUMENT",
        message="m",
        field_violations=violations,
    )
    assert "accounts[4].crmOrgId" in str(err) and "accounts[5].crmOrgId" not in str(err)
    assert "and 995 more in .field_violations" in str(err)
    assert len(str(err)) < 400 and len(err.field_violations) == 1000
