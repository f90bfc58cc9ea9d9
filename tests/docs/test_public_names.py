"""The pages name every public class and function of the provider, and every example DAG.

The public modules are those ``get_provider_info()`` tells Airflow about (hooks, operators, sensors,
triggers, transfers, the Asset URI modules) and those the example DAGs in ``dags/`` import from. A
public module's public names are its classes and functions: those its ``__all__`` lists (else those
it defines) that the provider defines, and those the example DAGs import from it (Airflow's own,
re-exported by ``abm_provider.compat``, among them).

- The module tables (a table whose header starts ``| module |``) of README.md and PYPI.md, and of any
  docs/ page that has one, name every public name in the row of a module that has it, and name
  nothing a row's module lacks; a ``dags/`` row lists exactly the files in ``dags/``.
- README.md, PYPI.md and the docs/ pages (together) name every example DAG file; docs/ names every
  public name too.

So a class, a function or a DAG added later without a line in the docs fails here.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType
from typing import Any

from abm_provider import get_provider_info

ROOT = Path(__file__).resolve().parents[2]
SUMMARY_PAGES = [ROOT / "README.md", ROOT / "PYPI.md"]
DOC_PAGES = sorted((ROOT / "docs").glob("*.md"))
DAG_FILES = sorted(path.name for path in (ROOT / "dags").glob("*.py"))

#: Public by ``__all__`` but deliberately left out of the tables, each with the reason.
NOT_IN_TABLES = {
    "airflow_conf": "the provider's own reader of Airflow's configuration; DAGs use Airflow's conf",
}

_TABLE_ROW = re.compile(r"^\|\s*`(?P<module>[^`]+)`[^|]*\|(?P<what>.*)\|\s*$")
_NAMED = re.compile(r"`(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<call>\(\))?`")
_DAG_FILE = re.compile(r"`([A-Za-z0-9_]+\.py)`")


def _airflow_handlers() -> set[str]:
    """Functions that ``get_provider_info()`` hands to Airflow to call (URI sanitizers), not to DAGs."""
    return {entry["handler"].rsplit(".", 1)[1] for entry in get_provider_info().get("asset-uris", [])}


def _dag_imports() -> dict[str, set[str]]:
    """``{module: names}`` the example DAGs import from the provider."""
    found: dict[str, set[str]] = {}
    for name in DAG_FILES:
        tree = ast.parse((ROOT / "dags" / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("abm_provider"):
                found.setdefault(node.module or "", set()).update(alias.name for alias in node.names)
    return found


def public_modules() -> list[str]:
    info = get_provider_info()
    modules = {
        m
        for kind in ("hooks", "operators", "sensors", "triggers")
        for e in info[kind]
        for m in e["python-modules"]
    }
    modules |= {entry["python-module"] for entry in info["transfers"]}
    modules |= {
        entry[key].rsplit(".", 1)[0]
        for entry in info.get("asset-uris", [])
        for key in ("handler", "factory")
        if key in entry
    }
    return sorted(modules | set(_dag_imports()))


def _is_class_or_function(value: Any) -> bool:
    return inspect.isclass(value) or inspect.isfunction(value)


def public_names(module: ModuleType) -> set[str]:
    declared = getattr(module, "__all__", None)
    names = set(declared) if declared is not None else set(vars(module))
    own = {
        name
        for name in names
        if not name.startswith("_")
        and _is_class_or_function(value := getattr(module, name))
        and value.__module__.startswith("abm_provider")
        and (declared is not None or value.__module__ == module.__name__)
    }
    used = {n for n in _dag_imports().get(module.__name__, ()) if _is_class_or_function(getattr(module, n))}
    return (own | used) - _airflow_handlers() - set(NOT_IN_TABLES)


def _expected() -> dict[str, str]:
    """``{name: module}``, every public name with a public module that has it."""
    found: dict[str, str] = {}
    for name in public_modules():
        for public in public_names(importlib.import_module(name)):
            found.setdefault(public, name)
    return found


def module_tables(page: Path) -> list[list[tuple[str, str, int]]]:
    """Each module table of the page: ``[(module, what, line)]``, the header and rule left out."""
    tables: list[list[tuple[str, str, int]]] = []
    rows: list[tuple[str, str, int]] | None = None
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if re.match(r"^\|\s*module\s*\|", line):
            rows = []
            tables.append(rows)
        elif rows is not None and line.startswith("|"):
            if match := _TABLE_ROW.match(line):
                rows.append((match.group("module"), match.group("what"), number))
        else:
            rows = None
    return tables


def _table_problems(page: Path, table: list[tuple[str, str, int]]) -> list[str]:
    """What the table misses, and the classes (``CamelCase``) and calls (``name()``) it names that its
    row's module lacks and no public module has (a name of another public module is a reference)."""
    expected = _expected()
    problems: list[str] = []
    named: set[str] = set()
    for module_name, what, number in table:
        where = f"{page.relative_to(ROOT)}:{number}"
        if module_name.startswith("dags"):
            listed = sorted(set(_DAG_FILE.findall(what)))
            if listed != DAG_FILES:
                problems.append(f"{where}: the dags/ row lists {listed}, dags/ holds {DAG_FILES}")
            continue
        if not module_name.startswith("abm_provider"):
            continue
        module = importlib.import_module(module_name)
        for name, call in _NAMED.findall(what):
            if hasattr(module, name):
                named.add(name)
            elif (name[0].isupper() or call) and name not in expected:
                problems.append(f"{where}: `{name}` is in neither {module_name} nor any public module")
    missing = sorted(f"{name} ({module})" for name, module in expected.items() if name not in named)
    if missing:
        problems.append(f"{page.relative_to(ROOT)}: the module table misses {', '.join(missing)}")
    return problems


def test_the_public_names_are_found() -> None:
    """The rules above find what the design names as public, so a broken finder cannot pass vacuously."""
    expected = _expected()
    assert {"AbmHook", "ExecutionCompletedEventTrigger", "export_asset", "warehouse_asset"} <= set(expected)
    assert "sanitize_uri" not in expected, "Airflow's URI handlers are not DAG authors' names"
    assert len(DAG_FILES) == 4, DAG_FILES
    assert expected["AccountAudienceSyncOperator"] == "abm_provider.operators.account_lists"


def test_every_exclusion_is_still_public() -> None:
    """An entry of NOT_IN_TABLES whose name left every public module's ``__all__`` is removed."""
    declared = {
        name
        for module in public_modules()
        for name in getattr(importlib.import_module(module), "__all__", ())
    }
    assert set(NOT_IN_TABLES) <= declared, sorted(set(NOT_IN_TABLES) - declared)


def test_the_module_tables_name_every_public_name() -> None:
    pages = [*SUMMARY_PAGES, *DOC_PAGES]
    tables = {page: module_tables(page) for page in pages}
    assert all(tables[page] for page in SUMMARY_PAGES), "README.md and PYPI.md each have a module table"
    problems = [
        problem for page in pages for table in tables[page] for problem in _table_problems(page, table)
    ]
    assert problems == [], "\n".join(problems)


def test_every_example_dag_is_named() -> None:
    docs = "\n".join(page.read_text(encoding="utf-8") for page in DOC_PAGES)
    texts = {**{page.name: page.read_text(encoding="utf-8") for page in SUMMARY_PAGES}, "docs/": docs}
    missing = [
        f"{where}: {dag}" for where, text in texts.items() for dag in DAG_FILES if f"`{dag}`" not in text
    ]
    assert missing == []


def test_docs_name_every_public_name() -> None:
    docs = "\n".join(page.read_text(encoding="utf-8") for page in DOC_PAGES)
    missing = sorted(name for name in _expected() if not re.search(rf"\b{re.escape(name)}\b", docs))
    assert missing == [], f"no docs/ page names {missing}"
