"""Load: many deferred sensors in one triggerer loop, and many add-accounts tasks on one list at once.

The triggerer runs every deferred task's trigger as a coroutine in one event loop, so a trigger that
blocks, or a hook that shares state between triggers, shows up only when many run together. Parallel
add-accounts tasks against one list must not lose an account to an interleaving or a retried request.
Figures are printed (run with ``-s``); nothing here asserts on time.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

EXPORT_TYPES = ("TACTIC_PERFORMANCE", "DISPLAY_TACTIC_ACCOUNT_PERFORMANCE")
ACCOUNTS_PER_KEY = 25  # x 2 export types = 50 sensors, each waiting for its own execution
CRM_ORG = "00D000000000001"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def many_accounts() -> Iterator[Any]:
    """An emulator with 25 customer accounts (one key each): 50 (account, export type) pairs."""
    from abm_emulator.testing import start_emulator

    keys = [f"load-key-{i:02d}" for i in range(ACCOUNTS_PER_KEY)]
    with start_emulator(api_keys=keys) as running:
        yield running


def _connections(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """One Airflow connection per key, as 25 customers' DAGs would each have their own."""
    conn_ids = []
    for index, key in enumerate(emulator.api_keys):
        conn_id = f"abm_load_{index:02d}"
        conn = {"conn_type": "abm", "host": emulator.base_url, "password": key}
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
        conn_ids.append(conn_id)
    return conn_ids


async def test_fifty_deferred_sensors_in_one_event_loop_all_complete(
    many_accounts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from abm_provider.hooks.abm import AbmHook
    from abm_provider.triggers.exports import ExecutionCompleteTrigger

    emulator = many_accounts
    emulator.reset()
    conn_ids = _connections(emulator, monkeypatch)
    pairs = [
        (conn_id, key, t)
        for conn_id, key in zip(conn_ids, emulator.api_keys, strict=True)
        for t in EXPORT_TYPES
    ]
    for conn_id in conn_ids:
        hook = AbmHook(conn_id)
        for export_type in EXPORT_TYPES:
            hook.create_export_job(export_type, "0 5 1 * *")
        hook.close()
    # Executions older than a sensor's cut-off must not satisfy it.
    for _, key, export_type in pairs[::5]:
        emulator.fire(export_type, api_key=key, size_bytes=1_000)
    await asyncio.sleep(0.05)
    cut_off = emulator.clock()["now"]
    await asyncio.sleep(0.05)

    triggers = [
        ExecutionCompleteTrigger(
            abm_conn_id=conn_id,
            export_type=export_type,
            updated_after=cut_off,
            poll_interval=0.5,
            deadline=time.time() + 120,
            retry_max_wait=1,
        )
        for conn_id, _, export_type in pairs
    ]
    # A round trip through serialize() is what the triggerer does with each deferred task's trigger.
    triggers = [ExecutionCompleteTrigger(**t.serialize()[1]) for t in triggers]

    async def first_event(trigger: ExecutionCompleteTrigger) -> tuple[list[dict[str, Any]], float]:
        events = [event.payload async for event in trigger.run()]
        return events, time.monotonic()

    started = time.monotonic()
    running = [asyncio.ensure_future(first_event(t)) for t in triggers]
    await asyncio.sleep(1.0)  # every trigger has polled and found nothing new yet
    assert not any(task.done() for task in running)
    # Fired together, not one after another: fifty triggers polling twice a second keep the emulator
    # busy, and each fire queued behind their polls would add its wait to the test's. Staggered all
    # the same: some run for a while before completing, so polls see PENDING/RUNNING first.
    executions = await asyncio.gather(
        *(
            asyncio.to_thread(
                emulator.fire, export_type, api_key=key, size_bytes=1_000, running_seconds=index % 4
            )
            for index, (_, key, export_type) in enumerate(pairs)
        )
    )
    fired = {(key, export_type): e["id"] for (_, key, export_type), e in zip(pairs, executions, strict=True)}
    results = await asyncio.wait_for(asyncio.gather(*running), timeout=150)
    elapsed = time.monotonic() - started

    for (_, key, export_type), (events, _) in zip(pairs, results, strict=True):
        assert len(events) == 1, events
        assert events[0]["status"] == "success", events[0]
        assert events[0]["execution"]["id"] == fired[(key, export_type)]
        assert events[0]["execution"]["state"] == "COMPLETE"
    polls = [e for e in emulator.requests_seen() if e["path"].endswith("/executions")]
    finished = sorted(done - started for _, done in results)
    print(
        f"\n{len(triggers)} triggers in one event loop: all complete in {elapsed:.1f} s "
        f"(first {finished[0]:.1f} s, last {finished[-1]:.1f} s), {len(polls)} executions requests"
    )


def _accounts(start: int, count: int) -> list[dict[str, str]]:
    return [
        {"id": f"001{i:012d}", "name": f"Account {i}", "crmOrgId": CRM_ORG}
        for i in range(start, start + count)
    ]


def test_twenty_parallel_add_tasks_lose_no_account(
    emulator: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Overlapping sources, small batches, and the service failing a fifth of the requests meanwhile."""
    from abm_provider.hooks.abm import AbmHook
    from abm_provider.operators.account_lists import AddAccountsToListOperator

    conn = {"conn_type": "abm", "host": emulator.base_url, "password": emulator.api_key}
    monkeypatch.setenv("AIRFLOW_CONN_ABM_DEFAULT", json.dumps(conn))
    hook = AbmHook()
    folder = hook.create_folder("Load")
    list_id = hook.create_account_list("Everyone", folder["folderId"])["listId"]
    hook.close()
    # Each task's 120 accounts overlap the next task's by half.
    sources = [_accounts(1 + 60 * task, 120) for task in range(20)]
    union = {a["id"] for source in sources for a in source}
    add_path = f"/accountLists/v2/accountLists/{list_id}/accounts/add"
    emulator.inject_fault(
        method="POST", path=add_path, kind="status", status=503, when="after", probability=0.1, seed=7
    )
    emulator.inject_fault(method="POST", path=add_path, kind="status", status=429, probability=0.1, seed=11)
    emulator.admin("DELETE", "/_admin/requests")

    def run(task: int) -> dict[str, Any]:
        operator = AddAccountsToListOperator(
            task_id=f"add_{task}",
            list_id=list_id,
            accounts=sources[task],
            batch_size=25,
            rejects_path=str(tmp_path / f"rejects_{task}.csv"),
            max_attempts=10,
            retry_max_wait=0.5,
        )
        ti = SimpleNamespace(dag_id="abm_load", task_id=f"add_{task}", run_id="manual__load")
        context: Any = {"run_id": "manual__load", "ti": ti}
        return operator.execute(context)

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=20) as pool:
        summaries = list(pool.map(run, range(20)))
    elapsed = time.monotonic() - started

    members = emulator.members(list_id)
    assert {m["id"] for m in members} == union
    assert len(members) == len(union), "no account is on the list twice"
    for task, summary in enumerate(summaries):
        assert summary["sent"] == len(sources[task]) and summary["not_found"] == 0
        assert summary["added"] + summary["duplicates"] == len(sources[task])
    seen = [e for e in emulator.requests_seen() if e["path"] == add_path]
    faulted = [e for e in seen if e["status"] in (429, 503)]
    assert faulted, "the injected failures fired"
    print(
        f"\n20 parallel add tasks: {len(union)} distinct accounts, all on the list, in {elapsed:.1f} s; "
        f"{len(seen)} add requests of which {len(faulted)} answered 429/503"
    )
