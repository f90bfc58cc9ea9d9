"""A vectorised pass over the file that finds every record passes the rules, so the SQL check can be skipped.

Why: PostgreSQL evaluates the column rules (:mod:`abm_provider.warehouse.schema`) row by row with its
regular-expression engine, which costs more than the ``COPY`` itself (docs/performance.md, "Figures
behind design choices"). Arrow reads the same file and applies the same rules column at a time, each
by the cheapest exact check it has (a strict cast for dates, a digit test for plain counts, RE2 for
the rest: :func:`_column_passes`), on a thread while ``COPY`` streams the file (both release the
GIL), so on two cores it costs little wall time.

The pass only ever says "every record passes" or "not sure": a file it cannot read the way
``COPY`` does (bad quoting, bad UTF-8), a record it doubts, or a record count that differs from what
``COPY`` staged all leave the SQL check to run exactly as before. It is therefore conservative
where the two readers could disagree: a quoted empty field (``""``) in a typed column is doubted,
because ``COPY`` stages it as an empty string, which the rules reject, while an unquoted empty field
is NULL, which they accept. Columns without a rule are not read at all (that is most of the
bytes); bad UTF-8 there makes ``COPY`` refuse the file, and the pass's answer is then not used.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from abm_provider.warehouse.records import UnreadableFile, read_header
from abm_provider.warehouse.schema import Kind

if TYPE_CHECKING:
    from abm_provider.warehouse.checks import ColumnPlan
    from abm_provider.warehouse.load import LoadRequest, StreamReader

_FIRST_DAY = dt.date(1, 1, 1)
#: Bytes Arrow reads per batch: small, because the pool keeps what it once held (RSS, not speed).
BLOCK_SIZE = 1 << 20


def count_if_all_pass(
    source: Path | IO[bytes] | StreamReader,
    header: Sequence[str],
    kinds: dict[str, Kind],
    keys: Sequence[str],
    stop: threading.Event,
    order: KeyOrder | None = None,
    days: DaySet | None = None,
) -> int | None:
    """The number of records when every one satisfies every rule, else ``None`` ("run the SQL check").

    ``source`` is the file, or a reader of it while it downloads (whose header the loader has
    already compared). ``stop`` ends the pass early (the load no longer needs it); that too returns
    ``None``. ``order``, when given, also learns whether the natural keys come in strictly increasing
    order (:class:`KeyOrder`), and ``days`` the days the records are about (:class:`DaySet`).
    """
    import pyarrow as pa
    import pyarrow.csv as pcsv

    checked = [n for n in header if kinds[n].pattern is not None]
    day = [days.column] if days is not None and days.column in header else []
    read = [*dict.fromkeys([*keys, *checked, *day])]
    try:
        if isinstance(source, Path) and read_header(source) != list(header):
            return None
        reader = pcsv.open_csv(
            source,
            read_options=pcsv.ReadOptions(block_size=BLOCK_SIZE, use_threads=False),
            parse_options=pcsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False),
            convert_options=pcsv.ConvertOptions(
                include_columns=read,
                column_types=dict.fromkeys(read, pa.string()),
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
        records = 0
        for batch in reader:
            if stop.is_set() or not _batch_passes(batch, kinds, keys, checked):
                return None
            if order is not None:
                order.update(batch, keys)
            if day and days is not None:
                days.update(batch)
            records += batch.num_rows
    except (pa.ArrowException, OSError, ValueError, UnreadableFile):
        return None
    return records


def prescan_file(
    request: LoadRequest,
    plan: ColumnPlan,
    stop: threading.Event,
    order: KeyOrder | None = None,
    days: DaySet | None = None,
) -> int | None:
    """:func:`count_if_all_pass` over the load's file on disk, with its header, kinds and keys."""
    return count_if_all_pass(
        request.path, plan.header, dict(plan.kinds), request.key_columns, stop, order, days
    )


def day_set(request: LoadRequest, plan: ColumnPlan) -> DaySet | None:
    """A :class:`DaySet` of the export's day column, when its type has one and the file holds it."""
    day = request.export.day_column
    return DaySet(day) if day is not None and day in plan.header else None


class KeyOrder:
    """Whether every record's natural key is greater than the one before: then no key repeats.

    Why: an export written in key order (by day, then tactic, as the emulator's, and any writer that
    walks its data that way) proves in one comparison of neighbours, on the pre-scan's thread, what
    otherwise takes a sort or a hash of every key in the database (an index build or a ``GROUP BY``:
    3 to 4 s for 1 GiB on PostgreSQL). Keys are compared as text, byte by byte. A file in any other
    order proves nothing, and the database looks for repeated keys as before.
    """

    def __init__(self) -> None:
        self.increasing = True
        self._last: tuple[Any, ...] | None = None

    def update(self, batch: Any, keys: Sequence[str]) -> None:
        """Take the next batch of the file (its key columns are non-null strings)."""
        import pyarrow.compute as pc

        rows = batch.num_rows
        if not self.increasing or rows == 0 or not keys:
            return
        columns = [batch.column(k) for k in keys]
        first = tuple(c[0].as_py() for c in columns)
        if self._last is not None and not first > self._last:
            self.increasing = False
            return
        if rows > 1:
            greater = equal = None
            for column in columns:
                before, after = column.slice(0, rows - 1), column.slice(1)
                above, same = pc.greater(after, before), pc.equal(after, before)
                greater = above if greater is None else pc.or_(greater, pc.and_(equal, above))
                equal = same if equal is None else pc.and_(equal, same)
            if not _all(greater):
                self.increasing = False
                return
        self._last = tuple(c[rows - 1].as_py() for c in columns)


class DaySet:
    """The distinct values of the day column, gathered a batch at a time on the pre-scan's thread.

    Why: the days a load replaced are its partitions; asking the database for them afterwards is a
    ``DISTINCT`` over every staged row (a second on PostgreSQL for a 256 MiB file), while Arrow finds
    a batch's few days as it reads it. Trusted only when every record passed the rules, when the
    values are ISO dates exactly as the table will hold them.
    """

    def __init__(self, column: str) -> None:
        self.column = column
        self.values: set[str] = set()

    def update(self, batch: Any) -> None:
        import pyarrow.compute as pc

        self.values.update(v for v in pc.unique(batch.column(self.column)).to_pylist() if v is not None)


def _batch_passes(batch: Any, kinds: dict[str, Kind], keys: Sequence[str], checked: Sequence[str]) -> bool:
    for key in keys:
        column = batch.column(key)
        if column.null_count or (len(column) and _shortest(column) == 0):
            return False
    for name in checked:
        column = batch.column(name)
        if not _column_passes(column.drop_null() if column.null_count else column, kinds[name]):
            return False
    return True


def _column_passes(present: Any, kind: Kind) -> bool:
    """Whether every (non-null) value satisfies the kind's rule, by the cheapest exact check Arrow has.

    Why not the regular expression everywhere: on 1 GiB it and the day-of-month check cost the
    pass 2 s of its 4.5. A date passes exactly when Arrow's strict ``YYYY-MM-DD`` cast takes it
    (it refuses other spellings and days a month lacks) and its year is not 0; a count of 1 to 18
    ASCII digits needs no pattern (a sign does, and gets it). Property-tested against the Python
    rules (tests/warehouse/test_prescan.py).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if kind is Kind.DATE:
        try:
            dates = pc.cast(present, pa.date32())
        except pa.ArrowInvalid:
            return False
        # Compared in Arrow: Python's date cannot hold year 0, which the cast takes and the rule does not.
        return not pc.less(pc.min(dates), pa.scalar(_FIRST_DAY, pa.date32())).as_py()
    if kind is Kind.COUNT and _plain_digits(present, 18):
        return True
    return kind.pattern is None or _all(pc.match_substring_regex(present, f"^(?:{kind.pattern})$"))


def _plain_digits(values: Any, most: int) -> bool:
    """Whether every value is 1 to ``most`` ASCII digits."""
    import pyarrow.compute as pc

    return len(values) == 0 or (
        _shortest(values) > 0 and _longest(values) <= most and _all(pc.ascii_is_decimal(values))
    )


def _shortest(column: Any) -> int:
    """The length in bytes of the shortest value of a non-empty column."""
    import pyarrow.compute as pc

    return int(pc.min(pc.binary_length(column)).as_py() or 0)


def _longest(column: Any) -> int:
    import pyarrow.compute as pc

    return int(pc.max(pc.binary_length(column)).as_py() or 0)


def _all(mask: Any) -> bool:
    """True when every value of a boolean array is true; an empty array passes (Arrow says null)."""
    import pyarrow.compute as pc

    return bool(pc.all(mask, min_count=0).as_py())
