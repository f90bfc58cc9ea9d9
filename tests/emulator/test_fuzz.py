"""Property-based fuzzing of the API origin from its own OpenAPI document: no request gets a 5xx.

schemathesis turns ``/openapi.json`` into hypothesis strategies that produce valid requests
(positive mode) and requests that break the schema (negative mode: wrong types, missing fields,
odd query values) for every operation. The emulator must answer each with a documented 2xx/4xx and
the documented error body, never a server error. The schema-level strategy is driven by hypothesis
directly (schemathesis' pytest plugin does not support the installed pytest 9), and kept to a few
hundred examples so the file runs in seconds.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

EXAMPLES_PER_MODE = 150


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_request_gets_a_server_error(
    emulator: Any, mode: GenerationMode, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = schemathesis.openapi.from_url(emulator.base_url + "/openapi.json")
    session = requests.Session()
    statuses: Counter[int] = Counter()
    failures: list[str] = []

    @settings(
        max_examples=EXAMPLES_PER_MODE, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(case=schema.as_strategy(mode))
    def run(case: Any) -> None:
        response = case.call(
            base_url=emulator.base_url,
            session=session,
            headers={"Authorization": f"Bearer {emulator.api_key}"},
            timeout=30,
        )
        statuses[response.status_code] += 1
        problem = None
        if response.status_code >= 500:
            problem = "server error"
        elif "x-request-id" not in response.headers:
            problem = "no x-request-id"
        elif response.status_code >= 400:
            try:
                error = response.json()["error"]
                if error["code"] != response.status_code or not error["status"]:
                    problem = "error body code/status mismatch"
            except (ValueError, KeyError, TypeError):
                problem = "not the documented error body"
        if problem:
            failures.append(
                f"{problem}: {case.method} {case.formatted_path} -> {response.status_code} "
                f"{response.text[:300]}"
            )
        assert problem is None, failures[-1]

    try:
        run()
    finally:
        session.close()
        with capsys.disabled():
            print(
                f"\nschemathesis {mode.value}: {sum(statuses.values())} requests sent, "
                f"statuses {dict(sorted(statuses.items()))}"
            )
    assert sum(statuses.values()) >= EXAMPLES_PER_MODE // 2
    assert not failures, failures[:3]
