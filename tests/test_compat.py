"""The Airflow names that moved between 3.1 and 3.3 are imported in one place, ``abm_provider.compat``.

``make compat`` proves the provider on each Airflow; this keeps a new module from importing a moved
name straight from where the pinned Airflow happens to keep it, which only the 3.1 venv would catch.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Modules whose names differ between the supported Airflow releases; compat.py picks the right one.
MOVED = ("airflow.sdk.exceptions", "airflow.exceptions", "airflow.sdk.configuration", "airflow.configuration")


def _imports_of_moved_modules(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names if n in MOVED]
    return found


def test_moved_airflow_names_are_imported_only_through_the_compat_module() -> None:
    files = [*(ROOT / "src" / "abm_provider").rglob("*.py"), *(ROOT / "dags").glob("*.py")]
    offenders = [hit for path in files if path.name != "compat.py" for hit in _imports_of_moved_modules(path)]
    assert offenders == []


def test_the_compat_module_gives_the_pinned_airflows_own_classes() -> None:
    from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from abm_provider import compat

    assert compat.AirflowFailException is AirflowFailException
    assert compat.AirflowSkipException is AirflowSkipException
    assert compat.AssetOrTimeSchedule is AssetOrTimeSchedule
    assert compat.CronTriggerTimetable is CronTriggerTimetable
