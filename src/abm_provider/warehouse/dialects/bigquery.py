"""BigQuery: the file as numbered Parquet, staged by a load job, then the replace in one transaction.

Staging. BigQuery's bulk path is a load job, which reads files in parallel and keeps no record order,
so the record number every reject and every repeated key needs travels in the file:
:func:`~abm_provider.warehouse.numbered.write_numbered` rewrites the export as Parquet files of an
INT64 ``_rec`` and one STRING column per header name, text exactly as written (a quoted empty field
is ``''``, an unquoted one NULL) and malformed records set aside. Parquet rather than CSV: a CSV load
job reads a quoted empty field as NULL, where the other warehouses stage an empty text.
The files are loaded (one job each) into the stage table, which then gets its ``_reason`` column and
one ``UPDATE`` sets it where a column rule fails (the rules of :mod:`abm_provider.warehouse.schema`
as ``REGEXP_CONTAINS``, RE2 patterns).

Where the stage lives. The shared SQL (:mod:`abm_provider.warehouse.sql`) names the stage
``_abm_stage``, unqualified. Each load creates a dataset of its own next to the target (same project
and location, named ``_abm_stage_<hex>``, hidden in the console by its leading ``_``), the session's
jobs resolve unqualified names there (``default_dataset``), and the connection deletes it, stage and
all, when the load ends. So two loads at once never share a stage, and a second run never finds a
stale one. Not a session temporary table: a load job from a local file cannot write one, and
bqemulator keeps ``CREATE TEMP TABLE`` tables outside the session, where a second run finds them. A
load killed before it could clean up leaves a dataset whose tables expire after a day. The
credentials need ``bigquery.datasets.create`` on the project (BigQuery User has it).

The replace. Every statement runs in one BigQuery session (:mod:`.bigquery_session`), so the
delete of restated keys, the insert and the ledger row, from ``BEGIN TRANSACTION``
(:meth:`BigQueryDialect.begin_replace`) to the commit, are one transaction. DDL cannot run inside
one: the session's cursor commits before a ``CREATE TABLE`` or ``ALTER TABLE`` and opens a new
transaction after (``transactional_ddl=False``; the flow asks the ledger again after its DDL).

Concurrency. BigQuery has no lock a session can take. Two loads of one table stage in parallel and
both open their transaction; when both change the table, BigQuery cancels one of them (a concurrent
update: at a statement or at its commit), which rolls that load back whole and fails its task; a
retry loads it again, or skips it when the ledger has it. So no load is half-applied and no key
doubled, but a task can fail: run one load of a table at a time (``table_lock="none"``, which the
loader logs). The emulator lets both commit, one after the other, so this is not tested here.

Types: STRING, INT64, NUMERIC(18,2) (money; BigQuery enforces the precision and scale, the emulator
does not), DATE, and TIMESTAMP for the load times (naive UTC in Python, bound as UTC: a TIMESTAMP
is an instant, which a reader in any zone reads right, where a DATETIME is a wall-clock time).
"""

from __future__ import annotations

import re
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from abm_provider.warehouse.dialects.base import Staged
from abm_provider.warehouse.dialects.bigquery_hook import session_connection_for
from abm_provider.warehouse.dialects.bigquery_session import SessionConnection
from abm_provider.warehouse.dialects.capabilities import Capabilities
from abm_provider.warehouse.dialects.options import NoOptions
from abm_provider.warehouse.dialects.stripping import stripped_chr_sql
from abm_provider.warehouse.numbered import RECORD_COLUMN, write_numbered
from abm_provider.warehouse.rules_sql import SqlValidated
from abm_provider.warehouse.schema import STAGE_TABLE, Kind, TableName

if TYPE_CHECKING:
    from abm_provider.warehouse.checks import ColumnPlan
    from abm_provider.warehouse.load import LoadRequest
    from abm_provider.warehouse.stream import IncomingFile

#: Standard SQL types and BigQuery's names for them.
_TYPES = {
    "TEXT": "STRING",
    "VARCHAR": "STRING",
    "BIGINT": "INT64",
    "INTEGER": "INT64",
    "BOOLEAN": "BOOL",
    "DOUBLE": "FLOAT64",
    "TIMESTAMP": "TIMESTAMP",
    "DATE": "DATE",
}
_DECIMAL = re.compile(r"DECIMAL(\(\s*\d+\s*,\s*\d+\s*\))?", re.IGNORECASE)
#: What a staged text becomes in the replace's casts (a parameterised type is the column's business).
_CAST_TYPES = {Kind.DATE: "DATE", Kind.COUNT: "INT64", Kind.MONEY: "NUMERIC"}
#: How long a stage table a killed load left behind lives.
STAGE_EXPIRY_MS = 24 * 3600 * 1000
#: The prefix of each load's stage dataset (a leading ``_`` hides a dataset in the console).
STAGE_DATASET_PREFIX = "_abm_stage_"


class BigQueryDialect(SqlValidated):
    name = "bigquery"
    options_type = NoOptions
    capabilities = Capabilities(
        bulk_path="bigquery_load_job",
        # No lock exists: of two concurrent transactions on one table, BigQuery aborts one at commit.
        table_lock="none",
        session_locks=False,
        names_lock_holder=False,
        # DDL cannot run in a transaction, so a new table could not be rolled back with its rows.
        direct_new_table=False,
        stream_readers=0,  # the load job reads whole files, written once the download is complete
        unique_key_index=False,  # BigQuery has no indexes; keys are kept unique by the replace
        add_column_if_not_exists=True,
        rules_in_sql=True,
        full_outer_join=True,
        param_style="qmark",
        # Session temporary tables exist, but the emulator keeps them outside the session; the list
        # sync's work tables are ordinary tables of unique names instead, which behave the same.
        temporary_tables=False,
        multi_statement_transactions=True,  # in a session: every statement of ours runs in one
        delete_using_join=False,  # DELETE has no join form; EXISTS it is
        transactional_ddl=False,
        lock_rows=True,
        strips_like_python=True,
    )
    quote_format = "`{}`"
    text_type_codes = frozenset({"STRING"})  # the cursor's type codes are BigQuery's type names

    def lineage_namespace(self) -> str | None:
        return "bigquery"  # OpenLineage's namespace for BigQuery datasets

    # ---- spelling ------------------------------------------------------------------------------

    def table_sql(self, table: TableName) -> str:
        if not table.schema:
            raise ValueError(f"a BigQuery table is named dataset.table, got {str(table)!r}")
        return super().table_sql(table)

    def type_sql(self, sql_type: str) -> str:
        decimal = _DECIMAL.fullmatch(sql_type.strip())
        if decimal:
            return f"NUMERIC{(decimal.group(1) or '').replace(' ', '')}"
        return _TYPES.get(sql_type.strip().upper(), sql_type)

    def text_sql(self, length: int | None = None) -> str:
        return "STRING"  # compared exactly: BigQuery's default collation is binary

    def typed(self, column: str, kind: Kind) -> str:
        """``SAFE_CAST``: BigQuery does not promise to filter rows (``_reason IS NULL``) before it
        evaluates the select list, and a rejected row's text would fail a plain ``CAST``. The rules
        have accepted every value of a kept row, so no kept value becomes NULL."""
        target = _CAST_TYPES.get(kind)
        return f"SAFE_CAST({column} AS {target})" if target else column

    def param(self, sql_type: str) -> str:
        return f"CAST({self.placeholder} AS {self.type_sql(sql_type)})"

    def cast_sql(self, expression: str, sql_type: str) -> str:
        return f"CAST({expression} AS {self.type_sql(sql_type)})"

    def growing_key_sql(self, columns: Sequence[str]) -> str:
        # BigQuery's only key is NOT ENFORCED, a hint that guards nothing (and bqemulator cannot parse
        # it): the sync's statements keep one row per key themselves.
        return ""

    def strip_sql(self, expression: str) -> str:
        # TRIM's second argument is a set of characters. (bqemulator fails a REGEXP_REPLACE built
        # from CHR inside an INSERT ... SELECT, so Snowflake's spelling is not proven here.)
        return f"TRIM({expression}, {stripped_chr_sql()})"

    def matches_sql(self, column: str, pattern: str) -> str:
        return f"REGEXP_CONTAINS({column}, r'^({pattern})$')"

    def valid_sql(self, column: str, kind: Kind) -> str:
        check = self.matches_sql(column, str(kind.pattern))
        if kind is Kind.DATE:  # the pattern bounds month and day; the calendar says whether 02-30 is one
            check = f"({check} AND SAFE_CAST({column} AS DATE) IS NOT NULL)"
        return check

    def md5_sql(self, parts: Sequence[str]) -> str:
        # MD5 gives BYTES here; CHR, not an array literal, which bqemulator cannot translate.
        return f"TO_HEX(MD5({' || CHR(31) || '.join(parts)}))"

    # ---- connection and transactions -----------------------------------------------------------

    def connect(self) -> SessionConnection:
        return session_connection_for(self.hook)

    def begin_replace(self, conn: Any, cur: Any) -> None:
        conn.begin()  # after staging: the load job and the stage's DDL ran outside it

    # ---- catalog and bulk path -----------------------------------------------------------------

    def table_columns(self, conn: Any, cur: Any, table: TableName) -> list[str] | None:
        """The table's columns from its metadata (no query job), or ``None`` when it does not exist."""
        from google.api_core.exceptions import NotFound

        self.table_sql(table)  # a table without a dataset fails here, saying why
        try:
            found = conn.client.get_table(f"{conn.project}.{table.schema}.{table.name}")
        except NotFound:
            return None
        if conn.location is None:
            conn.location = found.location
        return [field.name for field in found.schema]

    def stage(
        self, cur: Any, request: LoadRequest, plan: ColumnPlan, reason_sql: str, incoming: IncomingFile
    ) -> Staged:
        from google.cloud import bigquery

        conn: SessionConnection = cur.connection
        incoming.wait_for_download()  # the numbered files are written from the whole file
        dataset = self._stage_dataset(conn, request.table)
        columns = [RECORD_COLUMN, *plan.header]
        schema = [bigquery.SchemaField(RECORD_COLUMN, "INT64")]
        schema += [bigquery.SchemaField(name, "STRING") for name in plan.header]
        stage = f"{dataset}.{STAGE_TABLE}"
        conn.client.create_table(bigquery.Table(stage, schema=schema))
        with tempfile.TemporaryDirectory(prefix="abm_bq_") as folder:
            numbered = write_numbered(request.path, plan.header, Path(folder), log=self.log)
            for path in numbered.paths:
                config = bigquery.LoadJobConfig(
                    source_format="PARQUET", write_disposition="WRITE_APPEND", schema=schema
                )
                with path.open("rb") as handle:
                    job = conn.client.load_table_from_file(
                        handle, stage, job_config=config, location=conn.location
                    )
                job.result()
        # The stage's rows from its metadata, not the jobs' output rows summed: bqemulator reports as
        # a load job's output the table's rows after it, which counts a file's rows again per file.
        loaded = int(conn.client.get_table(stage).num_rows or 0)
        if loaded != numbered.rows:
            raise RuntimeError(
                f"the load jobs staged {loaded} of the {numbered.rows} records of {request.path.name}"
            )
        self.log.info(
            "Staged %d records of %s in %s (%d file(s), columns %s)",
            loaded,
            request.path.name,
            stage,
            len(numbered.paths),
            ", ".join(columns),
        )
        cur.execute(f"ALTER TABLE {STAGE_TABLE} ADD COLUMN _reason STRING")
        if reason_sql:
            cur.execute(f"UPDATE {STAGE_TABLE} SET _reason = {reason_sql} WHERE ({reason_sql}) IS NOT NULL")
        return Staged(rejects=dict(numbered.rejects), order_column=RECORD_COLUMN, first_record=0)

    def _stage_dataset(self, conn: SessionConnection, table: TableName) -> str:
        """Create this load's stage dataset beside ``table``'s and resolve unqualified names there."""
        from google.cloud import bigquery

        location = _locate(conn, str(table.schema))
        dataset = bigquery.Dataset(f"{conn.project}.{STAGE_DATASET_PREFIX}{uuid.uuid4().hex[:16]}")
        dataset.location = location
        dataset.default_table_expiration_ms = STAGE_EXPIRY_MS
        dataset.description = f"The stage of one load into {table}; deleted when the load ends."
        dataset.labels = {"abm_provider": "stage"}
        conn.client.create_dataset(dataset)
        name = f"{dataset.project}.{dataset.dataset_id}"
        conn.drop_at_close(name)
        conn.default_dataset = name
        return name


def _locate(conn: SessionConnection, dataset: str) -> str | None:
    """The location of ``dataset`` (in the connection's project), which the session's jobs then run in.

    Raises naming the dataset when it does not exist: the loader creates tables, not datasets.
    """
    from google.api_core.exceptions import NotFound

    try:
        found = conn.client.get_dataset(f"{conn.project}.{dataset}")
    except NotFound:
        raise ValueError(
            f"the BigQuery dataset {conn.project}.{dataset} does not exist: create it (the loader creates "
            "tables, not datasets)"
        ) from None
    if conn.location is None:
        conn.location = found.location
    return str(found.location) if found.location else conn.location
