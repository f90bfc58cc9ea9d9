"""Deterministic, fast rendering of the export CSV files the emulator serves.

The real service's column set is not public, so the files follow docs/service-behaviour.md
"CSV files": UTF-8, comma separated, a header row, ``\\n`` line ends and RFC 4180 quoting (a field is
quoted only when it holds a comma, a double quote or a line break; inner quotes are doubled).

Why the generator is built the way it is:

* Loader tests need figures they can recompute independently, so every value is a pure function of
  ``(seed, account, export_type)`` and the row's key, through a counter-based hash (SplitMix64) rather
  than a stateful random generator.  A bigger file therefore holds the same rows as a smaller one plus
  more tactics, and :func:`iter_expected_rows` / :func:`expected_row` re-derive rows in plain Python,
  sharing only the per-day row count (the size plan) with the vectorised writer.
* The service restates the most recent 48 hours, and loaders must replace rather than append.  Days whose
  date is on or after ``(generated_at - 48h).date()`` (see :func:`restated_dates`) get an extra factor
  hashed from ``generated_at``, so two executions at different instants disagree on exactly those days,
  while the same ``generated_at`` gives a byte-identical file.
* Files range from a few KB to several GiB and the emulator renders them on request, so rows are produced
  in blocks of at most ``BLOCK_ROWS`` with numpy + pyarrow compute kernels and streamed to disk: memory
  stays flat and no Python code runs per row.
* Names regularly contain commas, double quotes and non-ASCII letters (for example
  ``Café "Nord", Zürich``) so that a loader that splits on commas or assumes ASCII fails loudly.

Sizing: ``size_bytes`` chooses how many tactics (``TACTIC_PERFORMANCE``) or tactic/account pairs
(``DISPLAY_TACTIC_ACCOUNT_PERFORMANCE``) appear per day.  Each day carries ``k`` or ``k + 1`` of them, the
extra one on a fixed, date-determined share of days, so the key set of a date is the same in every file
of the same size.  The result is within about 2 % of the target for targets above about 8 KB; below
the smallest possible file (one row per day, about 3-6 KB) the file is that smallest file.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import tempfile
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

TACTIC_PERFORMANCE = "TACTIC_PERFORMANCE"
DISPLAY_TACTIC_ACCOUNT_PERFORMANCE = "DISPLAY_TACTIC_ACCOUNT_PERFORMANCE"

EXPORT_COLUMNS: dict[str, tuple[str, ...]] = {
    TACTIC_PERFORMANCE: (
        "date",
        "campaign_id",
        "campaign_name",
        "tactic_id",
        "tactic_name",
        "impressions",
        "clicks",
        "spend",
    ),
    DISPLAY_TACTIC_ACCOUNT_PERFORMANCE: (
        "date",
        "tactic_id",
        "tactic_name",
        "account_id",
        "account_name",
        "crm_org_id",
        "impressions",
        "clicks",
        "spend",
        "page_views",
        "engaged_visitors",
    ),
}
"""Column names, in file order, per export type."""

KEY_COLUMNS: dict[str, tuple[str, ...]] = {
    TACTIC_PERFORMANCE: ("date", "tactic_id"),
    DISPLAY_TACTIC_ACCOUNT_PERFORMANCE: ("date", "tactic_id", "account_id"),
}
"""Natural key per export type: unique within a file."""

DAYS_COVERED = 30
"""Every file covers the 30 UTC dates ending with ``generated_at``'s date."""

RESTATEMENT_WINDOW = timedelta(hours=48)
"""Data this recent is subject to change (docs/service-behaviour.md, "Export jobs and executions")."""

BLOCK_ROWS = 32_768
"""Rows rendered per vectorised step: bounds memory (a block is a few MB of text) whatever the file size."""

_READ_AHEAD = 2
"""Blocks the render thread may finish before the writer takes them."""

TACTICS_PER_CAMPAIGN = 6
ACCOUNTS_PER_TACTIC = 25
"""DISPLAY_TACTIC_ACCOUNT_PERFORMANCE fills each tactic with this many accounts before the next tactic."""

ACCOUNT_POOL = 50_000
"""Accounts of one customer (a tactic's accounts are distinct because ACCOUNTS_PER_TACTIC <= this)."""

ACCOUNT_STRIDE = 7
"""Tactic ``t`` targets accounts ``7t .. 7t+24``: neighbouring tactics share accounts, as real ones do."""

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_WEYL = (math.sqrt(5.0) - 1.0) / 2.0
_BASE62 = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_SAMPLE_ENTITIES = 4096
_SAMPLE_DAY_ORDINALS = tuple(730_000 + 97 * i for i in range(8))

# Hash domains: keep the streams of different purposes independent.
_TAG_TACTIC, _TAG_CAMPAIGN, _TAG_ACCOUNT, _TAG_ROW, _TAG_FILE = 1, 2, 3, 4, 5

# --- names -----------------------------------------------------------------------------------------
# Every list has entries with commas, double quotes and non-ASCII letters, so such names appear in
# every file of more than a handful of rows.
_TACTIC_KINDS = (
    "Retargeting",
    "Prospecting",
    'Account "Surge"',
    "Display, Native",
    "Vidéo pré-roll",
    "Intent-based",
    "Lookalike",
    "Connected TV",
    "Förderung",
    "Always-on",
)
_TACTIC_AUDIENCES = (
    "Enterprise",
    "Mid-Market, EMEA",
    "Décideurs IT",
    '"Tier 1" Accounts',
    "Open opportunities",
    "Churn risk",
    "Käufer",
    "C-Suite",
)
_TACTIC_REGIONS = (
    'Café "Nord", Zürich',
    "North America",
    "DACH, Österreich",
    "Île-de-France",
    "APAC",
    "São Paulo",
    "Nordics",
    "Global",
)
_CAMPAIGN_THEMES = (
    'Café "Nord", Zürich',
    "Q4 Pipeline",
    "Brand Awareness",
    "Product Launch \u2013 Ünïcode",
    "Webinar: Data, AI & You",
    '"Big Bet" Accounts',
    "Renewals",
    "Expansion \u2013 Øresund",
)
_CAMPAIGN_PERIODS = ("2025", "FY26, H1", "FY26, H2", "Always-on", "Q1", "Spring")
_ACCOUNT_STEMS = (
    'Café "Nord"',
    "Müller",
    "Ångström Labs",
    "Zürich Insurance",
    "São Paulo Retail",
    "Øresund Logistics",
    "Acme",
    "Globex",
    "Initech",
    "Łódź Textiles",
    "O'Brien & Sons",
    "Société Générale",
    "Crème Brûlée Co",
    "Björk Design",
    "Straßenbau",
    "Umbrella",
)
_ACCOUNT_SUFFIXES = (
    ", Zürich",
    " GmbH",
    ", Inc.",
    " Ltd",
    " S.A.",
    " & Söhne",
    ' "Premium"',
    " AG",
    " Holdings, LLC",
    " Corp",
)


def _combine(*parts: Sequence[str], sep: str) -> tuple[str, ...]:
    out: list[str] = [""]
    for i, options in enumerate(parts):
        out = [prefix + (sep if i else "") + option for prefix in out for option in options]
    return tuple(out)


_TACTIC_NAMES = _combine(_TACTIC_KINDS, _TACTIC_AUDIENCES, _TACTIC_REGIONS, sep=" \u2013 ")
_CAMPAIGN_NAMES = _combine(_CAMPAIGN_THEMES, _CAMPAIGN_PERIODS, sep=" ")
_ACCOUNT_NAMES = _combine(_ACCOUNT_STEMS, _ACCOUNT_SUFFIXES, sep="")


def quote_field(value: str) -> str:
    """RFC 4180 quoting: only when needed (comma, quote, CR or LF), doubling inner quotes."""
    if any(ch in value for ch in ',"\r\n'):
        return '"' + value.replace('"', '""') + '"'
    return value


@functools.cache
def _quoted_table(names: tuple[str, ...]) -> pa.StringArray:
    return pa.array([quote_field(n) for n in names], type=pa.string())


# --- hashing: one scalar and one numpy implementation of the same SplitMix64 scheme -----------------
def _mix(x: int) -> int:
    x &= _M64
    x = ((x ^ (x >> 30)) * _MIX1) & _M64
    x = ((x ^ (x >> 27)) * _MIX2) & _M64
    return x ^ (x >> 31)


def _step(h: int, part: int) -> int:
    """Fold one integer into a hash state; injective in ``part`` (mod 2**64) for a fixed state."""
    return _mix(h ^ _mix((part + 1) * _GOLDEN))


U64Array = npt.NDArray[np.uint64]


def _mix_np(x: U64Array) -> U64Array:
    # Wrapping uint64 multiplication is the point; numpy only warns about it for 0-d operands.
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(_MIX1)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(_MIX2)
    return x ^ (x >> np.uint64(31))  # type: ignore[no-any-return]


def _step_np(h: U64Array | int, part: U64Array | int) -> U64Array:
    parts = np.asarray(part, dtype=np.uint64)
    with np.errstate(over="ignore"):
        mixed = _mix_np((parts + np.uint64(1)) * np.uint64(_GOLDEN))
    return _mix_np(np.asarray(h, dtype=np.uint64) ^ mixed)


def _file_key(seed: int, account: str, export_type: str) -> int:
    digest = hashlib.blake2b(f"{seed}\x1f{account}\x1f{export_type}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _base62(value: int, width: int) -> str:
    chars = []
    for _ in range(width):
        value, rem = divmod(value, 62)
        chars.append(chr(_BASE62[rem]))
    return "".join(reversed(chars))


_SF_SUFFIX_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"


def _salesforce_checksum(id15: str) -> str:
    """Salesforce's 3-character case-safe suffix: one character per 5-character group of the 15-char id,
    whose 5 bits say which of the group's characters are upper-case letters."""
    return "".join(
        _SF_SUFFIX_ALPHABET[sum(1 << i for i, ch in enumerate(id15[g : g + 5]) if "A" <= ch <= "Z")]
        for g in range(0, 15, 5)
    )


def _salesforce_id(key_prefix: str, hashed: int) -> str:
    """A valid 18-character Salesforce id: key prefix, 12 characters from ``hashed``, case-safe suffix.

    The last 11 of the 12 are ``hashed`` in base 62 (62**11 > 2**64), so distinct hashes give distinct
    ids; the one before them comes from a second hash so ids do not share a visible common stem.
    """
    id15 = key_prefix + _base62(_step(hashed, 11) % 62, 1) + _base62(hashed, 11)
    return id15 + _salesforce_checksum(id15)


# --- figures ---------------------------------------------------------------------------------------
# Both implementations below use integer arithmetic only, so numpy and plain Python agree exactly.
# Restated days scale impressions by 850..1150 per mille, hashed from the row and ``generated_at``;
# clicks and spend follow from the scaled impressions, so a restated row stays self-consistent.


@dataclass(frozen=True)
class _Context:
    """Everything fixed by ``(seed, account, export_type)``."""

    export_type: str
    key: int

    @property
    def tactic_id_base(self) -> int:
        return 10_000_000 + _step(self.key, _TAG_FILE) % 80_000_000

    @property
    def campaign_id_base(self) -> int:
        return 1_000_000 + _step(self.key, _TAG_FILE + 1) % 8_000_000

    @property
    def crm_org_id(self) -> str:
        return _salesforce_id("00D", _step(self.key, _TAG_FILE + 3))


def _context(seed: int, account: str, export_type: str) -> _Context:
    if export_type not in EXPORT_COLUMNS:
        raise ValueError(f"export_type {export_type!r} is not one of {sorted(EXPORT_COLUMNS)}")
    return _Context(export_type=export_type, key=_file_key(seed, account, export_type))


def _utc(generated_at: datetime) -> datetime:
    if generated_at.tzinfo is None:
        return generated_at.replace(tzinfo=UTC)
    return generated_at.astimezone(UTC)


def _micros(generated_at: datetime) -> int:
    return (_utc(generated_at) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def export_dates(generated_at: datetime) -> list[date]:
    """The 30 UTC dates a file generated at ``generated_at`` covers, oldest first."""
    last = _utc(generated_at).date()
    return [last - timedelta(days=DAYS_COVERED - 1 - i) for i in range(DAYS_COVERED)]


def restated_dates(generated_at: datetime) -> list[date]:
    """Dates whose figures depend on ``generated_at``: any date overlapping the last 48 hours."""
    first = (_utc(generated_at) - RESTATEMENT_WINDOW).date()
    return [d for d in export_dates(generated_at) if d >= first]


# --- layout ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Plan:
    """``base`` entities every day, one more on days whose Weyl fraction is below ``extra_share``."""

    base: int
    extra_share: float

    def entities_on(self, day: date) -> int:
        frac = (day.toordinal() * _WEYL) % 1.0
        return self.base + (1 if frac < self.extra_share else 0)


def _header(export_type: str) -> bytes:
    return ",".join(EXPORT_COLUMNS[export_type]).encode()


@functools.lru_cache(maxsize=16)
def _entity_row_lengths(ctx: _Context) -> npt.NDArray[np.float64]:
    """Mean row length (bytes, with its newline) of each of the first entities over fixed sample days.

    Measured with the real renderer, so the size plan accounts for quoting and multi-byte characters.
    """
    lengths = np.zeros(_SAMPLE_ENTITIES, dtype=np.float64)
    for ordinal in _SAMPLE_DAY_ORDINALS:
        rows = _render_rows(ctx, date.fromordinal(ordinal), 0, _SAMPLE_ENTITIES, None)
        offsets = np.frombuffer(
            rows.buffers()[1], dtype=np.int32, count=len(rows) + 1, offset=rows.offset * 4
        )
        lengths += np.diff(offsets)
    lengths /= len(_SAMPLE_DAY_ORDINALS)
    lengths.setflags(write=False)
    return lengths


def _plan(ctx: _Context, size_bytes: int) -> _Plan:
    """Choose the per-day entity count so the whole file is close to ``size_bytes``.

    Small files use the measured lengths of exactly the entities they will contain; large files the mean
    over the first ``_SAMPLE_ENTITIES`` (names are drawn independently, so that mean is representative).
    """
    if size_bytes < 0:
        raise ValueError(f"size_bytes must be >= 0, got {size_bytes}")
    lengths = _entity_row_lengths(ctx)
    per_day = (size_bytes - len(_header(ctx.export_type)) - 1) / DAYS_COVERED
    cumulative = np.cumsum(lengths)
    if per_day <= lengths[0]:
        return _Plan(base=1, extra_share=0.0)
    if per_day < cumulative[-1]:
        base = int(np.searchsorted(cumulative, per_day, side="right"))
        share = (per_day - cumulative[base - 1]) / lengths[base]
        return _Plan(base=base, extra_share=float(share))
    entities = per_day / float(cumulative[-1] / _SAMPLE_ENTITIES)
    return _Plan(base=int(entities), extra_share=entities - int(entities))


# --- vectorised renderer ---------------------------------------------------------------------------
def _as_strings(values: npt.NDArray[np.int64]) -> pa.Array:
    return pc.cast(pa.array(values, type=pa.int64()), pa.string())


def _cents_as_strings(cents: npt.NDArray[np.int64]) -> pa.Array:
    # A decimal128(18, 2) array's storage is the unscaled integer: build it in place and let Arrow print it.
    words = np.zeros((len(cents), 2), dtype=np.int64)
    words[:, 0] = cents
    decimals = pa.Array.from_buffers(pa.decimal128(18, 2), len(cents), [None, pa.py_buffer(words)])
    return pc.cast(decimals, pa.string())


def _fixed_width_strings(matrix: npt.NDArray[np.uint8]) -> pa.Array:
    rows, width = matrix.shape
    offsets = np.arange(rows + 1, dtype=np.int32) * width
    data = np.ascontiguousarray(matrix)
    return pa.Array.from_buffers(pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _account_ids_np(account_hashes: U64Array) -> pa.Array:
    """Vectorised :func:`_salesforce_id` with key prefix ``001`` (accounts)."""
    matrix = np.empty((len(account_hashes), 18), dtype=np.uint8)
    matrix[:, :3] = np.frombuffer(b"001", dtype=np.uint8)
    alphabet = np.frombuffer(_BASE62, dtype=np.uint8)
    matrix[:, 3] = alphabet[(_step_np(account_hashes, 11) % np.uint64(62)).astype(np.intp)]
    value = account_hashes.copy()
    for col in range(14, 3, -1):
        matrix[:, col] = alphabet[(value % np.uint64(62)).astype(np.intp)]
        value //= np.uint64(62)
    upper = (matrix[:, :15] >= ord("A")) & (matrix[:, :15] <= ord("Z"))
    bits = (upper.reshape(-1, 3, 5) * np.array([1, 2, 4, 8, 16], dtype=np.uint8)).sum(axis=2)
    matrix[:, 15:] = np.frombuffer(_SF_SUFFIX_ALPHABET.encode(), dtype=np.uint8)[bits]
    return _fixed_width_strings(matrix)


@functools.lru_cache(maxsize=16)
def _account_pool(ctx: _Context) -> tuple[pa.StringArray, pa.StringArray]:
    """Ids and quoted names of the customer's ``ACCOUNT_POOL`` accounts, rendered once per file key.

    Rows then pick them with a ``take`` instead of re-deriving ids per row (about 2 MB per key).
    """
    hashes = _step_np(_step(ctx.key, _TAG_ACCOUNT), np.arange(ACCOUNT_POOL, dtype=np.uint64))
    indices = (_step_np(hashes, 7) % np.uint64(len(_ACCOUNT_NAMES))).astype(np.int64)
    names = pc.take(_quoted_table(_ACCOUNT_NAMES), pa.array(indices, type=pa.int64()))
    return _account_ids_np(hashes), names


def _render_rows(
    ctx: _Context, day: date, start: int, stop: int, restate_micros: int | None
) -> pa.StringArray:
    """Rows for entities ``[start, stop)`` of ``day``, each as ``"\\n" + row`` (the header has no newline)."""
    entities = np.arange(start, stop, dtype=np.uint64)
    if ctx.export_type == TACTIC_PERFORMANCE:
        tactics = entities
    else:
        tactics = entities // np.uint64(ACCOUNTS_PER_TACTIC)
    tactic_hash = _step_np(_step(ctx.key, _TAG_TACTIC), tactics)
    row_hash = _step_np(_step_np(_step(ctx.key, _TAG_ROW), entities), day.toordinal())

    def draw(i: int, modulus: int) -> npt.NDArray[np.int64]:
        return (_step_np(row_hash, 100 + i) % np.uint64(modulus)).astype(np.int64)

    def pick(hashes: U64Array, table: tuple[str, ...]) -> pa.Array:
        indices = (_step_np(hashes, 7) % np.uint64(len(table))).astype(np.int64)
        return pc.take(_quoted_table(table), pa.array(indices, type=pa.int64()))

    if ctx.export_type == TACTIC_PERFORMANCE:
        weight = (tactic_hash % np.uint64(12)).astype(np.int64) + 1
        impressions = weight * (300 + draw(1, 4000))
    else:
        slots = (entities % np.uint64(ACCOUNTS_PER_TACTIC)).astype(np.int64)
        account_index = (tactics.astype(np.int64) * ACCOUNT_STRIDE + slots) % ACCOUNT_POOL
        account_hash = _step_np(_step(ctx.key, _TAG_ACCOUNT), account_index.astype(np.uint64))
        account_ids, account_names = _account_pool(ctx)
        account_positions = pa.array(account_index, type=pa.int64())
        weight = (account_hash % np.uint64(8)).astype(np.int64) + 1
        impressions = weight * (20 + draw(1, 600))
    if restate_micros is not None:
        restate_hash = _step_np(row_hash, restate_micros & _M64)
        impressions = impressions * (850 + (restate_hash % np.uint64(301)).astype(np.int64)) // 1000
    ctr_modulus = 80 if ctx.export_type == TACTIC_PERFORMANCE else 120
    clicks = impressions * (5 + draw(2, ctr_modulus)) // 10_000
    cents = impressions * (150 + draw(3, 1350)) // 1000
    tactic_ids = _as_strings(tactics.astype(np.int64) + ctx.tactic_id_base)
    tactic_names = pick(tactic_hash, _TACTIC_NAMES)
    day_text = pa.scalar("\n" + day.isoformat(), type=pa.string())
    if ctx.export_type == TACTIC_PERFORMANCE:
        campaigns = tactics // np.uint64(TACTICS_PER_CAMPAIGN)
        campaign_hash = _step_np(_step(ctx.key, _TAG_CAMPAIGN), campaigns)
        columns = [
            day_text,
            _as_strings(campaigns.astype(np.int64) + ctx.campaign_id_base),
            pick(campaign_hash, _CAMPAIGN_NAMES),
            tactic_ids,
            tactic_names,
            _as_strings(impressions),
            _as_strings(clicks),
            _cents_as_strings(cents),
        ]
    else:
        page_views = clicks * (1 + draw(4, 4)) + draw(5, 30)
        engaged = page_views * (5 + draw(6, 50)) // 100
        columns = [
            day_text,
            tactic_ids,
            tactic_names,
            pc.take(account_ids, account_positions),
            pc.take(account_names, account_positions),
            pa.scalar(ctx.crm_org_id, type=pa.string()),
            _as_strings(impressions),
            _as_strings(clicks),
            _cents_as_strings(cents),
            _as_strings(page_views),
            _as_strings(engaged),
        ]
    joined: pa.StringArray = pc.binary_join_element_wise(*columns, ",")
    return joined


def _text_of(rows: pa.StringArray) -> memoryview:
    """The contiguous UTF-8 bytes of all values of a string array, without copying."""
    offsets = np.frombuffer(rows.buffers()[1], dtype=np.int32, count=len(rows) + 1, offset=rows.offset * 4)
    return memoryview(rows.buffers()[2])[int(offsets[0]) : int(offsets[-1])]  # type: ignore[arg-type]


@dataclass(frozen=True)
class ExportFileInfo:
    """What was written: data rows (header excluded), file size in bytes, hex SHA-256 of the content."""

    rows: int
    bytes: int
    sha256: str


def write_export(
    path: Path,
    export_type: str,
    *,
    seed: int,
    account: str,
    generated_at: datetime,
    size_bytes: int,
) -> ExportFileInfo:
    """Render one execution's CSV to ``path``, streaming block by block.

    A worker thread renders up to ``_READ_AHEAD`` blocks ahead while this thread hashes and writes (Arrow,
    numpy, hashlib and file writes all release the GIL), so the two halves overlap on two cores and at
    most ``_READ_AHEAD + 1`` blocks are in memory.  The content goes to a sibling temporary file that is
    renamed over ``path`` at the end, so a reader never sees a half-written file under the final name.
    """
    ctx = _context(seed, account, export_type)
    plan = _plan(ctx, size_bytes)
    restated = set(restated_dates(generated_at))
    micros = _micros(generated_at)
    blocks = [
        (day, start, min(plan.entities_on(day), start + BLOCK_ROWS), micros if day in restated else None)
        for day in export_dates(generated_at)
        for start in range(0, plan.entities_on(day), BLOCK_ROWS)
    ]
    digest = hashlib.sha256()
    written = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, partial_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    partial = Path(partial_name)
    try:
        with open(handle, "wb", buffering=0) as out, ThreadPoolExecutor(1, "csvgen-render") as renderer:

            def emit(data: bytes | memoryview) -> None:
                nonlocal written
                digest.update(data)
                view = memoryview(data)
                while view:
                    count = out.write(view)
                    if count is None:  # pragma: no cover - only for non-blocking files
                        raise OSError(f"short write to {partial}")
                    view = view[count:]
                written += len(data)

            emit(_header(export_type))
            pending: deque[Future[pa.StringArray]] = deque()
            for block in blocks:
                pending.append(renderer.submit(_render_rows, ctx, *block))
                if len(pending) > _READ_AHEAD:
                    emit(_text_of(pending.popleft().result()))
            while pending:
                emit(_text_of(pending.popleft().result()))
            emit(b"\n")
        os.chmod(partial, 0o644)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    rows = sum(stop - start for _, start, stop, _ in blocks)
    return ExportFileInfo(rows=rows, bytes=written, sha256=digest.hexdigest())


# --- independent plain-Python derivation, for tests and loader expectations -------------------------
def iter_expected_rows(
    export_type: str,
    *,
    seed: int,
    account: str,
    generated_at: datetime,
    size_bytes: int,
) -> Iterator[dict[str, str]]:
    """Yield the rows :func:`write_export` writes for the same arguments, as parsed CSV values.

    Each row is a dict of column name to the field's text after CSV unquoting (what ``csv.DictReader``
    returns).  Figures are derived here in plain Python, one row at a time, from the same hash scheme
    but without the vectorised renderer; only the per-day row count (the size plan) is shared.  It is
    meant for files up to a few MB; for a single figure of a big file, use :func:`expected_row`.
    """
    ctx = _context(seed, account, export_type)
    plan = _plan(ctx, size_bytes)
    for day in export_dates(generated_at):
        for entity in range(plan.entities_on(day)):
            yield expected_row(
                export_type, seed=seed, account=account, generated_at=generated_at, day=day, entity=entity
            )


def expected_row(
    export_type: str, *, seed: int, account: str, generated_at: datetime, day: date, entity: int
) -> dict[str, str]:
    """The row of the ``entity``-th tactic (or tactic/account pair) on ``day``, in plain Python.

    Within a day, rows appear in entity order starting at 0, so the n-th data row of a date in the file
    is ``entity=n``.
    """
    ctx = _context(seed, account, export_type)
    restated = day in set(restated_dates(generated_at))
    tactic = entity if export_type == TACTIC_PERFORMANCE else entity // ACCOUNTS_PER_TACTIC
    tactic_hash = _step(_step(ctx.key, _TAG_TACTIC), tactic)
    row_hash = _step(_step(_step(ctx.key, _TAG_ROW), entity), day.toordinal())

    def draw(i: int, modulus: int) -> int:
        return _step(row_hash, 100 + i) % modulus

    def pick(hashed: int, table: tuple[str, ...]) -> str:
        return table[_step(hashed, 7) % len(table)]

    account_hash = 0
    if export_type == TACTIC_PERFORMANCE:
        impressions = (tactic_hash % 12 + 1) * (300 + draw(1, 4000))
    else:
        account_index = (tactic * ACCOUNT_STRIDE + entity % ACCOUNTS_PER_TACTIC) % ACCOUNT_POOL
        account_hash = _step(_step(ctx.key, _TAG_ACCOUNT), account_index)
        impressions = (account_hash % 8 + 1) * (20 + draw(1, 600))
    if restated:
        impressions = impressions * (850 + _step(row_hash, _micros(generated_at) & _M64) % 301) // 1000
    clicks = impressions * (5 + draw(2, 80 if export_type == TACTIC_PERFORMANCE else 120)) // 10_000
    cents = impressions * (150 + draw(3, 1350)) // 1000
    spend = f"{cents // 100}.{cents % 100:02d}"
    tactic_id = str(ctx.tactic_id_base + tactic)
    if export_type == TACTIC_PERFORMANCE:
        campaign = tactic // TACTICS_PER_CAMPAIGN
        campaign_hash = _step(_step(ctx.key, _TAG_CAMPAIGN), campaign)
        return {
            "date": day.isoformat(),
            "campaign_id": str(ctx.campaign_id_base + campaign),
            "campaign_name": pick(campaign_hash, _CAMPAIGN_NAMES),
            "tactic_id": tactic_id,
            "tactic_name": pick(tactic_hash, _TACTIC_NAMES),
            "impressions": str(impressions),
            "clicks": str(clicks),
            "spend": spend,
        }
    page_views = clicks * (1 + draw(4, 4)) + draw(5, 30)
    return {
        "date": day.isoformat(),
        "tactic_id": tactic_id,
        "tactic_name": pick(tactic_hash, _TACTIC_NAMES),
        "account_id": _salesforce_id("001", account_hash),
        "account_name": pick(account_hash, _ACCOUNT_NAMES),
        "crm_org_id": ctx.crm_org_id,
        "impressions": str(impressions),
        "clicks": str(clicks),
        "spend": spend,
        "page_views": str(page_views),
        "engaged_visitors": str(page_views * (5 + draw(6, 50)) // 100),
    }
