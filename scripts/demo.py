"""`make demo`: the main job end to end on embedded defaults, in one command.

Starts the emulator with a fast clock, prepares a throw-away Airflow home on SQLite and a DuckDB
warehouse under `.state/demo`, seeds a target-accounts table, runs the example DAGs with
`airflow dags test` (the event-driven one after its watcher, run here as the triggerer would, has
fired for the next completed execution), prints what landed where, and stops the emulator, also on
failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Mapping
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from abm_emulator.testing import RunningEmulator, start_emulator

ROOT = Path(__file__).resolve().parents[1]
STATE = ROOT / ".state" / "demo"
API_KEY = "demo-key"
WAREHOUSE = STATE / "warehouse.duckdb"
FILES = STATE / "files"
LOGS = STATE / "logs"
TARGET_ACCOUNTS = 2_500
#: The tiered programme: accounts per tier (some of tier 1 qualify for tier 2 as well) and customers.
TIER_SIZES = {"tier_1": 60, "tier_2": 240, "tier_3": 900}
CUSTOMERS = 40


def log(message: str) -> None:
    print(f"[demo {datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


def airflow_env(emulator: RunningEmulator) -> dict[str, str]:
    """Connections and paths through environment variables only: nothing is written to a shared place."""
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(STATE / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            # Downloads and rejects files of the provider's operators go here.
            "AIRFLOW__ABM__STATE_DIR": str(FILES),
            # The emulated clock runs an hour per second: look for the execution every second.
            "ABM_POKE_INTERVAL": "1",
            # A failure should end the demo at once, not after the DAGs' retry delays.
            "ABM_TASK_RETRIES": "0",
            "AIRFLOW_CONN_ABM_DEFAULT": json.dumps(
                {"conn_type": "abm", "host": emulator.base_url, "password": emulator.api_key}
            ),
            "AIRFLOW_CONN_ABM_WAREHOUSE": json.dumps({"conn_type": "duckdb", "host": str(WAREHOUSE)}),
        }
    )
    return env


ORG = "00D000000000001"


def seed_target_accounts(path: Path, count: int) -> None:
    """Accounts marketing wants on the list: mostly valid, some unknown to the CRM, a few malformed."""
    rows: list[tuple[str, str, str | None]] = []
    for i in range(count):
        org: str | None = ORG
        if i % 250 == 7:
            account_id = f"001 BAD {i}"  # whitespace in the id: refused before sending
        elif i % 500 == 11:
            account_id, org = f"001{i:015d}", None  # no CRM org: sent by id alone, the service fills it
        elif i % 100 == 3:
            account_id = f"002{i:015d}"  # well formed but not an account id: reported not found
        else:
            account_id = f"001{i:015d}"
        rows.append((account_id, f"Account {i}, Ltd. \u00e9", org))
    with duckdb.connect(str(path)) as con:
        con.execute(
            "CREATE OR REPLACE TABLE abm_target_accounts "
            "(account_id VARCHAR, account_name VARCHAR, crm_org_id VARCHAR)"
        )
        con.executemany("INSERT INTO abm_target_accounts VALUES (?, ?, ?)", rows)


def change_target_accounts(path: Path, leave: int, join: int) -> None:
    """Marketing's next edit: some accounts leave the target set, new ones join."""
    with duckdb.connect(str(path)) as con:
        con.execute(
            "DELETE FROM abm_target_accounts WHERE account_id IN (SELECT account_id FROM abm_target_accounts "
            "WHERE regexp_full_match(account_id, '001[0-9]{15}') AND crm_org_id IS NOT NULL "
            "ORDER BY account_id LIMIT ?)",
            [leave],
        )
        con.executemany(
            "INSERT INTO abm_target_accounts VALUES (?, ?, ?)",
            [(f"001{900_000 + i:015d}", f"New account {i}", ORG) for i in range(join)],
        )


def tier_rows(promote: int = 0, demote: int = 0) -> list[tuple[str, str, str, str]]:
    """The model's rows: accounts 1.. in tier 1, then tier 2, then tier 3; the first ten of tier 1
    qualify for tier 2 too (they go to tier 1). ``promote`` accounts move from tier 2 to tier 1 and
    ``demote`` from tier 1 to tier 3."""
    tiers: dict[str, list[int]] = {}
    start = 1
    for tier, size in TIER_SIZES.items():
        tiers[tier] = list(range(start, start + size))
        start += size
    tiers["tier_2"] += tiers["tier_1"][:10]
    promoted, demoted = tiers["tier_2"][:promote], tiers["tier_1"][-demote:] if demote else []
    tiers["tier_1"] = [n for n in tiers["tier_1"] if n not in demoted] + promoted
    tiers["tier_2"] = [n for n in tiers["tier_2"] if n not in promoted]
    tiers["tier_3"] += demoted
    return [
        (f"001{500_000 + n:015d}", f"Tiered account {n}", ORG, tier)
        for tier, numbers in tiers.items()
        for n in numbers
    ]


def seed_programme(path: Path, rows: list[tuple[str, str, str, str]], customers: list[int]) -> None:
    """(Re)write the tiers table and the customers table (account numbers of the tiered accounts)."""
    with duckdb.connect(str(path)) as con:
        con.execute(
            "CREATE OR REPLACE TABLE abm_account_tiers "
            "(account_id VARCHAR, account_name VARCHAR, crm_org_id VARCHAR, tier VARCHAR)"
        )
        con.executemany("INSERT INTO abm_account_tiers VALUES (?, ?, ?, ?)", rows)
        con.execute("CREATE OR REPLACE TABLE abm_customers (account_id VARCHAR)")
        con.executemany(
            "INSERT INTO abm_customers VALUES (?)", [(f"001{500_000 + n:015d}",) for n in customers]
        )


def sync_results() -> list[dict[str, int]]:
    """Each sync run's counts, as its last task returned them."""
    return task_results("abm_sync_account_lists", "sync_list")


def task_results(dag_id: str, task_id: str) -> list[Any]:
    """What a task returned in each run, oldest first (read from Airflow's SQLite database)."""
    with closing(sqlite3.connect(STATE / "airflow" / "airflow.db")) as con:
        rows = con.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = 'return_value' "
            "ORDER BY timestamp",
            [dag_id, task_id],
        ).fetchall()
    results = [json.loads(r[0]) if isinstance(r[0], str) else r[0] for r in rows]
    return [json.loads(r) if isinstance(r, str) else r for r in results]


def watch_once(env: Mapping[str, str], after: str, timeout: float) -> dict[str, Any]:
    """Run the event DAG's watcher until it fires: the first execution that completes after ``after``.

    This is what the triggerer does all the time for a DAG scheduled on ``export_asset(...)``; the
    demo has no triggerer running, so it runs the same trigger here, then starts the DAG by hand.
    """
    os.environ.update(env)  # the connection, and the demo's Airflow home, for the trigger's hook
    from abm_provider.triggers.exports import ExecutionCompletedEventTrigger

    trigger = ExecutionCompletedEventTrigger(
        abm_conn_id="abm_default", export_type="TACTIC_PERFORMANCE", poll_interval=1, start_after=after
    )

    async def first_event() -> dict[str, Any]:
        events = trigger.run()
        try:
            event = await asyncio.wait_for(anext(events), timeout)
        finally:
            await events.aclose()
        return dict(event.payload)

    return asyncio.run(first_event())


def run(cmd: list[str], env: Mapping[str, str], log_name: str) -> None:
    """Run one Airflow command with its output in a log file, shown only when it fails."""
    LOGS.mkdir(parents=True, exist_ok=True)
    log_path = LOGS / f"{log_name}.log"
    log("$ " + " ".join(cmd))
    started = time.monotonic()
    with log_path.open("w", encoding="utf-8") as out:
        code = subprocess.run(cmd, env=dict(env), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, check=False)
    if code.returncode != 0:
        sys.stdout.write(log_path.read_text(encoding="utf-8", errors="replace")[-20000:])
        raise SystemExit(
            f"demo: {' '.join(cmd[:4])} failed with exit code {code.returncode}; log: {log_path}"
        )
    log(f"  done in {time.monotonic() - started:.1f} s (log: {log_path})")


def summarize(emulator: RunningEmulator) -> None:
    with duckdb.connect(str(WAREHOUSE), read_only=True) as con:
        per_day = con.execute(
            "SELECT date, COUNT(*) AS rows, SUM(impressions), SUM(clicks), SUM(spend) "
            "FROM abm_tactic_performance GROUP BY date ORDER BY date DESC LIMIT 5"
        ).fetchall()
        total = con.execute("SELECT COUNT(*), COUNT(DISTINCT date) FROM abm_tactic_performance").fetchone()
        ledger = con.execute(
            "SELECT execution_id, rows_loaded, rows_rejected FROM abm_load_ledger "
            "ORDER BY loaded_at DESC LIMIT 1"
        ).fetchone()
        loads = con.execute("SELECT COUNT(*) FROM abm_load_ledger").fetchone()
        synced = sync_results()
        list_id = synced[-1]["list_id"] if synced else ""
        members = con.execute(
            "SELECT list_id, COUNT(*) FROM abm_sync_members WHERE list_id = ? GROUP BY 1", [list_id]
        ).fetchone()
        rejects = con.execute(
            "SELECT reason, COUNT(*) FROM abm_sync_rejects WHERE list_id = ? GROUP BY reason ORDER BY 2 DESC",
            [list_id],
        ).fetchall()
    on_list = len(emulator.members(members[0])) if members else 0
    print()
    print("=" * 72)
    print("ABM demo summary")
    print("=" * 72)
    assert total is not None
    print(f"Warehouse (DuckDB): {WAREHOUSE}")
    print(f"  abm_tactic_performance: {total[0]} rows over {total[1]} days; newest days:")
    for day, rows, impressions, clicks, spend in per_day:
        print(
            f"    {day}  {rows:>6} rows  {impressions:>10} impressions  {clicks:>8} clicks  {spend:>12} spend"
        )
    if ledger:
        print(f"  last load: execution {ledger[0]}, {ledger[1]} rows loaded, {ledger[2]} rejected")
    print(f"  abm_load_ledger: {loads[0] if loads else 0} loads")
    print("Event-driven export (abm_export_on_event, scheduled on the export's Asset):")
    for result in task_results("abm_export_on_event", "load_unloaded"):
        for load in result["executions"]:
            days = load["days"]
            print(
                f"  loaded execution {load['execution_id']}: {load['rows_loaded']} rows, "
                f"replacing {len(days)} days ({days[0] if days else '-'} to {days[-1] if days else '-'}), "
                "the partition keys of the table's Asset event"
            )
    print("Account list sync (abm_sync_account_lists):")
    for number, result in enumerate(synced, start=1):
        print(
            f"  run {number}: planned {result['to_add']} to add and {result['to_remove']} to remove; "
            f"{result['added']} added, {result['duplicates']} duplicate, {result['not_found']} not found, "
            f"{result['rejected']} rejected, {result['removed']} removed, {result['held']} held back"
        )
    print(f"  abm_sync_members: {members[1] if members else 0} accounts; the service's list holds {on_list}")
    print("  abm_sync_rejects (not sent again until the row changes):")
    for reason, count in rejects:
        print(f"    {count:>5}  {textwrap.shorten(reason, 100, placeholder=' ...')}")
    print("Tiered audiences (abm_sync_audiences: three lists, customers excluded):")
    for number, result in enumerate(task_results("abm_sync_audiences", "sync_audiences"), start=1):
        per_list = ", ".join(
            f"{e['audience']} {e['state_count']} (+{e['added']} -{e['removed']})" for e in result["lists"]
        )
        print(f"  run {number}: {per_list}")
        for move in result["moves"]:
            print(f"    moved {move['accounts']:>3} accounts from {move['from']} to {move['to']}")
        excluded = {e["audience"]: e["excluded"] for e in result["lists"] if e["excluded"]}
        print(f"    excluded (customers removed or kept off): {excluded or 'none'}")
    print(f"Downloaded exports and rejects files: {FILES}")
    print(f"Logs of the DAG runs: {LOGS}")
    print(f"Airflow home (SQLite): {STATE / 'airflow'}")
    print("Try:")
    print(
        f"  .venv/bin/python -c \"import duckdb; print(duckdb.connect('{WAREHOUSE}', read_only=True)"
        ".sql('SELECT date, SUM(spend) FROM abm_tactic_performance GROUP BY 1 ORDER BY 1'))\""
    )
    print("=" * 72)


def main() -> int:
    started = time.monotonic()
    shutil.rmtree(STATE, ignore_errors=True)
    STATE.mkdir(parents=True)
    # The emulated day starts just before the job's 05:00 UTC run, and one emulated hour passes per
    # real second, so the first execution fires and completes within seconds of the job's creation.
    clock_start = (datetime.now(UTC) + timedelta(days=1)).replace(hour=4, minute=58, second=0, microsecond=0)
    log("starting the emulator")
    with start_emulator(
        api_keys=[API_KEY],
        clock_speed=3600.0,
        clock_start=clock_start.isoformat(),
        export_size_bytes=2_000_000,
        # Link lifetimes are emulated seconds: at an hour per second the default 900 s is a quarter of
        # a real second. A month of emulated time is about twelve real minutes.
        link_ttl=30 * 24 * 3600,
        data_dir=str(STATE / "emulator"),
    ) as emulator:
        log(f"emulator API at {emulator.base_url}, storage at {emulator.storage_url}")
        env = airflow_env(emulator)
        airflow = str(Path(sys.executable).with_name("airflow"))
        run([airflow, "db", "migrate"], env, "db_migrate")
        seed_target_accounts(WAREHOUSE, TARGET_ACCOUNTS)
        log(f"seeded {TARGET_ACCOUNTS} target accounts into {WAREHOUSE}")
        run([airflow, "dags", "test", "abm_export_to_warehouse"], env, "abm_export_to_warehouse")
        with duckdb.connect(str(WAREHOUSE), read_only=True) as con:
            loaded = con.execute("SELECT MAX(execution_time) FROM abm_load_ledger").fetchone()
        assert loaded is not None and loaded[0] is not None, "the daily DAG recorded no execution time"
        # Skip the emulated hours until just before the job's next 05:00 run, so the watcher waits a
        # second rather than the rest of the emulated day.
        now = datetime.fromisoformat(emulator.clock()["now"])
        fire = now.replace(hour=5, minute=0, second=0, microsecond=0)
        fire += timedelta(days=1) if fire <= now else timedelta()
        emulator.advance(max((fire - now).total_seconds() - 600, 0))
        log("watching for the next completed execution, as the event DAG's Asset watcher does")
        after = loaded[0] + timedelta(seconds=1)  # naive UTC, as the ledger keeps times
        event = watch_once(env, after=f"{after.isoformat()}+00:00", timeout=60)
        log(f"  the watcher fired: execution {event['execution_id']} completed at {event['update_time']}")
        run([airflow, "dags", "test", "abm_export_on_event"], env, "abm_export_on_event")
        run([airflow, "dags", "test", "abm_sync_account_lists"], env, "abm_sync_account_lists")
        change_target_accounts(WAREHOUSE, leave=40, join=25)
        log("40 accounts left the target set and 25 joined; syncing again (only the change is sent)")
        run([airflow, "dags", "test", "abm_sync_account_lists"], env, "abm_sync_account_lists_2")
        first_of_tier_3 = TIER_SIZES["tier_1"] + TIER_SIZES["tier_2"] + 1
        customers = list(range(first_of_tier_3, first_of_tier_3 + CUSTOMERS))
        seed_programme(WAREHOUSE, tier_rows(), customers)
        log(f"seeded the tiers {TIER_SIZES} and {CUSTOMERS} customers (all in tier 3); syncing the programme")
        run([airflow, "dags", "test", "abm_sync_audiences"], env, "abm_sync_audiences")
        seed_programme(WAREHOUSE, tier_rows(promote=8, demote=5), [*customers, 100, 200])
        log(
            "8 accounts promoted to tier 1, 5 demoted to tier 3, 2 new customers; syncing the programme again"
        )
        run([airflow, "dags", "test", "abm_sync_audiences"], env, "abm_sync_audiences_2")
        summarize(emulator)
    log(f"finished in {time.monotonic() - started:.0f} s; the emulator is stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
