"""A user's own source query is run as written, and plans the same in the warehouse as through Python.

The corpus holds what real target-account queries hold: ``LIKE`` patterns, ``?`` and ``%s`` in literals
and comments, PostgreSQL's jsonb ``?`` operator, CTEs, ``UNION``, ``ORDER BY ... LIMIT``, a trailing
semicolon, quoted mixed-case names, a schema-qualified view, and ``parameters=`` as a list and as a
dict in the driver's own style. Each query is planned twice on the same warehouse, by two lists with the
same members: once with the source staged in the warehouse (where the database has the rules in SQL)
and once through the Python path, and the two plans must be equal, on a list's first run and on a list
that has members. Before the fix, the planner rewrote every ``?`` of the user's text and always bound
a parameter list, and psycopg refused the ``%`` of ``LIKE 'Acme%'``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from sync_support import CONN_ID, ORG, context, make_list, open_sync_warehouse

from abm_provider.accounts.sync.staging import Stager
from abm_provider.operators.account_lists import AccountListSyncOperator
from support.warehouses import Warehouse

COLUMNS = ("account_id", "account_name", "crm_org_id", "segment")
ROWS = [
    ("001000000000000001", "Acme Corp", ORG, "enterprise"),
    ("001000000000000002", "Acme Labs", ORG, "smb"),
    ("001000000000000003", "acme lowercase", ORG, "enterprise"),
    ("001000000000000004", "Globex", ORG, "enterprise"),
    ("001000000000000005", "What? Inc", ORG, "smb"),
    ("001000000000000006", "100% Growth", ORG, "smb"),
    ("001000000000000007", "Initech", None, "enterprise"),
    ("001000000000000008", "Umbrella", ORG, "smb"),
    ("not an id!", "Invalid row", ORG, "enterprise"),
    ("001000000000000010", "Hooli %s", ORG, "enterprise"),
]
#: The accounts the lists that have members start with: some the queries keep, some they leave.
MEMBERS = "SELECT account_id, account_name, crm_org_id FROM {t} WHERE segment = 'enterprise'"
PICK = "SELECT account_id, account_name, crm_org_id FROM {t}"


@dataclass(frozen=True)
class Query:
    """One corpus entry: SQL with ``{t}`` (the table), ``{v}`` (a schema-qualified view), ``{q}`` (the
    identifier quote) and ``{m}`` / ``{name}`` (the driver's markers, positional and named)."""

    name: str
    sql: str
    parameters: Any = None
    dialects: tuple[str, ...] = ("duckdb", "postgres", "mariadb")
    column_map: Mapping[str, str] = field(
        default_factory=lambda: {"id": "account_id", "name": "account_name", "crmOrgId": "crm_org_id"}
    )


CORPUS = [
    Query("like", f"{PICK} WHERE account_name LIKE 'Acme%'"),
    Query("ilike", f"{PICK} WHERE account_name ILIKE 'acme%'", dialects=("duckdb", "postgres")),
    Query(
        "marks in literals",
        f"{PICK} WHERE account_name NOT IN ('what?', '%s', '%(x)s', '?') AND account_name NOT LIKE '%?%'",
    ),
    Query(
        "marks in comments",
        "-- which ones? the 100% that matter, %s of them\n"
        f"{PICK} /* a ? and a %s and a %(x)s */ WHERE account_id IS NOT NULL -- really?\n",
    ),
    Query(
        "jsonb ? operator",
        "SELECT account_id, account_name, crm_org_id FROM (SELECT *, jsonb_build_object(segment, true) "
        "AS attrs FROM {t}) a WHERE attrs ? 'enterprise'",
        dialects=("postgres",),
    ),
    Query(
        "cte, union, order by limit, semicolon",
        "-- the enterprise accounts and two more\n"
        f"WITH big AS ({PICK} WHERE segment = 'enterprise'),\n"
        f"     small AS ({PICK} WHERE segment = 'smb')\n"
        "SELECT * FROM big\nUNION\n"
        "SELECT * FROM (SELECT * FROM small ORDER BY account_id DESC LIMIT 2) s\n"
        "ORDER BY account_id LIMIT 6;\n",
    ),
    Query(
        "quoted mixed-case columns",
        "SELECT account_id AS {q}AccountId{q}, account_name AS {q}Account Name{q}, "
        "crm_org_id AS {q}CrmOrg{q} FROM {t} WHERE account_name LIKE '%o%'",
        column_map={"id": "AccountId", "name": "Account Name", "crmOrgId": "CrmOrg"},
    ),
    Query(
        "a repeated key, the query's order deciding which row counts",
        "SELECT account_id, account_name, crm_org_id FROM (\n"
        "  SELECT account_id, account_name, crm_org_id, 1 AS pos FROM {t}\n"
        "  UNION ALL SELECT account_id, 'Acme renamed', crm_org_id, 0 AS pos FROM {t}\n"
        "  WHERE account_id = '001000000000000001'\n"
        ") x ORDER BY pos, account_id",
    ),
    Query("schema-qualified view", "SELECT * FROM {v} WHERE account_name <> 'Globex';"),
    Query(
        "parameters as a list", f"{PICK} WHERE account_name LIKE {{m}} AND segment = {{m}}", ["%e%", "smb"]
    ),
    Query(
        "parameters as a dict",
        f"{PICK} WHERE account_name LIKE {{name}} OR account_id = {{id}}",
        {"name": "Acme%", "id": "001000000000000008"},
    ),
]


def _driver_sql(query: Query, warehouse: Warehouse) -> str:
    """The query as a user of this warehouse's driver writes it."""
    duckdb = warehouse.kind == "duckdb"
    view = "main.corpus_view" if duckdb else warehouse.name("corpus_view")
    return query.sql.format(
        t=warehouse.name("corpus"),
        v=view,
        q="`" if warehouse.kind == "mariadb" else '"',
        m="?" if duckdb else "%s",
        name="$name" if duckdb else "%(name)s",
        id="$id" if duckdb else "%(id)s",
    )


@dataclass
class Lists:
    """The corpus's warehouse and its four lists: two empty, two with the same members."""

    warehouse: Warehouse
    empty: tuple[str, str]
    listed: tuple[str, str]


@pytest.fixture(scope="module", params=["duckdb", "postgres", "mariadb"])
def lists(
    request: pytest.FixtureRequest, emulator_process: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Lists]:
    """One warehouse per dialect for the whole corpus, with the corpus table, its view and four lists."""
    with pytest.MonkeyPatch.context() as patch:
        conn = {"conn_type": "abm", "host": emulator_process.base_url, "password": emulator_process.api_key}
        patch.setenv("AIRFLOW_CONN_ABM_DEFAULT", json.dumps(conn))
        with open_sync_warehouse(request.param, tmp_path_factory.mktemp("corpus"), patch) as warehouse:
            warehouse.replace_table("corpus", COLUMNS, ROWS)
            warehouse.execute(
                f"CREATE VIEW {warehouse.name('corpus_view')} AS "
                f"SELECT account_id, account_name, crm_org_id FROM {warehouse.name('corpus')}"
            )
            suffix = request.param
            empty = (
                make_list(f"Corpus empty in SQL {suffix}"),
                make_list(f"Corpus empty in Python {suffix}"),
            )
            listed = (make_list(f"Corpus in SQL {suffix}"), make_list(f"Corpus in Python {suffix}"))
            for list_id in listed:
                _sync(warehouse, list_id, MEMBERS.format(t=warehouse.name("corpus")), dry_run=False)
            yield Lists(warehouse, empty, listed)


def _sync(
    warehouse: Warehouse,
    list_id: str,
    sql: str,
    *,
    dry_run: bool = True,
    parameters: Any = None,
    column_map: Mapping[str, str] | None = None,
    run_id: str = "base",
) -> dict[str, Any]:
    operator = AccountListSyncOperator(
        task_id="sync",
        list_id=list_id,
        sql=sql,
        parameters=parameters,
        sql_conn_id=CONN_ID,
        column_map=column_map or {"id": "account_id", "name": "account_name", "crmOrgId": "crm_org_id"},
        state_schema=warehouse.schema,
        max_rejected=None,
        max_removals=None,
        dry_run=dry_run,
        max_attempts=1,
    )
    result: dict[str, Any] = operator.execute(context(run_id))
    return result


def _plan(warehouse: Warehouse, list_id: str, run_id: str) -> list[tuple[Any, ...]]:
    """A run's plan, in order, and the rows it rejected."""
    planned = warehouse.query(
        "SELECT action, seq, account_id, crm_org_id, crm_type, account_name, row_hash FROM "
        f"{warehouse.name('abm_sync_plan')} WHERE list_id = %s AND run_id = %s ORDER BY action, seq",
        [list_id, run_id],
    )
    rejected = warehouse.query(
        f"SELECT 'reject', account_id, crm_org_id, reason FROM {warehouse.name('abm_sync_log')} "
        "WHERE list_id = %s AND run_id = %s AND outcome = 'invalid' ORDER BY account_id",
        [list_id, run_id],
    )
    return planned + rejected


def _plan_both_ways(
    lists: Lists,
    pair: Sequence[str],
    query: Query,
    run_id: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[list[Any], list[Any], dict[str, Any]]:
    warehouse = lists.warehouse
    sql = _driver_sql(query, warehouse)
    capsys.readouterr()
    in_sql = _sync(
        warehouse, pair[0], sql, parameters=query.parameters, column_map=query.column_map, run_id=run_id
    )
    log = capsys.readouterr().out  # Airflow's task logging writes there, not through caplog
    with monkeypatch.context() as patch:
        patch.setattr(Stager, "_warehouse_query", lambda self, source: None)
        in_python = _sync(
            warehouse, pair[1], sql, parameters=query.parameters, column_map=query.column_map, run_id=run_id
        )
    for counts in (in_sql, in_python):
        for key in ("list_id", "run_id"):
            counts.pop(key)
    assert in_sql == in_python, f"{query.name}: the summaries differ"
    planned_in_sql = "staged in the warehouse" in log
    return (
        _plan(warehouse, pair[0], run_id),
        _plan(warehouse, pair[1], run_id),
        {"sql": planned_in_sql, "log": log},
    )


@pytest.mark.parametrize("query", CORPUS, ids=[q.name for q in CORPUS])
def test_a_source_query_runs_as_written_and_plans_alike_in_the_warehouse_and_in_python(
    lists: Lists, query: Query, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    warehouse = lists.warehouse
    if warehouse.kind not in query.dialects:
        pytest.skip(f"{warehouse.kind} has no {query.name}")
    from abm_provider.accounts.sync.database import StateDatabase
    from abm_provider.warehouse.connections import sql_hook

    rules_in_sql = StateDatabase(sql_hook(CONN_ID, "sql_conn_id")).dialect.has_rules_in_sql
    run_id = f"corpus {query.name}"
    for pair, what in ((lists.empty, "a first run"), (lists.listed, "a list with members")):
        in_sql, in_python, seen = _plan_both_ways(lists, pair, query, run_id, monkeypatch, capsys)
        assert seen["sql"] == rules_in_sql, f"{query.name}, {what}: not planned where expected\n{seen['log']}"
        assert in_sql == in_python, f"{query.name}, {what}: the plans differ"
        assert any(row[0] == "add" for row in in_sql) or what == "a list with members"


def test_each_query_adds_what_it_selects(
    lists: Lists, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Equal plans could both be wrong: on a first run, each query's plan adds exactly what it selects."""
    warehouse = lists.warehouse
    # MariaDB's default collation compares without case: its LIKE 'Acme%' takes "acme lowercase" too.
    acme = {"001000000000000001", "001000000000000002"}
    if warehouse.kind == "mariadb":
        acme.add("001000000000000003")
    expected = {
        "like": acme,
        "marks in literals": {r[0] for r in ROWS if r[0] != "not an id!" and "?" not in r[1]},
        "jsonb ? operator": {r[0] for r in ROWS if r[3] == "enterprise" and r[0] != "not an id!"},
        "parameters as a dict": acme | {"001000000000000008"},
        "a repeated key, the query's order deciding which row counts": {r[0] for r in ROWS} - {"not an id!"},
    }
    for query in CORPUS:
        if query.name not in expected or warehouse.kind not in query.dialects:
            continue
        in_sql, _, _ = _plan_both_ways(
            lists, lists.empty, query, f"expected {query.name}", monkeypatch, capsys
        )
        assert {row[2] for row in in_sql if row[0] == "add"} == expected[query.name], query.name
        if query.name.startswith("a repeated key"):
            assert ("001000000000000001", "Acme renamed") in {(row[2], row[5]) for row in in_sql}


def test_a_query_the_warehouse_cannot_wrap_is_planned_in_python_and_says_why(
    lists: Lists, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A query that runs as written but not as a subquery is planned in Python, never failed.

    DuckDB runs two statements and answers the last, but a subquery holds one; PostgreSQL and MariaDB
    run a column named twice, but a table cannot have it.
    """
    warehouse = lists.warehouse
    smb = f"{PICK} WHERE segment = 'smb'"
    if warehouse.kind == "duckdb":
        query, why = Query("two statements", f"SELECT 42; {smb}"), "the source query is not one SQL statement"
    else:
        twice = smb.replace("crm_org_id", "crm_org_id, account_name", 1)
        query, why = (
            Query("a column twice", twice),
            "the warehouse could not copy the source query's rows",
        )
    in_sql, in_python, seen = _plan_both_ways(lists, lists.empty, query, "unwrapped", monkeypatch, capsys)
    assert in_sql == in_python
    assert {row[2] for row in in_sql if row[0] == "add"} == {r[0] for r in ROWS if r[3] == "smb"}
    assert not seen["sql"]
    assert f"Planning in Python: {why}" in seen["log"]
