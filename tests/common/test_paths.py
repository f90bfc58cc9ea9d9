"""``abm_provider.common.paths``: a user's path as an ``ObjectStoragePath``, which are local, safe keys.

The local case is also in the smoke subset (tests/smoke/test_smoke.py), which ``make compat`` runs on
every supported Airflow with the universal-pathlib it installs: 0.2 on 3.1, 0.3 on 3.2 and 3.3.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from airflow.sdk import ObjectStoragePath

from abm_provider.common.paths import as_storage_path, default_state_dir, is_local, local_path, safe_key


def test_a_relative_path_becomes_an_absolute_local_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resolved once, here, not later by fsspec against whichever working directory a worker has."""
    monkeypatch.chdir(tmp_path)
    path = as_storage_path("state/export.csv")
    assert str(path) == f"file://{tmp_path}/state/export.csv"
    assert (path.protocol, is_local(path), local_path(path)) == (
        "file",
        True,
        str(tmp_path / "state/export.csv"),
    )


def test_a_local_path_writes_and_reads_through_the_object_store_api(tmp_path: Path) -> None:
    path = as_storage_path(tmp_path / "a" / "b.csv")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("id\n1\n")
    assert (tmp_path / "a" / "b.csv").read_text() == "id\n1\n"
    assert [p.name for p in path.parent.iterdir()] == ["b.csv"]


def test_an_object_storage_path_is_kept_and_a_store_is_not_local() -> None:
    remote = ObjectStoragePath("s3://bucket/exports/x.csv")
    assert as_storage_path(remote) is remote
    assert as_storage_path("s3://bucket/exports/x.csv").protocol == "s3"
    assert not is_local(remote)


@pytest.mark.parametrize(
    ("part", "key"),
    [("manual__2026-01-01T00:00:00+00:00", "manual__2026-01-01T00_00_00_00_00"), ("../..", "_"), ("", "_")],
)
def test_safe_key(part: str, key: str) -> None:
    assert safe_key(part) == key


def test_the_state_dir_comes_from_the_environment_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__ABM__STATE_DIR", str(tmp_path))
    assert default_state_dir() == str(tmp_path)
