"""The pytest examples of docs/emulator.md that use Airflow's own API pass on this venv's Airflow.

``make compat`` runs these on the oldest and the newest supported Airflow (the lanes that set
``ABM_SMOKE_DOC_EXAMPLES``; the full suite's tests/docs runs every block of the page), so an example that
imports what only some releases have (the page's first example once imported ``DagBag`` from where
Airflow 3.3 alone keeps it) fails there, not in a reader's project. The examples are the page's
``<!-- docs-test: pytest -->`` blocks, each run by pytest in a folder of its own, with ``dags/``
linked from the repository, as the page says to run them.

This module also holds the reader of the docs' code blocks and the runner of a ``pytest`` block:
tests/docs/test_doc_blocks.py, which runs every block of every page on the repository's Airflow, uses
them too, so both read the markers alike.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EMULATOR_PAGE = ROOT / "docs" / "emulator.md"

_FENCE = re.compile(r"^```(\S*)\s*$")
_MARKER = re.compile(r"^<!--\s*docs-test:\s*(?P<kind>[a-z-]+)(?::\s*(?P<reason>[a-z-]+))?\s*-->$")


@dataclass(frozen=True)
class Block:
    """A fenced code block of a page: its language, and how it runs (the marker on the line above)."""

    page: Path
    line: int
    lang: str
    kind: str
    reason: str | None
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def page_blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``; ``kind`` defaults to ``shell`` for bash and ``python`` for Python."""
    found: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    number = 0
    while number < len(lines):
        opening = _FENCE.match(lines[number])
        if not opening:
            number += 1
            continue
        end = next(i for i in range(number + 1, len(lines)) if lines[i].startswith("```"))
        lang = opening.group(1)
        marker = _MARKER.match(lines[number - 1].strip()) if number else None
        default = {"bash": "shell", "python": "python"}.get(lang, "")
        found.append(
            Block(
                page=page,
                line=number + 1,
                lang=lang,
                kind=marker.group("kind") if marker else default,
                reason=marker.group("reason") if marker else None,
                text="\n".join(lines[number + 1 : end]) + "\n",
            )
        )
        number = end + 1
    return found


def run_pytest_block(block: Block, folder: Path, env: dict[str, str], timeout: float = 300) -> str:
    """Run a ``pytest`` block as a test module in ``folder`` with this Python's pytest; its output.

    Fails, with the output, unless it exits 0 having passed a test and failed none.
    """
    (folder / "test_docs_example.py").write_text(block.text)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_docs_example.py"]
    done = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (
        f"{block.where} failed ({done.returncode})\n--- stdout\n{done.stdout[-6000:]}\n"
        f"--- stderr\n{done.stderr[-6000:]}"
    )
    assert re.search(r"\b\d+ passed\b", done.stdout) and " failed" not in done.stdout, done.stdout
    return done.stdout


#: Those that use Airflow's own API, which moves between releases; the provider's and the emulator's
#: are the same on every Airflow, and the other examples run in the full suite (tests/docs).
_USES_AIRFLOW = re.compile(r"^\s*(?:from|import)\s+airflow\b", re.MULTILINE)
EXAMPLES = [b for b in page_blocks(EMULATOR_PAGE) if b.kind == "pytest" and _USES_AIRFLOW.search(b.text)]


def test_the_page_has_a_pytest_example_on_airflows_api() -> None:
    assert EXAMPLES, f"{EMULATOR_PAGE.relative_to(ROOT)}: no <!-- docs-test: pytest --> block imports airflow"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("block", EXAMPLES, ids=[block.where for block in EXAMPLES])
@pytest.mark.skipif(
    not os.environ.get("ABM_SMOKE_DOC_EXAMPLES"),
    reason="make compat runs it on the oldest and the newest Airflow (ABM_SMOKE_DOC_EXAMPLES); "
    "tests/docs runs every block of the page on this venv's",
)
def test_the_emulator_pages_pytest_example_passes(block: Block, tmp_path: Path) -> None:
    (tmp_path / "dags").symlink_to(ROOT / "dags")
    # A reader's shell: none of this run's Airflow or pytest settings, an Airflow home of its own.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ABM_", "PYTEST"))}
    env["AIRFLOW_HOME"] = str(tmp_path / "airflow-home")
    run_pytest_block(block, tmp_path, env)
