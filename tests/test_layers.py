"""The provider's import graph: layers that import only downwards, no circles, private stays private.

The packages form layers (:data:`LAYERS`): what every layer shares (``common``) imports no warehouse,
a hook no operator, and the package root comes last. No module imports itself back through others:
a circle means neither can be read, tested or replaced alone. A module whose name starts with ``_``
belongs to its package: what another package needs from it is made public in its owner
(``hooks/settings.py``, ``hooks/endpoints.py``, ``operators/base.py``) or moved to what every layer
shares (``common/urls.py``). Every import counts, those under ``TYPE_CHECKING`` and inside functions
too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "abm_provider"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every absolute import of ``abm_provider`` in ``path`` (names imported
    from a module count as that module's submodules, which they may be)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if name.startswith("abm_provider.")]


#: The provider's packages, lowest first; a module imports from its own layer or those below it.
#: ``<root>`` is ``abm_provider/__init__.py`` (``get_provider_info``).
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"compat", "exceptions"}),
    frozenset({"common"}),
    frozenset({"hooks", "warehouse"}),
    frozenset({"exports", "accounts"}),
    frozenset({"triggers"}),
    frozenset({"assets"}),
    frozenset({"operators"}),
    frozenset({"sensors", "transfers"}),
    frozenset({"<root>"}),
)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def import_graph() -> dict[str, set[str]]:
    """{module: the provider's modules it imports}; ``from package import module`` names the module."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                wanted = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                wanted = [
                    f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                    for alias in node.names
                ]
            else:
                continue
            for target in wanted:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of ``graph`` with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            part = [stack.pop()]
            while part[-1] != module:
                part.append(stack.pop())
            if len(part) > 1:
                found.append(sorted(part))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def _layer(module: str) -> int:
    parts = module.split(".")
    package = parts[1] if len(parts) > 1 else "<root>"
    return next(i for i, layer in enumerate(LAYERS) if package in layer)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [
        f"{module} imports {target}"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if _layer(target) > _layer(module)
    ]


def test_the_import_graph_has_no_circle() -> None:
    assert circles(import_graph()) == []


def test_no_module_imports_from_a_higher_layer() -> None:
    assert upward_imports(import_graph()) == []


def test_every_package_has_a_layer() -> None:
    packages = {m.split(".")[1] if "." in m else "<root>" for m in _modules()}
    assert packages == set().union(*LAYERS)


def test_the_graph_checks_see_a_circle_and_an_upward_import() -> None:
    graph = {
        "abm_provider.warehouse.flow": {"abm_provider.warehouse.newest"},
        "abm_provider.warehouse.newest": {"abm_provider.warehouse.flow"},
        "abm_provider.common.lineage": {"abm_provider.warehouse.schema"},
        "abm_provider.warehouse.schema": set(),
    }
    assert circles(graph) == [["abm_provider.warehouse.flow", "abm_provider.warehouse.newest"]]
    assert upward_imports(graph) == ["abm_provider.common.lineage imports abm_provider.warehouse.schema"]


def private_imports_from_other_packages() -> list[str]:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = _module_name(path)
        package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
        for line, name in _imported(path):
            parts = name.split(".")
            private = [
                i for i, part in enumerate(parts) if part.startswith("_") and not part.startswith("__")
            ]
            if not private:
                continue
            owner, module = ".".join(parts[: private[0]]), ".".join(parts[: private[0] + 1])
            problem = f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}, private to {owner}"
            if package != owner and problem not in problems:
                problems.append(problem)
    return problems


def test_no_package_imports_another_packages_private_module() -> None:
    assert private_imports_from_other_packages() == []


def test_the_check_sees_a_private_import_from_another_package(tmp_path: Path) -> None:
    """The scan is not vacuous: a module of another package importing ``hooks._pipeline`` is reported,
    under ``TYPE_CHECKING`` too; the owner's own import is not."""
    fake = tmp_path / "abm_provider"
    (fake / "hooks").mkdir(parents=True)
    (fake / "accounts").mkdir()
    (fake / "hooks" / "_pipeline.py").write_text("X = 1\n")
    (fake / "hooks" / "abm.py").write_text("from abm_provider.hooks._pipeline import X\n")
    (fake / "accounts" / "sending.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from abm_provider.hooks._pipeline import X\n"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(f"{__name__}.PACKAGE", fake)
        assert private_imports_from_other_packages() == [
            "abm_provider/accounts/sending.py:3 imports abm_provider.hooks._pipeline, "
            "private to abm_provider.hooks"
        ]
