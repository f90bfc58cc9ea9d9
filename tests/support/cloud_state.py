"""A test's database on Snowflake (fakesnow) or BigQuery (bqemulator) as the sync tests'
``abm_warehouse`` connection, written and read with each database's own client, never the code under
test."""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import pytest

from support.warehouses import SYNC

CONN_ID = SYNC.conn_id
CLOUD_KINDS = ["snowflake", "bigquery"]


@dataclass
class CloudState:
    """The test's database on one emulator: where the source and the state tables are, and a reader."""

    kind: str
    target: Any
    schema: str | None

    def name(self, table: str) -> str:
        return f"{self.schema}.{table}" if self.schema else table

    def query(self, statement: str) -> list[tuple[Any, ...]]:
        if self.kind == "snowflake":
            from airflow.providers.snowflake.hooks.snowflake import SnowflakeHook

            with closing(SnowflakeHook(snowflake_conn_id=self.target.conn_id).get_conn()) as conn:
                cur = conn.cursor()
                cur.execute(statement)
                return [tuple(r) for r in cur.fetchall()] if cur.description else []
        from google.cloud import bigquery

        client = self.target.client()
        config = bigquery.QueryJobConfig(default_dataset=f"{client.project}.{self.schema}")
        return [tuple(r.values()) for r in client.query(statement, job_config=config).result()]

    def replace_table(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        """(Re)create ``table`` as text columns holding ``rows`` (plain values: no quote, no backslash)."""
        self.query(f"DROP TABLE IF EXISTS {self.name(table)}")
        text = "STRING" if self.kind == "bigquery" else "VARCHAR"
        self.query(f"CREATE TABLE {self.name(table)} ({', '.join(f'{c} {text}' for c in columns)})")
        if rows:
            values = ", ".join("(" + ", ".join(f"'{v}'" for v in row) + ")" for row in rows)
            self.query(f"INSERT INTO {self.name(table)} VALUES {values}")


def open_cloud(request: pytest.FixtureRequest, kind: str, monkeypatch: pytest.MonkeyPatch) -> CloudState:
    """``abm_warehouse`` on a new database of the test's own on ``kind``'s emulator."""
    if kind == "snowflake":
        target = request.getfixturevalue("snowflake_connection")
        connection, schema = target.server.connection(target.database), None
    else:
        target = request.getfixturevalue("bigquery_connection")
        target.client().create_dataset(target.dataset)
        connection, schema = target.server.connection(), target.dataset
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(connection))
    return CloudState(kind, target, schema)
