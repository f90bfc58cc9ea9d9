"""bqemulator as the BigQuery the tests load into: ``google-cloud-bigquery`` reaches it from the
``bigquery_connection`` fixture, and the bulk path (a CSV load job, then a query job) works."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal

from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery

from support.cloud_warehouses import BigQueryTarget

CSV = 'date,campaign_name,spend\n2026-11-01,"Spring, ""Launch""",12.50\n2026-11-02,Café Münster,0.10\n'
SCHEMA = [
    bigquery.SchemaField("date", "DATE"),
    bigquery.SchemaField("campaign_name", "STRING"),
    bigquery.SchemaField("spend", "NUMERIC"),
]


def test_a_csv_load_job_then_a_query_on_the_emulator(bigquery_connection: BigQueryTarget) -> None:
    client = bigquery_connection.client()
    client.create_dataset(bigquery_connection.dataset)
    table = f"{bigquery_connection.project}.{bigquery_connection.dataset}.tactic"
    job = client.load_table_from_file(
        io.BytesIO(CSV.encode("utf-8")),
        table,
        job_config=bigquery.LoadJobConfig(source_format="CSV", skip_leading_rows=1, schema=SCHEMA),
    )
    job.result(timeout=60)
    assert job.output_rows == 2
    query = client.query(
        f"SELECT date, campaign_name, spend FROM `{table}` WHERE spend > @least ORDER BY date",
        job_config=bigquery.QueryJobConfig(
            query_parameters=[bigquery.ScalarQueryParameter("least", "NUMERIC", Decimal("0"))]
        ),
    )
    assert [tuple(row.values()) for row in query.result(timeout=60)] == [
        (dt.date(2026, 11, 1), 'Spring, "Launch"', Decimal("12.50")),
        (dt.date(2026, 11, 2), "Café Münster", Decimal("0.10")),
    ]


def test_a_client_made_without_the_endpoint_reaches_the_emulator(bigquery_connection: BigQueryTarget) -> None:
    """``BIGQUERY_EMULATOR_HOST`` (set by the fixture) points any client of the test at the emulator."""
    bigquery_connection.client().create_dataset(bigquery_connection.dataset)
    plain = bigquery.Client(project=bigquery_connection.project, credentials=AnonymousCredentials())
    assert bigquery_connection.dataset in [d.dataset_id for d in plain.list_datasets()]
