"""Machine details and the printed / Markdown tables of ``scripts/bench.py``.

Figures only mean something next to the machine that produced them, so every report starts with the
CPU, cores, memory and the versions of Python, Airflow, DuckDB and PostgreSQL.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Row:
    """One measured case: the median figures of its runs, for the table."""

    section: str
    case: str
    size: str
    throughput: str
    peak_rss: str
    seconds: str
    notes: str = ""
    figures: dict[str, float] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Check:
    """A ratio or figure against the issue's target; ``met`` is None where no target applies."""

    section: str
    name: str
    value: str
    target: str
    met: bool | None


def _first_line(path: str, key: str) -> str:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _command(args: Sequence[str]) -> str:
    try:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine_info(pg_dsn: str) -> dict[str, str]:
    """What the figures depend on; read-only commands only."""
    mem_kib = _first_line("/proc/meminfo", "MemTotal").split()[0]
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _first_line("/proc/cpuinfo", "model name"),
        "cores": str(os.cpu_count()),
        "ram": f"{int(mem_kib) / 2**20:.1f} GiB" if mem_kib.isdigit() else "unknown",
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "airflow": _version("apache-airflow"),
        "duckdb": _version("duckdb"),
        "postgresql": _command(["psql", "-X", "-At", pg_dsn, "-c", "SHOW server_version"]) or "unreachable",
        "commit": _commit(),
    }


def _commit() -> str:
    """HEAD, marked when the working tree differs from it (the figures are then of uncommitted code).

    Earlier results in ``benchmarks/results`` do not count: every run rewrites them.
    """
    head = _command(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]) or "unknown"
    dirty = _command(
        [
            "git",
            "-C",
            str(ROOT),
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            ".",
            ":!benchmarks/results",
        ]
    )
    return f"{head} (with uncommitted changes)" if dirty and dirty != "unknown" else head


ROW_HEADERS = ("Section", "Case", "Size", "Throughput", "Peak RSS", "Time", "Notes")
CHECK_HEADERS = ("Section", "Figure", "Value", "Target", "Met")


def _row_cells(row: Row) -> tuple[str, ...]:
    return (row.section, row.case, row.size, row.throughput, row.peak_rss, row.seconds, row.notes)


def _check_cells(check: Check) -> tuple[str, ...]:
    met = "-" if check.met is None else ("yes" if check.met else "NO")
    return (check.section, check.name, check.value, check.target, met)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(out)


def render_text(
    machine: dict[str, str], settings: dict[str, Any], rows: list[Row], checks: list[Check]
) -> str:
    parts = [
        "Machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()),
        "Settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()),
        "",
        text_table(ROW_HEADERS, [_row_cells(r) for r in rows]),
        "",
        text_table(CHECK_HEADERS, [_check_cells(c) for c in checks]),
    ]
    return "\n".join(parts)


def render_markdown(
    machine: dict[str, str], settings: dict[str, Any], rows: list[Row], checks: list[Check], command: str
) -> str:
    machine_rows = [(k, v) for k, v in machine.items()]
    parts = [
        "# Benchmark results",
        "",
        f"Command: `{command}`. Each figure is the median of the runs shown in the settings; "
        "MB = 10^6 bytes, MiB = 2^20 bytes. Peak RSS is the task process's `VmHWM`.",
        "",
        "## Machine",
        "",
        markdown_table(("Item", "Value"), machine_rows),
        "",
        "## Settings",
        "",
        markdown_table(("Setting", "Value"), [(k, str(v)) for k, v in settings.items()]),
        "",
        "## Figures",
        "",
        markdown_table(ROW_HEADERS, [_row_cells(r) for r in rows]),
        "",
        "## Targets and ratios",
        "",
        markdown_table(CHECK_HEADERS, [_check_cells(c) for c in checks]),
        "",
    ]
    return "\n".join(parts)
