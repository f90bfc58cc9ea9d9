"""The load flow's own promises: a load never changes its request, and a dialect holds no load's state.

The request is frozen: what a download turns out to be (its digest and size) is the result's and the
ledger's, never written back into it. A dialect keeps only what every load shares (its hook and
options), so one instance serves two loads at once: on DuckDB the table lock of this process is the
load's (the flow holds it), not the dialect's, and the second load waits for the first instead of
finding the first's lock and going ahead.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import threading
from pathlib import Path
from typing import Any

import pytest

from abm_provider.warehouse import LoadRequest, loader_for
from abm_provider.warehouse.dialects.duckdb import DuckDBDialect
from abm_provider.warehouse.schema import TableName, export_schema
from support.export_files import TACTIC_COLUMNS, days, expected, tactic_rows, write_csv
from support.warehouses import Warehouse

TP = "TACTIC_PERFORMANCE"
TABLE = "tactic_perf"
#: Seconds a load waits for the other at the rendezvous before the test fails (not a sleep).
WAIT = 60


def _request(path: Path, execution_id: str, *, stream: Any = None) -> LoadRequest:
    schema = export_schema(TP)
    data = path.read_bytes()
    return LoadRequest(
        path=path,
        source=str(path),
        table=TableName.parse(TABLE),
        export=schema,
        key_columns=schema.natural_key,
        execution_id=execution_id,
        sha256="" if stream is not None else hashlib.sha256(data).hexdigest(),
        size=0 if stream is not None else len(data),
        rejects_path=path.with_suffix(".rejects.csv"),
        ledger=TableName.parse("abm_load_ledger"),
        stream=stream,
    )


@pytest.fixture
def warehouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Warehouse:
    return Warehouse("duckdb", "wh_flow", tmp_path / "wh.duckdb", table=TABLE).use(monkeypatch)


@pytest.fixture
def hook(warehouse: Warehouse) -> Any:
    from airflow.providers.duckdb.hooks.duckdb import DuckDBHook

    return DuckDBHook(duckdb_conn_id=warehouse.conn_id)


@dataclasses.dataclass(frozen=True)
class _Verified:
    sha256: str
    size: int


class _Downloaded:
    """A download that is already complete: DuckDB takes no readers, and settling names the file."""

    def __init__(self, path: Path) -> None:
        data = path.read_bytes()
        self.verified = _Verified(hashlib.sha256(data).hexdigest(), len(data))

    def open(self, readers: int) -> list[Any]:
        raise AssertionError("DuckDB reads the finished file, never the stream")

    def settle(self) -> _Verified:
        return self.verified


def test_a_load_leaves_its_request_as_it_was(hook: Any, warehouse: Warehouse, tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "exec-1.csv", TACTIC_COLUMNS, tactic_rows(days(dt.date(2026, 10, 1), 2), 3, version=1)
    )
    download = _Downloaded(path)
    request = _request(path, "exec-1", stream=download)
    before = dataclasses.replace(request)

    result = loader_for(hook).load(request)

    assert request == before and (request.sha256, request.size) == ("", 0)
    assert (result.sha256, result.bytes) == (download.verified.sha256, download.verified.size)
    assert warehouse.query("SELECT sha256, bytes FROM abm_load_ledger") == [
        (download.verified.sha256, download.verified.size)
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.sha256 = "changed"  # type: ignore[misc]


def test_one_dialect_serves_two_loads_of_one_table_at_once(
    hook: Any, warehouse: Warehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = dt.date(2026, 10, 1)
    base = tactic_rows(days(start, 6), 3, version=1)
    # Both restate days 3 and 4: loads that did not take turns would delete the same rows at once.
    first = tactic_rows(days(start + dt.timedelta(days=1), 3), 3, version=2)
    second = tactic_rows(days(start + dt.timedelta(days=2), 3), 3, version=3)
    loader = loader_for(hook)
    loader.load(_request(write_csv(tmp_path / "exec-0.csv", TACTIC_COLUMNS, base), "exec-0"))
    state = dict(vars(loader.dialect))

    # Both loads have staged their file before either takes the table's lock.
    both_staged = threading.Barrier(2, timeout=WAIT)
    original = DuckDBDialect.lock

    def lock(dialect: DuckDBDialect, cur: Any, table: TableName) -> Any:
        both_staged.wait()
        return original(dialect, cur, table)

    monkeypatch.setattr(DuckDBDialect, "lock", lock)
    outcomes: dict[str, Any] = {}

    def load(name: str, rows: list[dict[str, str]]) -> None:
        try:
            outcomes[name] = loader.load(
                _request(write_csv(tmp_path / f"{name}.csv", TACTIC_COLUMNS, rows), name)
            )
        except BaseException as exc:
            outcomes[name] = exc

    threads = [threading.Thread(target=load, args=args) for args in (("exec-1", first), ("exec-2", second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 2)
        assert not thread.is_alive(), "a load did not finish"

    assert {name: getattr(out, "rows_loaded", out) for name, out in outcomes.items()} == {
        "exec-1": len(first),
        "exec-2": len(second),
    }
    assert vars(loader.dialect) == state
    loaded = warehouse.contents(TP)
    # Neither has an execution time: the one that took the lock second replaces the other's days.
    assert loaded in (expected(TP, base, first, second), expected(TP, base, second, first))
