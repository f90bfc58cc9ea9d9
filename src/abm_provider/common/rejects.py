"""The rejects file and the reject limits: one format and one limit API for every operator.

Whatever refuses records (the account-list operators before or after sending, the warehouse loader
while staging) writes them with :class:`RejectsWriter` to one CSV format, and limits them with one
argument checked by :func:`check_limit` and enforced by :func:`check_rejects`.

The file's columns are :data:`REJECTS_HEADER`:

``line``
    the physical line of the source file the record starts on (its header is line 1); empty for
    sources without lines (iterables, Parquet, SQL) and for records not found in the source.
``record``
    the 1-based number of the record among the source's data records; empty when the record cannot
    be matched to a source row (an account the service reported that no row of the batch holds).
``reason``
    why it was refused, in words a person can fix the source from.
``raw``
    the record as read: the loader's raw CSV text, or an account row as compact JSON
    (:func:`raw_json`) so nothing of it is lost whatever the source's columns. Text that was not
    UTF-8 is written with backslash escapes rather than dropped, so the offending bytes stay visible.

A limit (``max_rejected``, ``max_not_found``) is ``None`` (no limit), an ``int`` (how many records
are tolerated) or a ``float`` in ``[0, 1)`` (the share of all records tolerated). Passing one fails
the task with :class:`TooManyRejects`, which a retry cannot fix, so it is not retried.
"""

from __future__ import annotations

import csv
import json
import os
import uuid
from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeAlias

from airflow.sdk import ObjectStoragePath

from abm_provider.common.paths import as_storage_path, default_state_dir, is_local, safe_key
from abm_provider.compat import AirflowFailException
from abm_provider.exceptions import local_io

__all__ = [
    "REJECTS_HEADER",
    "Limit",
    "RejectsWriter",
    "TooManyRejects",
    "check_limit",
    "check_rejects",
    "default_rejects_path",
    "describe_reject",
    "raw_json",
    "read_rejects",
    "rejects_location",
]

#: Columns of every rejects file, in order.
REJECTS_HEADER: tuple[str, ...] = ("line", "record", "reason", "raw")

#: A reject limit: ``None`` (none), an ``int`` count, or a ``float`` fraction in ``[0, 1)``.
Limit: TypeAlias = int | float | None

#: Examples of reasons a limit message quotes.
_EXAMPLES = 2

StoragePath: TypeAlias = str | os.PathLike[str] | ObjectStoragePath


# --- limits ----------------------------------------------------------------------------------------


class TooManyRejects(AirflowFailException):
    """More records were refused than a limit allows; the task fails without retries.

    Retrying reads the same records and refuses them again, so this is an ``AirflowFailException``.
    The counts are kept as attributes for callers that want them.
    """

    def __init__(
        self, message: str, *, rejected: int, total: int, limit: int | float, rejects_path: str | None
    ) -> None:
        super().__init__(message)
        self.rejected = rejected
        self.total = total
        self.limit = limit
        self.rejects_path = rejects_path


def check_limit(value: object, name: str) -> Limit:
    """Return ``value`` if it is a valid limit, else raise ``ValueError`` naming the argument ``name``.

    Valid: ``None``; an ``int`` of at least 0 (a count); a ``float`` in ``[0, 1)`` (a fraction).
    A ``bool`` is refused although Python counts it as an int: ``True`` is almost always a mistake.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be an int (count) or a float (fraction), or None; got {value!r}")
    if isinstance(value, float):
        if not 0.0 <= value < 1.0:  # also refuses NaN
            raise ValueError(f"{name} as a fraction must be in [0, 1), got {value!r}")
        return value
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value!r}")
    return int(value)


def describe_reject(reason: str, record: int | None = None, line: int | None = None) -> str:
    """One reject as a limit message quotes it: ``record 3 (line 4): empty id``."""
    if record is not None:
        where = f"record {record}" + (f" (line {line})" if line is not None else "")
    elif line is not None:
        where = f"line {line}"
    else:
        return reason
    return f"{where}: {reason}"


def check_rejects(
    rejected: int,
    limit: Limit,
    *,
    total: int,
    final: bool = True,
    name: str = "max_rejected",
    what: str = "records were rejected",
    examples: Iterable[str] = (),
    rejects_path: object = None,
    outcome: str = "",
) -> None:
    """Raise :class:`TooManyRejects` when ``rejected`` of ``total`` records pass ``limit``.

    An ``int`` limit is a count, decided whenever this is called: a caller streaming its records may
    call with ``final=False`` and ``total`` the records read so far, and stop as soon as the limit is
    passed. A ``float`` limit is a fraction of all records, so it is decided only once ``final``.
    The message gives the counts, the limit (as ``name=``), one or two ``examples`` (see
    :func:`describe_reject`), where the rejects are, then ``outcome`` (what was or was not done).
    """
    if limit is None:
        return
    if isinstance(limit, float):
        if not final or total <= 0 or rejected / total <= limit:
            return
        counted = f"{rejected} of {total} {what} ({rejected / total:.2%})"
        allowed = f"{limit:.2%} of {total} records"
    else:
        if rejected <= limit:
            return
        counted = f"{rejected} of {total} {what}" if final else f"{rejected} {what} by record {total}"
        allowed = ""
    parts = [f"{counted}, more than {name}={limit!r} allows" + (f" ({allowed})" if allowed else "")]
    shown = [example for example, _ in zip(examples, range(_EXAMPLES), strict=False)]
    if shown:
        parts.append("e.g. " + "; ".join(shown))
    path = None if rejects_path is None else str(rejects_path)
    if path:
        parts.append(f"see {path}")
    message = "; ".join(parts) + "."
    if outcome:
        message += " " + outcome
    raise TooManyRejects(message, rejected=rejected, total=total, limit=limit, rejects_path=path)


# --- the file --------------------------------------------------------------------------------------


def raw_json(data: Any) -> str:
    """A row as compact JSON for the ``raw`` column: non-ASCII kept, unknown types as ``str``."""
    return json.dumps(data, default=str, ensure_ascii=False, separators=(",", ":"))


def _visible(text: str) -> str:
    """Text read with ``surrogateescape`` back to its bytes, with the non-UTF-8 ones as ``\\xNN``."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("ascii")


class RejectsWriter(AbstractContextManager["RejectsWriter"]):
    """Writes refused records to one rejects file (:data:`REJECTS_HEADER`), one at a time.

    The file is created on the first reject, so a clean run leaves nothing behind, and each reject
    is written as it comes, so memory does not grow with their number. On a local file system the
    rows go to a temporary name in the same folder, moved into place on :meth:`close`: a reader
    never sees half a file, and a file from an earlier run stays whole until it is replaced. On an
    object store the upload completes on close, which is atomic there already.

    Closing keeps what was written even when the ``with`` block fails: the rejects of a failed task
    are the evidence of why. With ``remove_stale``, closing without any reject removes a file left
    at the path by an earlier run, which would otherwise mislead.
    """

    def __init__(self, path: StoragePath, *, remove_stale: bool = False) -> None:
        self.path = as_storage_path(path)
        self.remove_stale = remove_stale
        self.count = 0
        self._local: Path | None = Path(self.path.path) if is_local(self.path) else None
        self._tmp: Path | None = None
        self._file: Any = None
        self._writer: Any = None
        self._closed = False

    @property
    def written(self) -> bool:
        """Whether any reject was written (and so the file exists once closed)."""
        return self.count > 0

    def _open(self) -> None:
        if self._local is not None:
            self._local.parent.mkdir(parents=True, exist_ok=True)
            self._tmp = self._local.with_name(f".{self._local.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
            self._file = self._tmp.open("w", encoding="utf-8", errors="backslashreplace", newline="")
        else:
            self._file = self.path.open("w", encoding="utf-8", errors="backslashreplace", newline="")
        self._writer = csv.writer(self._file, lineterminator="\n")
        self._writer.writerow(REJECTS_HEADER)

    def write(
        self, reason: str, *, record: int | None = None, line: int | None = None, raw: str = ""
    ) -> None:
        """Record one reject; ``record`` and ``line`` are left empty when unknown."""
        if self._closed:
            raise ValueError(f"the rejects file {self.path} is already closed")
        with local_io(self.path, "write the rejects file"):
            if self._writer is None:
                self._open()
            self._writer.writerow(
                ("" if line is None else line, "" if record is None else record, reason, _visible(raw))
            )
        self.count += 1

    def close(self) -> None:
        """Finish the file: move it into place (or complete the upload); see the class for stale files."""
        if self._closed:
            return
        self._closed = True
        if self._file is None:
            if self.remove_stale:
                if self._local is not None:
                    self._local.unlink(missing_ok=True)
                elif self.path.exists():
                    self.path.unlink()
            return
        file, self._file, self._writer = self._file, None, None
        with local_io(self.path, "write the rejects file"):
            file.close()
            if self._tmp is not None and self._local is not None:
                os.replace(self._tmp, self._local)

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def read_rejects(path: StoragePath) -> list[dict[str, str]]:
    """Read a rejects file back, one dict per reject keyed by :data:`REJECTS_HEADER`."""
    with as_storage_path(path).open("r", encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


# --- where the file goes ---------------------------------------------------------------------------


def default_rejects_path(source: Path) -> Path:
    """The loader's default: next to the loaded file, as ``<file>.rejects.csv``."""
    return source.with_name(source.name + ".rejects.csv")


def rejects_location(
    base: StoragePath | None,
    *,
    dag_id: str,
    run_id: str,
    task_id: str,
    try_number: int,
    map_index: int = -1,
) -> ObjectStoragePath:
    """``<base>/rejects/<dag_id>/<run_id>/<task_id>[.<map_index>]/try_<n>.csv``.

    The list operators' default (``base`` defaults to ``[abm] state_dir``). Keyed by try so a retry
    never overwrites the evidence of the failed try before it.
    """
    root = as_storage_path(base if base is not None else default_state_dir())
    task_part = safe_key(task_id) + (f".{map_index}" if map_index is not None and map_index >= 0 else "")
    return root / "rejects" / safe_key(dag_id) / safe_key(run_id) / task_part / f"try_{try_number}.csv"


def task_rejects_location(base: StoragePath | None, context: Any, operator: Any) -> ObjectStoragePath:
    """:func:`rejects_location` for the running task instance (the operator's ids outside Airflow)."""
    ti: Any = context.get("ti") or context.get("task_instance")
    map_index = getattr(ti, "map_index", None)
    return rejects_location(
        base,
        dag_id=getattr(ti, "dag_id", None) or operator.dag_id,
        run_id=context.get("run_id") or getattr(ti, "run_id", None) or "manual",
        task_id=getattr(ti, "task_id", None) or operator.task_id,
        try_number=getattr(ti, "try_number", None) or 1,
        map_index=map_index if map_index is not None else -1,
    )
