"""The provider's packages keep their private modules to themselves.

A module whose name starts with ``_`` belongs to its package: what another package needs from it is
made public in its owner (``hooks/settings.py``, ``hooks/endpoints.py``, ``operators/base.py``) or
moved to what every layer shares (``common/urls.py``). Every import counts, those under
``TYPE_CHECKING`` and inside functions too.
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
