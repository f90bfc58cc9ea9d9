"""Each dialect owns its options: read from the connection's extra ``dialect_options`` and the task's
``dialect_options=`` (which wins), and refused, naming the key, the dialect and its options, when a
key is unknown or a value of the wrong type."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from abm_provider.warehouse import loader_for
from abm_provider.warehouse.dialects import DIALECTS, GENERIC, _load, check_declared, dialect_for
from abm_provider.warehouse.dialects.duckdb import DuckDBOptions
from abm_provider.warehouse.dialects.generic import GenericDialect
from abm_provider.warehouse.dialects.options import NoOptions, describe_options, read_options
from support.warehouses import SqliteTestHook, duckdb_conn_env


def _duckdb_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **extra: Any) -> Any:
    from airflow.providers.duckdb.hooks.duckdb import DuckDBHook

    monkeypatch.setenv("AIRFLOW_CONN_WH_OPTIONS", duckdb_conn_env(tmp_path / "wh.duckdb", **extra))
    return DuckDBHook(duckdb_conn_id="wh_options")


def _setting(loader: Any, name: str) -> str:
    conn = loader.dialect.connect()
    try:
        return str(conn.execute(f"SELECT current_setting('{name}')").fetchone()[0])
    finally:
        conn.close()


def test_every_registered_dialect_declares_its_options() -> None:
    for path in sorted({*DIALECTS.values(), GENERIC}):
        cls = _load(path)
        print(f"\n{cls.name}: {describe_options(cls.name, cls.__dict__['options_type'])}")
    assert _load(DIALECTS["duckdb"]).options_type is DuckDBOptions
    assert _load(DIALECTS["postgres"]).options_type is NoOptions


def test_duckdb_applies_the_task_options_over_the_connection_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = _duckdb_hook(tmp_path, monkeypatch, dialect_options={"memory_limit": "300MB", "threads": 2})
    from_connection = loader_for(hook)
    assert from_connection.dialect.options == DuckDBOptions(memory_limit="300MB", threads=2)
    assert (_setting(from_connection, "memory_limit"), _setting(from_connection, "threads")) == (
        "286.1 MiB",
        "2",
    )

    from_task = loader_for(hook, dialect_options={"memory_limit": "200MB"})
    assert from_task.dialect.options == DuckDBOptions(memory_limit="200MB", threads=2)
    assert _setting(from_task, "memory_limit") == "190.7 MiB"


def test_duckdb_connection_settings_of_its_own_win(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The DuckDB hook applies its extras ``memory_limit``/``threads`` when it opens the database."""
    hook = _duckdb_hook(tmp_path, monkeypatch, memory_limit="100MB")
    assert _setting(loader_for(hook, dialect_options={"memory_limit": "300MB"}), "memory_limit") == "95.3 MiB"


def test_the_default_memory_limit_applies_without_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _setting(loader_for(_duckdb_hook(tmp_path, monkeypatch)), "memory_limit") == "953.6 MiB"


def test_an_unknown_option_names_the_key_the_dialect_and_its_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = _duckdb_hook(tmp_path, monkeypatch)
    with pytest.raises(ValueError) as raised:
        loader_for(hook, dialect_options={"memory_limt": "1GB"})
    message = str(raised.value)
    assert "'memory_limt' is not an option of the duckdb dialect" in message
    assert "memory_limit (str | None, default '1GB'), threads (int | None, default None)" in message


def test_an_unknown_option_in_the_connection_extra_says_where_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = _duckdb_hook(tmp_path, monkeypatch, dialect_options={"stage": "x"})
    with pytest.raises(
        ValueError, match="from the connection's extra: 'stage' is not an option of the duckdb"
    ):
        loader_for(hook)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"threads": "4"}, "threads of the duckdb dialect must be int | None, got '4'"),
        ({"threads": True}, "threads of the duckdb dialect must be int | None, got True"),
        ({"memory_limit": 1024}, "memory_limit of the duckdb dialect must be str | None, got 1024"),
        (
            {"memory_limit": "1GB; DROP TABLE x"},
            "memory_limit '1GB; DROP TABLE x' of the duckdb dialect is not a size",
        ),
        ({"threads": 0}, "threads of the duckdb dialect must be a whole number >= 1, got 0"),
    ],
)
def test_a_value_of_the_wrong_type_names_the_option(given: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValueError, match="dialect_options") as raised:
        read_options("duckdb", DuckDBOptions, given=given)
    assert expected in str(raised.value)


def test_a_warehouse_without_options_refuses_any(tmp_path: Path) -> None:
    hook = SqliteTestHook(tmp_path / "wh.sqlite")
    expected = "'memory_limit' is not an option of the generic dialect; the generic dialect has no options"
    with pytest.raises(ValueError, match=expected):
        loader_for(hook, dialect_options={"memory_limit": "1GB"})


def test_defaults_apply_only_where_the_dialect_has_the_option(tmp_path: Path) -> None:
    """The list sync's state database offers DuckDB's smaller limit; another warehouse ignores it."""
    assert read_options("duckdb", DuckDBOptions, defaults={"memory_limit": "80MB"}).memory_limit == "80MB"
    assert read_options(
        "duckdb", DuckDBOptions, defaults={"memory_limit": "80MB"}, given={"memory_limit": "2GB"}
    ) == DuckDBOptions(memory_limit="2GB")
    dialect = dialect_for(SqliteTestHook(tmp_path / "wh.sqlite"), defaults={"memory_limit": "80MB"})
    assert dialect.options == NoOptions()


def test_the_generic_path_checks_the_warehouse_options_and_uses_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = _duckdb_hook(tmp_path, monkeypatch)
    assert loader_for(hook, method="generic", dialect_options={"threads": 2}).dialect.options == NoOptions()
    with pytest.raises(ValueError, match="'thread' is not an option of the duckdb dialect"):
        loader_for(hook, method="generic", dialect_options={"thread": 2})


def test_a_dialect_without_options_of_its_own_is_refused() -> None:
    class Inheriting(GenericDialect):
        name = "inheriting"
        capabilities = GenericDialect.capabilities

    with pytest.raises(TypeError, match="Inheriting declares no options of its own: set options_type"):
        check_declared(Inheriting)

    @dataclass(frozen=True, kw_only=True)
    class StageOptions:
        stage: str = "abm"

    class Declaring(GenericDialect):
        name = "declaring"
        capabilities = GenericDialect.capabilities
        options_type = StageOptions

    check_declared(Declaring)
    assert Declaring(
        None, read_options("declaring", StageOptions, given={"stage": "s"})
    ).options == StageOptions(stage="s")
