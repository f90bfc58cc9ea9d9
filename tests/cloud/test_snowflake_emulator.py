"""fakesnow as the Snowflake the tests load into: the official ``SnowflakeHook``, unmodified, reaches it
from the ``snowflake_connection`` fixture, and the bulk path (PUT to a table stage, COPY INTO) works."""

from __future__ import annotations

import datetime as dt
import json
from contextlib import closing
from decimal import Decimal
from pathlib import Path

import pytest
from airflow.providers.snowflake.hooks.snowflake import SnowflakeHook

from support.cloud_warehouses import SNOWFLAKE_NETWORK_TIMEOUT, SnowflakeTarget


def test_the_snowflake_hook_runs_sql_on_the_emulator(snowflake_connection: SnowflakeTarget) -> None:
    hook = SnowflakeHook(snowflake_conn_id=snowflake_connection.conn_id)
    assert hook.get_first("SELECT 1") == (1,)
    assert hook.get_first("SELECT CURRENT_DATABASE()") == (snowflake_connection.database,)


def test_a_csv_put_to_a_table_stage_is_copied_into_the_table(
    snowflake_connection: SnowflakeTarget, tmp_path: Path
) -> None:
    csv = tmp_path / "tactic.csv"
    csv.write_text(
        'date,campaign_name,spend\n2026-11-01,"Spring, ""Launch""",12.50\n2026-11-02,Café Münster,0.10\n',
        encoding="utf-8",
    )
    with closing(SnowflakeHook(snowflake_conn_id=snowflake_connection.conn_id).get_conn()) as conn:
        cur = conn.cursor()
        cur.execute("CREATE TABLE tactic (date DATE, campaign_name VARCHAR, spend NUMBER(18,2))")
        cur.execute(f"PUT file://{csv} @%tactic")
        put = cur.fetchall()
        assert [(row[0], row[6]) for row in put] == [("tactic.csv", "UPLOADED")]
        cur.execute(
            "COPY INTO tactic FROM @%tactic "
            "FILE_FORMAT=(TYPE=CSV SKIP_HEADER=1 FIELD_OPTIONALLY_ENCLOSED_BY='\"')"
        )
        copied = cur.fetchall()
        assert [(row[1], row[3]) for row in copied] == [("LOADED", 2)]
        cur.execute("SELECT date, campaign_name, spend FROM tactic ORDER BY date")
        rows = cur.fetchall()
    assert rows == [
        (dt.date(2026, 11, 1), 'Spring, "Launch"', Decimal("12.50")),
        (dt.date(2026, 11, 2), "Café Münster", Decimal("0.10")),
    ]


def test_each_test_has_a_database_of_its_own(
    snowflake_connection: SnowflakeTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    SnowflakeHook(snowflake_conn_id=snowflake_connection.conn_id).run("CREATE TABLE mine (a INT)")
    other = snowflake_connection.server.connection(f"{snowflake_connection.database}_OTHER")
    monkeypatch.setenv("AIRFLOW_CONN_SNOWFLAKE_OTHER", json.dumps(other))
    tables = "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'MINE'"
    assert SnowflakeHook(snowflake_conn_id=snowflake_connection.conn_id).get_first(tables) == (1,)
    assert SnowflakeHook(snowflake_conn_id="snowflake_other").get_first(tables) == (0,)


def test_the_connector_gives_up_on_a_failing_request_after_the_short_network_timeout(
    snowflake_connection: SnowflakeTarget,
) -> None:
    """fakesnow answers HTTP 500 to an error it does not handle (``SELECT PARSE_JSON('{')``), which the
    connector retries until its network timeout, by default for ever: the fixture makes it short."""
    with closing(SnowflakeHook(snowflake_conn_id=snowflake_connection.conn_id).get_conn()) as conn:
        assert conn.network_timeout == conn.login_timeout == SNOWFLAKE_NETWORK_TIMEOUT
