"""``abm_provider.operators.base``: what every ABM operator shares, checked when the DAG is parsed.

The request settings reach the hook, merged with ``hook_params``; an argument name that was never
released is refused as unknown, not read as its successor.
"""

from __future__ import annotations

import pytest

from abm_provider.operators.account_lists import (
    AddAccountsToListOperator,
    CreateAccountListFolderOperator,
    RemoveAccountsFromListOperator,
)


def test_request_settings_reach_the_hook():
    op = CreateAccountListFolderOperator(
        task_id="f",
        folder_name="x",
        max_attempts=2,
        retry_max_wait=0.5,
        request_timeout=7,
        hook_params={"max_pages": 3},
    )
    assert op.get_hook().hook_params == {
        "max_pages": 3,
        "max_attempts": 2,
        "retry_max_wait": 0.5,
        "request_timeout": 7,
    }


@pytest.mark.parametrize(
    ("operator", "removed"),
    [
        (CreateAccountListFolderOperator, {"folder_name": "x", "max_wait": 0.5}),
        (AddAccountsToListOperator, {"list_id": "l", "accounts": [], "max_rejected_fraction": 0.1}),
        (RemoveAccountsFromListOperator, {"list_id": "l", "accounts": [], "on_limit": "warn"}),
    ],
)
def test_a_removed_argument_name_is_refused_not_read_as_its_successor(operator, removed):
    """``max_wait`` (now ``retry_max_wait``), ``max_rejected_fraction`` (a float ``max_rejected``) and
    ``on_limit`` (a passed limit fails) were never released: Airflow refuses them as unknown."""
    name = next(key for key in removed if key not in ("folder_name", "list_id", "accounts"))
    with pytest.raises(TypeError, match=name):
        operator(task_id="t", **removed)
