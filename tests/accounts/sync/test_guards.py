"""``accounts/sync/guards.py``: the checks a plan passes before anything is sent, and their messages."""

from __future__ import annotations

import pickle

import pytest

from abm_provider.accounts.sync.guards import check_plan
from abm_provider.accounts.sync.options import SyncOptions
from abm_provider.exceptions import SyncGuardTripped


def options(**kwargs: object) -> SyncOptions:
    return SyncOptions(list_id="L1", run_id="manual__1", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("limit", "to_remove", "members", "trips"),
    [
        (0.25, 25, 100, False),
        (0.25, 26, 100, True),
        (0.25, 1, 0, True),  # removing from an empty record is all of it
        (0.25, 0, 0, False),
        (10, 10, 11, False),
        (10, 11, 1000, True),
        (0, 1, 1000, True),
        (None, 1000, 1000, False),
    ],
)
def test_max_removals_is_a_count_or_a_fraction_of_the_recorded_members(
    limit: int | float | None, to_remove: int, members: int, trips: bool
) -> None:
    tripped = check_plan(options(max_removals=limit), 5, to_remove, members)
    assert (tripped is not None) is trips
    if tripped is not None:
        assert tripped.guard == "max_removals"
        assert f"{to_remove} of the {members} recorded members" in tripped.reason


def test_an_empty_source_trips_a_removing_run_unless_allowed() -> None:
    assert check_plan(options(), 0, 3, 3).guard == "allow_empty_source"  # type: ignore[union-attr]
    assert check_plan(options(mode="remove_only"), 0, 0, 0) is not None
    assert check_plan(options(allow_empty_source=True, max_removals=None), 0, 3, 3) is None
    assert check_plan(options(mode="add_only"), 0, 0, 3) is None  # it never removes


def test_the_error_names_both_figures_the_plan_and_the_way_through() -> None:
    opts = options()
    tripped = check_plan(opts, 70, 30, 100)
    assert tripped is not None
    err = tripped.error(opts, '"abm_sync_plan"')
    text = str(err)
    assert "list L1" in text and "30 of the 100 recorded members (30.0%)" in text
    assert "max_removals=0.25 (25%)" in text and "max_removals=None" in text
    assert '"abm_sync_plan"' in text and "'manual__1'" in text
    again = pickle.loads(pickle.dumps(err))  # crosses process boundaries as task failures do
    assert isinstance(again, SyncGuardTripped) and (again.guard, again.run_id) == (
        "max_removals",
        "manual__1",
    )
