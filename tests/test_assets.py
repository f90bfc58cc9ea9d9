"""``abm_provider.assets``: the provider's Asset URI schemes, checked and normalised by Airflow.

An ``abm-export`` Asset is watched by the event trigger; an ``abm-warehouse`` Asset names a table by its
connection and its (optionally schema-qualified) name; a URI that names neither is refused saying why.
"""

from __future__ import annotations

import pytest

from abm_provider.assets import export_asset
from abm_provider.triggers.exports import ExecutionCompletedEventTrigger


def test_export_asset_is_a_watched_asset_with_a_checked_uri() -> None:
    from airflow.sdk import Asset

    asset = export_asset("TACTIC_PERFORMANCE", "abm_default", poll_interval=15)
    assert (asset.name, asset.uri) == (
        "abm_export/abm_default/TACTIC_PERFORMANCE",
        "abm-export://abm_default/TACTIC_PERFORMANCE",
    )
    [watcher] = asset.watchers
    assert isinstance(watcher.trigger, ExecutionCompletedEventTrigger)
    assert watcher.trigger.poll_interval == 15
    for bad, why in [
        ("abm-export:///TACTIC_PERFORMANCE", "must name a connection"),
        ("abm-export://abm_default/tactic", "must name one export type"),
        ("abm-export://abm_default/A/B", "must name one export type"),
    ]:
        with pytest.raises(ValueError, match=why):
            Asset(uri=bad)


def test_the_abm_warehouse_asset_scheme_is_registered_and_normalised() -> None:
    from airflow.sdk import Asset

    from abm_provider.assets import warehouse_asset

    asset = warehouse_asset("wh", "analytics.tactic_performance")
    assert asset.uri == "abm-warehouse://wh/analytics.tactic_performance"
    # Airflow normalises the URI through the registered handler (a trailing slash goes).
    assert Asset(uri="abm-warehouse://wh/analytics.tactic_performance/").uri == asset.uri
    for bad, why in [
        ("abm-warehouse:///t", "must name a connection"),
        ("abm-warehouse://wh", "must name one table"),
        ("abm-warehouse://wh/a/b", "must name one table"),
        ("abm-warehouse://wh/bad name", "bad name"),
    ]:
        with pytest.raises(ValueError, match=why):
            Asset(uri=bad)
