"""An export rewritten as files of numbered text rows, for warehouses that stage by uploading files.

Why: the load flow needs each staged row's record number (``_rec``): rejects name their line, and of
a natural key the file repeats the later record wins. PostgreSQL and DuckDB number rows as they read
the file, but a cloud warehouse's bulk path (Snowflake's ``COPY INTO`` from a stage, BigQuery's load
job) reads files in parallel and keeps no order, so the number has to be in the file it is given.

Arrow reads the CSV a block at a time, every column as text exactly as written (a quoted empty field
is ``''``, an unquoted one null, as ``COPY`` stages them), adds ``_rec`` and writes Parquet (text
stays text: a CSV reader on the warehouse's side would guess types and turn ``007`` into ``7``) or
CSV. Memory is bounded by a block. A file Arrow cannot read as the header says (a record with the
wrong number of fields, a broken quote, bytes that are not UTF-8) is read again by Python's ``csv``
module (:func:`~abm_provider.warehouse.records.iter_records`), which sets each such record aside
with its number and reason and writes the rest; exports are machine-written, so that is rare.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from abm_provider.warehouse.records import iter_records

#: The record-number column each file starts with: 1 for the file's first record after the header.
RECORD_COLUMN = "_rec"
#: Bytes Arrow reads per block, which bounds the memory of the pass.
BLOCK_SIZE = 4 << 20
#: Rows per output file: several files let a warehouse read them in parallel.
ROWS_PER_FILE = 1_000_000
#: Rows per batch of the Python pass.
PYTHON_BATCH_ROWS = 50_000

FileFormat = Literal["parquet", "csv"]


@dataclass(frozen=True)
class NumberedFiles:
    """The files written, in record order, how many rows they hold, and the records set aside."""

    paths: tuple[Path, ...]
    rows: int
    #: Records that could not be read (malformed), by record number, with the reason; in no file.
    rejects: Mapping[int, str] = field(default_factory=dict)


def write_numbered(
    path: Path,
    header: Sequence[str],
    folder: Path,
    *,
    file_format: FileFormat = "parquet",
    rows_per_file: int = ROWS_PER_FILE,
    log: logging.Logger | None = None,
) -> NumberedFiles:
    """Write the records of the CSV at ``path`` (whose header is ``header``) into ``folder`` as
    ``part-00000.<format>`` files of ``_rec`` and one text column per header name."""
    import pyarrow as pa

    log = log or logging.getLogger(__name__)
    try:
        return _write(_arrow_batches(path, header), header, folder, file_format, rows_per_file)
    except (pa.ArrowException, ValueError) as exc:
        log.warning(
            "Arrow could not read %s as CSV (%s); reading it again with Python to set malformed "
            "records aside",
            path.name,
            str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
        )
        for stale in folder.glob(f"part-*.{file_format}"):
            stale.unlink()
        rejects: dict[int, str] = {}
        written = _write(_python_batches(path, header, rejects), header, folder, file_format, rows_per_file)
        return NumberedFiles(written.paths, written.rows, rejects)


def _schema(header: Sequence[str]) -> Any:
    import pyarrow as pa

    return pa.schema([(RECORD_COLUMN, pa.int64()), *((name, pa.string()) for name in header)])


def _arrow_batches(path: Path, header: Sequence[str]) -> Iterator[Any]:
    """The file's records as batches of ``_rec`` and text columns, read by Arrow.

    Arrow's rows are the records (it skips blank lines as ``iter_records`` does), so counting them
    numbers the records as the Python pass does.
    """
    import pyarrow as pa
    import pyarrow.csv as pcsv

    reader = pcsv.open_csv(
        path,
        read_options=pcsv.ReadOptions(
            block_size=BLOCK_SIZE, use_threads=False, column_names=list(header), skip_rows=1
        ),
        parse_options=pcsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=True),
        convert_options=pcsv.ConvertOptions(
            column_types={name: "string" for name in header},
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        ),
    )
    before = 0
    for batch in reader:
        numbers = pa.array(range(before + 1, before + 1 + batch.num_rows), pa.int64())
        before += batch.num_rows
        yield pa.RecordBatch.from_arrays([numbers, *batch.columns], schema=_schema(header))


def _python_batches(path: Path, header: Sequence[str], rejects: dict[int, str]) -> Iterator[Any]:
    """The well-formed records as batches, read by Python's ``csv``; the others go into ``rejects``.

    Python's reader cannot tell a quoted empty field from an unquoted one: both become null, as on
    the other warehouses' Python paths.
    """
    import pyarrow as pa

    schema = _schema(header)
    numbers: list[int] = []
    columns: list[list[str | None]] = [[] for _ in header]

    def batch() -> Any:
        arrays = [pa.array(numbers, pa.int64()), *(pa.array(c, pa.string()) for c in columns)]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    for record in iter_records(path, len(header)):
        if record.error is not None or record.fields is None:
            rejects[record.number] = f"malformed record ({record.error})"
            continue
        numbers.append(record.number)
        for column, value in zip(columns, record.fields, strict=True):
            column.append(value if value != "" else None)
        if len(numbers) >= PYTHON_BATCH_ROWS:
            yield batch()
            numbers, columns = [], [[] for _ in header]
    if numbers:
        yield batch()


def _write(
    batches: Iterator[Any], header: Sequence[str], folder: Path, file_format: FileFormat, rows_per_file: int
) -> NumberedFiles:
    """Write the numbered batches in order, starting a new file every ``rows_per_file`` rows."""
    import pyarrow as pa

    schema = _schema(header)
    paths: list[Path] = []
    writer: _Writer | None = None
    rows = 0
    for batch in batches:
        rows += batch.num_rows
        table = pa.Table.from_batches([batch])
        offset = 0
        while offset < table.num_rows:
            if writer is None or writer.rows >= rows_per_file:
                if writer is not None:
                    writer.close()
                paths.append(folder / f"part-{len(paths):05d}.{file_format}")
                writer = _Writer(paths[-1], schema, file_format)
            take = min(rows_per_file - writer.rows, table.num_rows - offset)
            writer.write(table.slice(offset, take))
            offset += take
    if writer is not None:
        writer.close()
    return NumberedFiles(tuple(paths), rows)


class _Writer:
    """One output file being written, and how many rows it holds so far."""

    def __init__(self, path: Path, schema: Any, file_format: FileFormat) -> None:
        self.rows = 0
        self._writer: Any
        if file_format == "parquet":
            import pyarrow.parquet as pq

            self._writer = pq.ParquetWriter(path, schema, compression="snappy")
        else:
            import pyarrow.csv as pcsv

            self._writer = pcsv.CSVWriter(path, schema)

    def write(self, table: Any) -> None:
        self._writer.write_table(table)
        self.rows += table.num_rows

    def close(self) -> None:
        self._writer.close()
