"""`make bench`'s ``audiences`` section: ``AccountAudienceSyncOperator`` over N accounts in three tiers.

A section of ``scripts/bench.py`` (registered there; its case ``account_audience_sync`` is in
``scripts/bench_cases.py``), kept apart so that ``bench.py`` does not grow. On DuckDB (a file of its
own) and on PostgreSQL (the bench database), per repetition:

- a source table of N accounts over three tiers by account number (``tier_1`` the first 10%,
  ``tier_2`` the next 30%, ``tier_3`` the rest), and a customers table of the exclusions: every
  k-th account from the first of ``tier_2`` on, so the programme holds N minus the exclusions;
- the bare request loop of the lists section posting those accounts to one new list;
- the first run into three new empty lists (every account sent), then 1% of N moved between tiers
  (half promoted from ``tier_2`` to ``tier_1``, half demoted from ``tier_1`` to ``tier_3``, none of
  them customers), then the second run, in a process of its own, sending only the moves: each moved
  account removed from its old list and added to its new one.

Each run must plan and send exactly that, or its figures mean nothing and the section fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import bench_cases
from bench_report import Check, Row
from bench_support import (
    ABM_CONN,
    PG_DSN,
    POSTGRES_CONN,
    account_id_sql,
    ensure_pg_database,
    human_count,
    log,
    median_figures,
    membership_requests,
    mib,
    psql,
    repeat_first_and_second,
)

AUDIENCE_DUCKDB_CONN = "bench_audience_duckdb"
#: The tiers in priority order, the highest first, and the share of the accounts each starts with.
TIERS = (("tier_1", 0.10), ("tier_2", 0.30), ("tier_3", 0.60))
#: The part of the accounts that moves between tiers before the second run.
AUDIENCE_MOVED = 0.01
AUDIENCE_STATE_TABLES = tuple(
    f"{bench_cases.AUDIENCE_STATE_PREFIX}{name}"
    for name in ("members", "plan", "rejects", "runs", "log", "locks", "moves")
)
# The targets: run 1 against the bare loop posting the same accounts, run 2 against run 1, peak RSS.
FIRST_VS_BARE = 1.5
SECOND_VS_FIRST = 0.1
PEAK_RSS_MIB = 300


def audience_figures(run: dict[str, Any]) -> dict[str, float]:
    seconds = max(run["seconds"], 1e-9)
    figures = {
        "seconds": run["seconds"],
        "peak_rss_mib": mib(run["peak_rss_kib"]),
        "rows_per_s": run["accounts"] / seconds,
        "cpu_seconds": run["cpu_seconds_total"],
        "requests": float(run["requests"]),
        "accounts_sent": float(run["accounts_sent"]),
    }
    for key in ("source_rows", "to_add", "to_remove", "added", "removed", "moved", "excluded", "not_found"):
        figures[key] = float(run[key])
    for key in ("plan_seconds", "send_seconds"):
        if key in run:
            figures[key] = run[key]
    return figures


def at_most(name: str, value: float, limit: float, unit: str, shown: str) -> Check:
    """A check of ``value`` against the target ``<= limit``, ``shown`` as the figure."""
    return Check("audiences", name, shown, f"<= {limit:g}{unit}", value <= limit)


class AudienceSection:
    """AccountAudienceSyncOperator over N accounts in three tiers, customers excluded, into three empty
    lists, then after 1% of the accounts moved between tiers; beside the bare request loop."""

    def __init__(self, bench: Any) -> None:
        self.bench = bench
        self.duckdb_path = str(bench.work / "audiences.duckdb")
        bench.set_conn(AUDIENCE_DUCKDB_CONN, {"conn_type": "duckdb", "host": self.duckdb_path})
        self.count = count = bench.sizes.audience_rows
        self.excluded = bench.sizes.audience_exclusions
        # Accounts [0, tier_2) are tier_1, [tier_2, tier_3) tier_2, [tier_3, count) tier_3.
        self.tier_2 = round(count * TIERS[0][1])
        self.tier_3 = self.tier_2 + round(count * TIERS[1][1])
        # Customers: every ``step``-th account from the first of tier_2 on.
        self.step = (count - self.tier_2) // max(self.excluded, 1)
        # Half of the moved accounts are promoted, half demoted: every ``demote_step``-th of tier_1, and
        # every ``promote_step``-th of tier_2 from its second account on (a multiple of ``step``, so
        # never a customer).
        self.half = max(round(count * AUDIENCE_MOVED / 2), 1)
        self.moved = 2 * self.half
        self.demote_step = max(self.tier_2 // self.half, 1)
        self.promote_step = self.step * max((self.tier_3 - self.tier_2 - 1) // (self.half * self.step), 1)
        last_promoted = self.tier_2 + 1 + (self.half - 1) * self.promote_step
        if self.excluded < 1 or self.step < 2 or self.half > self.tier_2 or last_promoted >= self.tier_3:
            raise ValueError(
                f"{self.excluded:,} exclusions and {self.moved:,} moves do not fit {count:,} accounts: "
                "use fewer --audience-exclusions or more --audience-rows"
            )

    # ---- the warehouse ----------------------------------------------------------------------------

    def sql(self, warehouse: str, *statements: str) -> None:
        if warehouse == "postgres":
            psql(PG_DSN, *statements)
            return
        import duckdb

        with duckdb.connect(self.duckdb_path) as con:
            for statement in statements:
                con.execute(statement)

    def clean(self, warehouse: str) -> None:
        """No source, no customers and no state tables: a repetition starts from nothing."""
        if warehouse == "postgres":
            tables = (bench_cases.AUDIENCE_TABLE, bench_cases.AUDIENCE_CUSTOMERS, *AUDIENCE_STATE_TABLES)
            psql(PG_DSN, f"DROP TABLE IF EXISTS {', '.join(tables)}")
        else:
            Path(self.duckdb_path).unlink(missing_ok=True)
            Path(self.duckdb_path + ".wal").unlink(missing_ok=True)

    def seed(self, warehouse: str) -> None:
        """The accounts with their tiers, and the customers among them."""
        self.clean(warehouse)
        tier = (
            f"CASE WHEN i < {self.tier_2} THEN 'tier_1' WHEN i < {self.tier_3} THEN 'tier_2' "
            "ELSE 'tier_3' END"
        )
        self.sql(
            warehouse,
            f"CREATE TABLE {bench_cases.AUDIENCE_TABLE} AS SELECT {account_id_sql('i')} AS account_id, "
            f"'Account ' || CAST(i AS VARCHAR) AS account_name, '{bench_cases.ORG_ID}' AS crm_org_id, "
            f"{tier} AS tier FROM generate_series(0, {self.count - 1}) AS t(i)",
            f"CREATE TABLE {bench_cases.AUDIENCE_CUSTOMERS} AS SELECT "
            f"{account_id_sql(f'({self.tier_2} + i * {self.step})')} AS account_id "
            f"FROM generate_series(0, {self.excluded - 1}) AS t(i)",
        )

    def change(self, warehouse: str) -> None:
        """Promote ``half`` accounts of tier_2 to tier_1 and demote ``half`` of tier_1 to tier_3."""
        table = bench_cases.AUDIENCE_TABLE

        def accounts(first: int, step: int) -> str:
            number = f"({first} + i * {step})"
            return f"SELECT {account_id_sql(number)} FROM generate_series(0, {self.half - 1}) AS t(i)"

        self.sql(
            warehouse,
            f"UPDATE {table} SET tier = 'tier_1' "
            f"WHERE account_id IN ({accounts(self.tier_2 + 1, self.promote_step)})",
            f"UPDATE {table} SET tier = 'tier_3' WHERE account_id IN ({accounts(0, self.demote_step)})",
        )

    # ---- the runs ---------------------------------------------------------------------------------

    def new_lists(self, emulator: Any, names: list[str]) -> list[str]:
        """Forget earlier runs' members (the emulator keeps them in memory), then new empty lists."""
        from abm_provider.hooks.abm import AbmHook

        emulator.reset()
        hook = AbmHook(ABM_CONN)
        folder = hook.ensure_folder("Bench")
        ids = [str(hook.ensure_list(name, folder["folderId"])["listId"]) for name in names]
        hook.close()
        return ids

    def sync(self, emulator: Any, warehouse: str, audiences: dict[str, str], run_id: str) -> dict[str, Any]:
        """One programme run in its own process, with the add and remove requests the emulator saw."""
        emulator.admin("DELETE", "/_admin/requests")
        params = {
            "audiences": audiences,
            "run_id": run_id,
            "conn_id": AUDIENCE_DUCKDB_CONN if warehouse == "duckdb" else POSTGRES_CONN,
            "max_in_flight": 2,
        }
        result = self.bench.run_case("account_audience_sync", params)
        result |= membership_requests(emulator)
        result["accounts_sent"] = result["to_add"] + result["to_remove"]
        result["accounts"] = self.count
        return result

    def bare(self, emulator: Any, warehouse: str) -> dict[str, Any]:
        """The bare request loop (the lists section's) posting the programme's accounts to one list."""
        source, customers = bench_cases.AUDIENCE_TABLE, bench_cases.AUDIENCE_CUSTOMERS
        params = {
            "list_id": self.new_lists(emulator, ["Bench audiences bare"])[0],
            "sql": f"SELECT account_id, account_name, crm_org_id FROM {source} WHERE account_id NOT IN "
            f"(SELECT account_id FROM {customers})",
            "duckdb_path": self.duckdb_path,
            "pg_dsn": PG_DSN if warehouse == "postgres" else None,
            "base_url": emulator.base_url,
            "api_key": emulator.api_key,
        }
        result = self.bench.run_case("bare_list_sync", params)
        if result["added"] != self.count - self.excluded:
            raise RuntimeError(
                f"the bare loop added {result['added']} of {self.count - self.excluded} accounts"
            )
        return result

    def expect(self, run: dict[str, Any], which: str, add: int, moved: int) -> None:
        """The runs must have planned and sent exactly the change, or their figures mean nothing."""
        names = ("to_add", "to_remove", "added", "removed", "moved", "state_count")
        got = tuple(run[name] for name in names)
        want = (add, moved, add, moved, moved, self.count - self.excluded)
        if got != want:
            raise RuntimeError(
                f"audience sync {which} run: {', '.join(names)} = {got}, expected {want} "
                f"(moves {run.get('move_counts')})"
            )

    def first_and_second(self, emulator: Any, warehouse: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """On the seeded source: three new lists, the first run, 1% moved between tiers, the second."""
        names = [name for name, _ in TIERS]
        lists = self.new_lists(emulator, [f"Bench audience {n}" for n in names])
        audiences = dict(zip(names, lists, strict=True))
        first = self.sync(emulator, warehouse, audiences, "bench_audiences_1")
        self.expect(first, "first", self.count - self.excluded, 0)
        self.change(warehouse)
        second = self.sync(emulator, warehouse, audiences, "bench_audiences_2")
        self.expect(second, "second", self.moved, self.moved)
        return first, second

    def run(self) -> None:
        bench, repeats = self.bench, self.bench.args.audience_runs
        ensure_pg_database()
        log(
            f"audiences: {self.count:,} accounts in 3 tiers, {self.excluded:,} excluded, then "
            f"{self.moved:,} moved between tiers, {repeats} runs each"
        )
        repeat_first_and_second(bench, self, repeats)

    # ---- the report -------------------------------------------------------------------------------

    def report(self, label: str, runs: dict[str, list[dict[str, Any]]]) -> None:
        bench, count = self.bench, self.count
        first = median_figures(runs["first"], audience_figures)
        second = median_figures(runs["second"], audience_figures)
        complete = all(r["requests_complete"] for r in runs["first"] + runs["second"])
        accounts = f"{count:,} accounts, {self.excluded:,} excluded"
        moved = f"{accounts}, {self.moved:,} moved"
        for which, size, fig, raw in (
            ("run 1, empty lists", accounts, first, runs["first"]),
            (f"run 2, {AUDIENCE_MOVED:.0%} moved", moved, second, runs["second"]),
        ):
            requests = f"{fig['requests']:,.0f}" if complete else f">= {fig['requests']:,.0f}"
            moves = "; ".join(f"{k} {v:,}" for k, v in raw[-1]["move_counts"].items())
            notes = (
                f"to_add {fig['to_add']:,.0f}, to_remove {fig['to_remove']:,.0f}; moved {fig['moved']:,.0f}"
                f"{f' ({moves})' if moves else ''}; {fig['accounts_sent']:,.0f} accounts in {requests} "
                "requests"
            )
            if "plan_seconds" in fig and "send_seconds" in fig:
                notes = f"plan {fig['plan_seconds']:.1f} s + send {fig['send_seconds']:.1f} s; {notes}"
            bench.rows.append(
                Row(
                    "audiences",
                    f"AccountAudienceSyncOperator -> {label}, 3 tiers, {which}",
                    size,
                    f"{human_count(fig['rows_per_s'])} accounts/s",
                    f"{fig['peak_rss_mib']:.0f} MiB",
                    f"{fig['seconds']:.1f} s",
                    notes,
                    fig,
                    raw,
                )
            )
        bare = median_figures(runs["bare"], lambda r: {"seconds": r["seconds"]})
        ratio = first["seconds"] / bare["seconds"]
        bench.checks.append(
            at_most(
                f"{label}: run 1 / bare request loop time",
                ratio,
                FIRST_VS_BARE,
                "x",
                f"{ratio:.2f}x ({first['seconds']:.1f} s vs {bare['seconds']:.1f} s posting the same "
                f"{count - self.excluded:,} accounts)",
            )
        )
        ratio = second["seconds"] / first["seconds"]
        bench.checks.append(
            at_most(
                f"{label}: run 2 / run 1 time",
                ratio,
                SECOND_VS_FIRST,
                "x",
                f"{ratio:.3f}x ({second['seconds']:.1f} s vs {first['seconds']:.1f} s)",
            )
        )
        for which, fig in (("run 1", first), ("run 2", second)):
            peak = fig["peak_rss_mib"]
            bench.checks.append(
                at_most(f"{label}: {which} peak RSS", peak, PEAK_RSS_MIB, " MiB", f"{peak:.0f} MiB")
            )
