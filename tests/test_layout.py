"""The tests mirror the code: each module of ``src/abm_provider`` has a test file named for it.

``src/abm_provider/<path>/<module>.py`` is tested in ``tests/<path>/test_<module>.py``, or, when its tests
are split by aspect, in ``tests/<path>/test_<module>_<aspect>.py`` (``test_account_lists_emulator.py``).
A private module's ``_`` is dropped (``hooks/_pipeline.py``: ``tests/hooks/test_pipeline.py``). A
package's ``__init__.py`` that defines a function or a class is named for its package, in the package's
own test folder (``warehouse/dialects/__init__.py``: ``tests/warehouse/dialects/test_dialects.py``; the
root's: ``tests/test_abm_provider.py``); one that only imports and re-exports has nothing to test alone.

The few modules whose tests are named otherwise are listed in :data:`EXCEPTIONS`, each with where its
tests are. Renaming a test file is better than adding to it; an entry no longer needed fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "abm_provider"
TESTS = ROOT / "tests"

_STATEMENTS = (
    "every statement is rendered for every dialect and parameter style by "
    "tests/accounts/sync/statements/test_statements.py and run on DuckDB, PostgreSQL and MariaDB by the "
    "whole syncs of tests/accounts/sync"
)
_AUDIENCES = (
    "the audience sync's moves and summary, run whole by tests/accounts/audiences/test_engine.py "
    "on DuckDB, PostgreSQL and MariaDB against the emulator"
)
_LOADS = (
    "run by every load of tests/transfers and tests/warehouse, on each warehouse of the `warehouse` fixture"
)

#: Modules tested under other names: ``{module path under src/abm_provider: where its tests are}``.
EXCEPTIONS: dict[str, str] = {
    "warehouse/__init__.py": "dialect_of and loader_for hand a hook to the dialect registry, and are tested "
    "with it in tests/warehouse/dialects/test_dialects.py",
    "accounts/audiences/moves.py": _AUDIENCES,
    "accounts/audiences/summary.py": _AUDIENCES,
    "accounts/audiences/move_statements.py": "every statement is rendered for every dialect and parameter "
    "style beside the tiering's by tests/accounts/audiences/test_statements.py, and run whole by "
    "tests/accounts/audiences/test_engine.py",
    "operators/_sync.py": "the arguments both sync operators share: tests/operators/test_list_sync.py "
    "and tests/operators/test_audiences.py check them",
    "accounts/sync/options.py": "a run's settings: AccountListSyncOperator checks them "
    "(tests/operators/test_list_sync.py) and every whole sync of tests/accounts/sync reads them",
    "accounts/sync/row_values.py": "a staged row's values and hash: tests/accounts/sync/test_staging.py "
    "compares the Python hash with the one each warehouse computes",
    "accounts/sync/statements/plan.py": _STATEMENTS,
    "accounts/sync/statements/recording.py": _STATEMENTS,
    "accounts/sync/statements/runs.py": _STATEMENTS,
    "accounts/sync/statements/locks.py": "the lock rows of a sync on Snowflake and BigQuery: taken, refused "
    "naming the holder, taken over when stale and deleted, by tests/accounts/sync/test_lock_rows.py",
    "accounts/sync/statements/staging.py": _STATEMENTS + "; tests/accounts/sync/test_staging.py stages rows",
    "exports/pipe.py": "the bounded pipe between a download and its readers, tested with them in "
    "tests/exports/test_stream.py",
    "hooks/_base.py": "what both hooks share, run by every test of either hook "
    "(tests/hooks/test_abm_emulator.py, tests/hooks/test_async_hook.py)",
    "transfers/sources.py": "what a load's source names: a file (tests/transfers/test_load_direct.py), an "
    "execution (test_load_streamed.py), 'unloaded' (test_load_unloaded.py)",
    "transfers/table_checks.py": "the check tasks of the example DAGs, run by tests/dags",
    "warehouse/load.py": "LoadRequest and LoadResult: tests/warehouse/test_flow.py checks a load leaves its "
    "request as it was; " + _LOADS,
    "warehouse/schema.py": "the column kinds and value rules: tests/warehouse/test_rules_sql.py holds the "
    "SQL rules to them, tests/exports/test_parquet.py the Parquet types; " + _LOADS,
    "warehouse/stream.py": "a file loaded while it downloads: tests/transfers/test_load_streamed.py",
    "warehouse/dialects/base.py": "the Dialect every warehouse implements: " + _LOADS + "; "
    "tests/warehouse/dialects/test_capabilities.py checks what each declares, "
    "tests/warehouse/dialects/test_stripping.py what each strip_sql takes off",
    "warehouse/dialects/postgres.py": "the loads and syncs on PostgreSQL: " + _LOADS + ", and "
    "tests/accounts/sync; its rules in SQL in tests/warehouse/test_rules_sql.py",
    "warehouse/dialects/postgres_copy.py": "COPY's pre-scan and chunked file, under every PostgreSQL load: "
    "tests/transfers/test_load_killed.py kills one mid-COPY, tests/transfers/test_load_streamed.py "
    "streams one",
}


def _defines_something(init: Path) -> bool:
    """Whether a package's ``__init__.py`` holds code of its own, not only imports and ``__all__``."""
    tree = ast.parse(init.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) for node in tree.body)


def _named_for(module: Path) -> tuple[Path, str] | None:
    """The folder and the name a test file of ``module`` is named for; ``None`` when it has nothing to
    test alone."""
    relative = module.relative_to(PACKAGE)
    if relative.name == "__init__.py":
        if not _defines_something(module):
            return None
        return TESTS / relative.parent, (relative.parent.name or PACKAGE.name)
    return TESTS / relative.parent, relative.stem.lstrip("_")


def _has_test_file(folder: Path, name: str) -> bool:
    return (folder / f"test_{name}.py").is_file() or any(folder.glob(f"test_{name}_*.py"))


def _modules() -> dict[str, Path]:
    return {str(path.relative_to(PACKAGE)): path for path in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_has_a_test_file_named_for_it() -> None:
    missing = []
    for name, path in _modules().items():
        wanted = _named_for(path)
        if wanted is None or name in EXCEPTIONS or _has_test_file(*wanted):
            continue
        folder, stem = wanted
        missing.append(f"src/abm_provider/{name}: {folder.relative_to(ROOT)}/test_{stem}.py")
    assert missing == [], "modules without a test file named for them:\n" + "\n".join(missing)


def test_every_exception_is_still_needed_and_points_at_tests_that_exist() -> None:
    modules = _modules()
    stale = []
    for name in EXCEPTIONS:
        wanted = _named_for(modules[name]) if name in modules else None
        if wanted is None or _has_test_file(*wanted):
            stale.append(name)
    assert stale == [], f"no longer a module, or named for now, so no longer an exception: {stale}"
    named = {path for reason in EXCEPTIONS.values() for path in re.findall(r"tests/[\w/]+(?:\.py)?", reason)}
    assert named and sorted(p for p in named if not (ROOT / p).exists()) == []
