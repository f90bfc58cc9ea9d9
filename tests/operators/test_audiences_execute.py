"""``AccountAudienceSyncOperator.execute`` against the emulator, on DuckDB: arguments known only once
rendered are refused without retries and before any list is created, a list given by name is found or
created (never by a dry run), and the summary has the shape docs/audiences.md gives it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from abm_provider.exceptions import SyncGuardTripped
from abm_provider.hooks.abm import AbmHook
from accounts.audiences.audience_support import make_lists, on_service, operator, write_model
from accounts.sync.sync_support import context, open_sync_warehouse
from support.tasks import use_emulator
from support.warehouses import Warehouse

#: What docs/audiences.md ("What a run returns and logs") says a summary and each list's entry hold.
SUMMARY_KEYS = {"lists", "moves", "totals", "run_id", "mode", "dry_run", "guard", "guard_at"}
LIST_KEYS = {
    "audience",
    "list_id",
    "to_add",
    "to_remove",
    "added",
    "removed",
    "moved_in",
    "moved_out",
    "waiting",
    "excluded",
    "not_found",
    "rejected",
    "held",
    "duplicates",
    "source_rows",
    "state_count",
    "dry_run",
}


@pytest.fixture
def abm(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    return use_emulator(emulator, monkeypatch)


@pytest.fixture
def wh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Warehouse]:
    with open_sync_warehouse("duckdb", tmp_path, monkeypatch) as found:
        yield found


def lists_named(name: str, folder_id: str) -> list[str]:
    return [i["id"] for i in AbmHook().iter_account_lists([folder_id]) if i.get("displayName") == name]


def rendered(task: Any, **values: Any) -> Any:
    """``task`` with its templated arguments set to what they rendered to."""
    for name, value in values.items():
        setattr(task, name, value)
    return task


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"audiences": "same-list-twice"}, "names the list .* more than once"),
        ({"exclude_lists": "kept-list"}, "are both kept by this programme and excluded from it"),
        ({"audiences": "bad-id-beside-a-name"}, r"audiences\['tier_2'\]\['list_id'\]"),
        ({"exclude_lists": "one-string"}, "exclude_lists must be a list of list ids"),
    ],
    ids=["same-list-twice", "list-kept-and-excluded", "bad-list-id", "exclude-lists-one-string"],
)
def test_a_programme_refused_once_rendered_fails_without_retries_and_creates_nothing(
    abm: Any, wh: Warehouse, given: dict[str, str], message: str
) -> None:
    lists = make_lists()
    folder = AbmHook().ensure_folder("Audiences")["folderId"]
    write_model(wh, {"tier_1": [1], "tier_2": [2]}, [])
    values = {
        "same-list-twice": {"tier_1": lists["tier_1"], "tier_2": {"list_id": lists["tier_1"]}},
        "kept-list": [lists["tier_1"]],
        "bad-id-beside-a-name": {"tier_1": {"list_name": "Made"}, "tier_2": {"list_id": "../folders"}},
        "one-string": lists["tier_3"],
    }
    task = operator(
        wh,
        {"tier_1": "{{ params.first }}", "tier_2": lists["tier_2"]},
        folder_id=folder,
        exclude_lists="{{ params.excluded }}",
    )
    renders = {"audiences": {"tier_1": lists["tier_1"], "tier_2": lists["tier_2"]}, "exclude_lists": []}
    task = rendered(task, **(renders | {name: values[key] for name, key in given.items()}))
    with pytest.raises(AirflowFailException, match=message):
        task.execute(context("run-1"))
    assert lists_named("Made", folder) == []
    assert on_service(abm, lists) == {tier: set() for tier in lists}


def test_a_list_given_by_name_is_shown_new_by_a_dry_run_then_created_once(abm: Any, wh: Warehouse) -> None:
    folder = AbmHook().ensure_folder("Audiences")["folderId"]
    write_model(wh, {"tier_1": [1, 2], "tier_2": [3]}, [])
    audiences = {"tier_1": {"list_name": "Named 1"}, "tier_2": {"list_name": "Named 2"}}
    preview = operator(wh, audiences, folder_id=folder, dry_run=True).execute(context("dry"))
    assert lists_named("Named 1", folder) == [] and lists_named("Named 2", folder) == []
    assert [e["list_id"] for e in preview["lists"]] == ["(new) Named 1", "(new) Named 2"]
    assert (preview["dry_run"], preview["totals"]["to_add"]) == (True, 3)
    first = operator(wh, audiences, folder_id=folder).execute(context("run-1"))
    created = lists_named("Named 1", folder)
    assert len(created) == 1 and first["lists"][0]["list_id"] == created[0]
    again = operator(wh, audiences, folder_id=folder, dry_run=True).execute(context("dry-2"))
    assert again["lists"][0]["list_id"] == created[0]
    operator(wh, audiences, folder_id=folder).execute(context("run-2"))
    assert lists_named("Named 1", folder) == created


def test_a_run_s_summary_has_an_entry_per_list_and_counts_only(abm: Any, wh: Warehouse) -> None:
    lists = make_lists()
    write_model(wh, {"tier_1": [1, 2], "tier_2": [2, 3], "tier_3": [4]}, [4])
    summary = operator(wh, lists).execute(context("run-1"))
    assert set(summary) == SUMMARY_KEYS
    assert [set(entry) >= LIST_KEYS for entry in summary["lists"]] == [True, True, True]
    assert (summary["guard"], summary["guard_at"], summary["dry_run"]) == (None, None, False)
    assert (summary["mode"], summary["run_id"]) == ("mirror", "run-1")
    totals = summary["totals"]
    assert (totals["added"], totals["excluded"], totals["moved"]) == (3, 1, 0)


def test_a_dry_run_reports_the_guard_a_real_run_then_trips(abm: Any, wh: Warehouse) -> None:
    lists = make_lists()
    write_model(wh, {"tier_1": range(1, 5), "tier_2": range(5, 9), "tier_3": range(9, 13)}, [])
    operator(wh, lists).execute(context("run-1"))
    write_model(wh, {"tier_1": range(1, 5), "tier_2": [], "tier_3": range(9, 13)}, [])
    preview = operator(wh, lists, dry_run=True, max_removals=None).execute(context("dry"))
    assert (preview["dry_run"], preview["guard"]) == (True, "allow_empty_source")
    assert preview["guard_at"] == f"audience 'tier_2' (list {lists['tier_2']})"
    with pytest.raises(SyncGuardTripped):
        operator(wh, lists, max_removals=None).execute(context("run-2"))
