"""The programme's guards: counted over every list first, then per list; an empty tier with members
stops the programme, a list with neither members nor rows does not."""

from __future__ import annotations

from dataclasses import replace

from abm_provider.accounts.audiences.guards import PROGRAMME, check_programme
from abm_provider.accounts.sync.options import SyncOptions
from abm_provider.accounts.sync.plan import Written
from abm_provider.accounts.sync.statements.binding import text

BASE = SyncOptions(list_id="", run_id="r")


def plan(rows: int, removing: int, members: int) -> Written:
    return Written(rows, 0, removing, 0, 0, members, (text(""), text(""), None))


def lists(*plans: Written, base: SyncOptions = BASE) -> list[tuple[str, SyncOptions, Written, int]]:
    """Each plan as one list's, its options those of the programme with its own list id; the rows that
    name its audience are the rows its list keeps."""
    return [
        (f"tier_{i}", replace(base, list_id=f"L{i}"), p, p.source_rows) for i, p in enumerate(plans, start=1)
    ]


def test_a_programme_in_step_passes() -> None:
    assert check_programme(BASE, 30, lists(plan(10, 1, 10), plan(20, 2, 20))) is None


def test_the_share_removed_counts_over_every_list_first() -> None:
    tripped = check_programme(BASE, 30, lists(plan(10, 9, 10), plan(20, 2, 20)))
    assert tripped is not None and tripped.where == PROGRAMME and tripped.guard == "max_removals"
    assert "11 of the 30 recorded members" in tripped.tripped.reason


def test_one_list_losing_most_of_its_members_stops_the_programme() -> None:
    tripped = check_programme(BASE, 100, lists(plan(10, 6, 10), plan(90, 0, 90)))
    assert tripped is not None and tripped.where == "audience 'tier_1' (list L1)"
    assert tripped.guard == "max_removals"


def test_an_emptied_tier_with_members_trips_allow_empty_source() -> None:
    options = replace(BASE, max_removals=None)
    tripped = check_programme(options, 20, lists(plan(20, 0, 10), plan(0, 5, 5), base=options))
    assert tripped is not None and tripped.guard == "allow_empty_source"
    assert tripped.where == "audience 'tier_2' (list L2)"
    error = tripped.error("r", "abm_sync_plan")
    assert "nothing was sent or recorded" in str(error) and error.guard == "allow_empty_source"


def test_a_tier_with_neither_members_nor_rows_is_left_alone() -> None:
    assert check_programme(BASE, 10, lists(plan(10, 0, 0), plan(0, 0, 0))) is None


def test_an_empty_source_stops_the_programme_unless_allowed() -> None:
    tripped = check_programme(BASE, 0, lists(plan(0, 10, 10)))
    assert tripped is not None and tripped.where == PROGRAMME and tripped.guard == "allow_empty_source"
    allowed = replace(BASE, allow_empty_source=True, max_removals=None)
    assert check_programme(allowed, 0, lists(plan(0, 10, 10), base=allowed)) is None


def test_a_tier_whose_rows_all_name_a_higher_audience_too_is_not_empty() -> None:
    """Every account of tier 2 is promoted: its rows still name tier 2, so the tier is not emptied by a
    fault; its list's removals are a re-tiering that max_removals decides."""
    promoted = [("tier_1", replace(BASE, list_id="L1"), plan(20, 0, 10), 20)]
    promoted.append(("tier_2", replace(BASE, list_id="L2"), plan(0, 10, 10), 10))
    approved = replace(BASE, max_removals=None)
    assert (
        check_programme(approved, 30, [(v, replace(o, max_removals=None), w, n) for v, o, w, n in promoted])
        is None
    )
    tripped = check_programme(BASE, 30, promoted)
    assert tripped is not None and tripped.guard == "max_removals"
    emptied = [*promoted[:1], ("tier_2", replace(approved, list_id="L2"), plan(0, 10, 10), 0)]
    tripped = check_programme(approved, 20, emptied)
    assert tripped is not None and tripped.guard == "allow_empty_source"
    assert tripped.where == "audience 'tier_2' (list L2)"


def test_an_emptied_tier_says_no_row_names_its_audience_and_which_params_let_it_through() -> None:
    """The source has rows, none naming tier 2: the message says so, not that the source is empty, and
    names both guards an emptied list passes."""
    approved = replace(BASE, max_removals=None)
    emptied = [
        ("tier_1", replace(approved, list_id="L1"), plan(20, 0, 20), 20),
        ("tier_2", replace(approved, list_id="L2"), plan(0, 5, 5), 0),
    ]
    tripped = check_programme(approved, 20, emptied)
    assert tripped is not None and (tripped.where, tripped.guard) == (
        "audience 'tier_2' (list L2)",
        "allow_empty_source",
    )
    message = str(tripped.error("r", "abm_sync_plan"))
    assert "no source row names this audience" in message and "the source returned no rows" not in message
    assert "allow_empty_source=True, and with max_removals=None too" in message
