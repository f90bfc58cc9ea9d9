"""The export CSV generator: format, independent recomputation, determinism, restatement, size, memory."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import subprocess
import sys
import textwrap
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from abm_emulator import csvgen
from abm_emulator.csvgen import (
    DISPLAY_TACTIC_ACCOUNT_PERFORMANCE,
    EXPORT_COLUMNS,
    KEY_COLUMNS,
    TACTIC_PERFORMANCE,
    expected_row,
    iter_expected_rows,
    restated_dates,
    write_export,
)

TYPES = [TACTIC_PERFORMANCE, DISPLAY_TACTIC_ACCOUNT_PERFORMANCE]
GENERATED_AT = datetime(2026, 11, 22, 15, 30, 12, 345678, tzinfo=UTC)


def render(
    tmp_path: Path, export_type: str, size: int = 100_000, **overrides: object
) -> tuple[Path, csvgen.ExportFileInfo]:
    args: dict = {"seed": 42, "account": "acct-alpha", "generated_at": GENERATED_AT, "size_bytes": size}
    args.update(overrides)
    path = tmp_path / f"{export_type}-{hashlib.md5(repr(sorted(args.items())).encode()).hexdigest()}.csv"
    return path, write_export(path, export_type, **args)


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f, strict=True))


def rows_by_key(rows: list[dict[str, str]], export_type: str) -> dict[tuple[str, ...], dict[str, str]]:
    return {tuple(r[c] for c in KEY_COLUMNS[export_type]): r for r in rows}


@pytest.mark.parametrize("export_type", TYPES)
def test_header_line_ends_and_encoding(tmp_path: Path, export_type: str) -> None:
    path, info = render(tmp_path, export_type)
    data = path.read_bytes()
    text = data.decode("utf-8")  # raises if not UTF-8
    assert text.split("\n", 1)[0] == ",".join(EXPORT_COLUMNS[export_type])
    assert "\r" not in text
    assert text.endswith("\n") and not text.endswith("\n\n")
    assert not text.startswith("\ufeff")
    assert info.bytes == len(data)
    assert info.sha256 == hashlib.sha256(data).hexdigest()
    assert info.rows == text.count("\n") - 1 == len(read_rows(path))


@pytest.mark.parametrize("export_type", TYPES)
def test_file_matches_the_independent_plain_python_rows(tmp_path: Path, export_type: str) -> None:
    path, _ = render(tmp_path, export_type, size=300_000)
    expected = list(
        iter_expected_rows(
            export_type, seed=42, account="acct-alpha", generated_at=GENERATED_AT, size_bytes=300_000
        )
    )
    assert read_rows(path) == expected


@pytest.mark.parametrize("export_type", TYPES)
def test_quoting_is_minimal_rfc4180_and_round_trips(tmp_path: Path, export_type: str) -> None:
    """Re-writing the parsed rows with minimal quoting and \\n line ends reproduces the file byte for byte."""
    path, _ = render(tmp_path, export_type, size=200_000)
    with path.open(newline="", encoding="utf-8") as f:
        parsed = list(csv.reader(f, strict=True))
    out = io.StringIO()
    csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_MINIMAL).writerows(parsed)
    assert out.getvalue().encode() == path.read_bytes()
    assert all(len(row) == len(EXPORT_COLUMNS[export_type]) for row in parsed)


@pytest.mark.parametrize("export_type", TYPES)
def test_names_with_commas_quotes_and_non_ascii_appear_regularly(tmp_path: Path, export_type: str) -> None:
    path, _ = render(tmp_path, export_type, size=200_000)
    rows = read_rows(path)
    name_columns = [c for c in EXPORT_COLUMNS[export_type] if c.endswith("_name")]
    names = [r[c] for r in rows for c in name_columns]
    for label, test in [
        ("comma", lambda n: "," in n),
        ("double quote", lambda n: '"' in n),
        ("non-ASCII", lambda n: not n.isascii()),
    ]:
        share = sum(1 for n in names if test(n)) / len(names)
        assert share > 0.1, f"only {share:.1%} of names have a {label}"
    assert any(n.find('Café "Nord", Zürich') >= 0 for n in names)


def is_case_safe_salesforce_id(value: str) -> bool:
    """Salesforce's documented 18-character form: the suffix encodes which of the 15 are upper case."""
    suffix = ""
    for group in (value[0:5], value[5:10], value[10:15]):
        flags = sum(1 << i for i, ch in enumerate(group) if ch.isupper())
        suffix += "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"[flags]
    return len(value) == 18 and value[15:] == suffix


def test_column_formats(tmp_path: Path) -> None:
    path, _ = render(tmp_path, DISPLAY_TACTIC_ACCOUNT_PERFORMANCE, size=200_000)
    rows = read_rows(path)
    sf_id = re.compile(r"001[0-9A-Za-z]{15}")
    for row in rows:
        assert sf_id.fullmatch(row["account_id"]), row
        assert re.fullmatch(r"00D[0-9A-Za-z]{15}", row["crm_org_id"]), row
        assert is_case_safe_salesforce_id(row["account_id"]), row
        assert is_case_safe_salesforce_id(row["crm_org_id"]), row
        assert re.fullmatch(r"\d+\.\d{2}", row["spend"]), row
        for column in ("impressions", "clicks", "page_views", "engaged_visitors", "tactic_id"):
            assert row[column].isdigit(), (column, row)
        assert int(row["clicks"]) <= int(row["impressions"])
        assert int(row["engaged_visitors"]) <= int(row["page_views"])
    # Accounts are distinct within a tactic and day, and recur under other tactics.
    tactics_per_account = Counter(r["account_id"] for r in rows if r["date"] == rows[0]["date"])
    assert len(tactics_per_account) >= csvgen.ACCOUNTS_PER_TACTIC
    assert max(tactics_per_account.values()) > 1
    assert len({r["account_id"][3:5] for r in rows}) > 10
    tactic_rows = read_rows(render(tmp_path, TACTIC_PERFORMANCE, size=200_000)[0])
    assert all(re.fullmatch(r"\d+\.\d{2}", r["spend"]) for r in tactic_rows)
    assert all(r["campaign_id"].isdigit() and r["tactic_id"].isdigit() for r in tactic_rows)


@pytest.mark.parametrize("export_type", TYPES)
def test_covers_the_30_days_up_to_generation_in_order(tmp_path: Path, export_type: str) -> None:
    path, _ = render(tmp_path, export_type)
    days = [r["date"] for r in read_rows(path)]
    assert days == sorted(days)
    expected = [(date(2026, 11, 22) - timedelta(days=n)).isoformat() for n in range(29, -1, -1)]
    assert list(dict.fromkeys(days)) == expected


@pytest.mark.parametrize("export_type", TYPES)
def test_natural_keys_are_unique(tmp_path: Path, export_type: str) -> None:
    path, _ = render(tmp_path, export_type, size=2_000_000)
    keys = Counter(tuple(r[c] for c in KEY_COLUMNS[export_type]) for r in read_rows(path))
    duplicates = [k for k, n in keys.items() if n > 1]
    assert not duplicates


@pytest.mark.parametrize("export_type", TYPES)
def test_same_inputs_give_byte_identical_files(tmp_path: Path, export_type: str) -> None:
    first = render(tmp_path / "a", export_type)[0].read_bytes()
    second = render(tmp_path / "b", export_type)[0].read_bytes()
    assert first == second
    # A naive generated_at is read as UTC.
    naive = render(tmp_path / "c", export_type, generated_at=GENERATED_AT.replace(tzinfo=None))[0]
    assert naive.read_bytes() == first
    assert render(tmp_path / "d", export_type, seed=43)[0].read_bytes() != first
    assert render(tmp_path / "e", export_type, account="acct-beta")[0].read_bytes() != first


def test_restated_dates_are_those_overlapping_the_last_48_hours() -> None:
    assert restated_dates(datetime(2026, 11, 22, 15, 0, tzinfo=UTC)) == [
        date(2026, 11, 20),
        date(2026, 11, 21),
        date(2026, 11, 22),
    ]
    assert restated_dates(datetime(2026, 11, 22, 0, 0, tzinfo=UTC)) == [
        date(2026, 11, 20),
        date(2026, 11, 21),
        date(2026, 11, 22),
    ]


@pytest.mark.parametrize("export_type", TYPES)
def test_later_execution_restates_only_the_last_48_hours(tmp_path: Path, export_type: str) -> None:
    earlier = rows_by_key(read_rows(render(tmp_path, export_type)[0]), export_type)
    later_at = GENERATED_AT + timedelta(hours=5)
    later = rows_by_key(read_rows(render(tmp_path, export_type, generated_at=later_at)[0]), export_type)
    assert earlier.keys() == later.keys()
    window = {d.isoformat() for d in restated_dates(later_at)}
    changed_days = {key[0] for key in earlier if earlier[key] != later[key]}
    assert changed_days == window
    for key, row in earlier.items():
        if key[0] in window:
            continue
        assert later[key] == row


@pytest.mark.parametrize("export_type", TYPES)
def test_next_days_file_agrees_on_settled_days(tmp_path: Path, export_type: str) -> None:
    """Days older than 48 hours before the earlier file are final: every later file repeats them."""
    earlier = rows_by_key(read_rows(render(tmp_path, export_type)[0]), export_type)
    later_at = GENERATED_AT + timedelta(days=3)
    later = rows_by_key(read_rows(render(tmp_path, export_type, generated_at=later_at)[0]), export_type)
    settled_before = min(restated_dates(GENERATED_AT)).isoformat()
    shared = [k for k in earlier if k in later]
    assert shared
    for key in shared:
        if key[0] < settled_before:
            assert later[key] == earlier[key]
    # What the earlier file restated is settled in the later one, with different figures.
    assert any(later[k] != earlier[k] for k in shared if k[0] >= settled_before)


@pytest.mark.parametrize("export_type", TYPES)
@pytest.mark.parametrize("size", [8_000, 64_000, 1_000_000, 12_000_000])
def test_size_is_close_to_the_target(tmp_path: Path, export_type: str, size: int) -> None:
    path, info = render(tmp_path, export_type, size=size)
    assert path.stat().st_size == info.bytes
    assert abs(info.bytes - size) / size < 0.03, info


@pytest.mark.parametrize("export_type", TYPES)
def test_bigger_file_holds_the_smaller_files_rows(tmp_path: Path, export_type: str) -> None:
    """Figures depend on the key, not the size: a loader test can scale the file without new expectations."""
    small = rows_by_key(read_rows(render(tmp_path, export_type, size=50_000)[0]), export_type)
    big = rows_by_key(read_rows(render(tmp_path, export_type, size=500_000)[0]), export_type)
    assert small.keys() < big.keys()
    assert all(big[k] == row for k, row in small.items())


def test_expected_row_addresses_a_single_row_of_a_big_file(tmp_path: Path) -> None:
    path, _ = render(tmp_path, TACTIC_PERFORMANCE, size=1_000_000)
    rows = [r for r in read_rows(path) if r["date"] == "2026-11-21"]
    n = len(rows) - 1
    assert rows[n] == expected_row(
        TACTIC_PERFORMANCE,
        seed=42,
        account="acct-alpha",
        generated_at=GENERATED_AT,
        day=date(2026, 11, 21),
        entity=n,
    )


def test_tiny_target_gives_one_row_per_day(tmp_path: Path) -> None:
    path, info = render(tmp_path, TACTIC_PERFORMANCE, size=100)
    assert info.rows == 30
    assert len({r["date"] for r in read_rows(path)}) == 30


def test_unknown_export_type_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'CAMPAIGN_PERFORMANCE'"):
        write_export(
            tmp_path / "x.csv",
            "CAMPAIGN_PERFORMANCE",
            seed=1,
            account="a",
            generated_at=GENERATED_AT,
            size_bytes=10,
        )
    assert not list(tmp_path.iterdir())


def test_no_partial_file_is_left_under_the_final_name(tmp_path: Path) -> None:
    path, _ = render(tmp_path, TACTIC_PERFORMANCE)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


_PEAK_RSS_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from datetime import datetime, timezone
    from pathlib import Path
    from abm_emulator.csvgen import write_export

    at = datetime(2026, 11, 22, 9, tzinfo=timezone.utc)
    info = write_export(Path(sys.argv[1]), sys.argv[2], seed=7, account="acct", generated_at=at,
                        size_bytes=int(sys.argv[3]))
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent (pytest) across fork + exec.
    peak_kib = int(Path("/proc/self/status").read_text().split("VmHWM:")[1].split()[0])
    print(json.dumps({"bytes": info.bytes, "peak_kib": peak_kib}))
    """
)


def _peak_rss(tmp_path: Path, export_type: str, size: int) -> dict[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_RSS_SCRIPT, str(tmp_path / f"{size}.csv"), export_type, str(size)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return json.loads(out.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("export_type", TYPES)
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_memory_stays_flat_for_a_big_file(tmp_path: Path, export_type: str) -> None:
    # Against a 100 MB file, not a tiny one: the process's caches and allocator arenas settle within
    # the first 100 MB (+25 to 40 MiB from 1 MB, which made a bound against a tiny file flaky), and
    # stay put after (+3 to 14 MiB from 100 to 200 MB, measured); holding a fifth of the extra 100 MB
    # would show here.
    medium = _peak_rss(tmp_path, export_type, 100_000_000)
    big = _peak_rss(tmp_path, export_type, 200_000_000)
    assert big["bytes"] > 190_000_000
    growth_mib = (big["peak_kib"] - medium["peak_kib"]) / 1024
    assert growth_mib < 20, (medium, big)


def test_negative_size_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="size_bytes"):
        render(tmp_path, TACTIC_PERFORMANCE, size=-1)
