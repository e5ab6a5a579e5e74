"""The request step's shared cases (tests/data/request_cases.json) through the Python client.

The same file runs through the JVM's Requester (RequesterTests.test90SharedCases, in tests/test_java_junit.py):
one list of behaviours (retries, Retry-After, 429/5xx, the deadline, error kinds) that both clients must have.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from connector.client import VllmClient
from tests.http_support import http, raw_server

CASES = json.loads((Path(__file__).parent / "data" / "request_cases.json").read_text())
# The end of a given-up request's error; with why, when the next wait would end past the deadline.
GAVE_UP = (
    r" \(gave up after \d+ attempts? in \d+\.\d s"
    r"(: the (Retry-After|backoff) wait of \d+\.\d s ends past the deadline, \d+\.\d s away)?\)"
)


def _answer(spec: dict[str, Any]) -> bytes:
    headers = b"".join(f"{k}: {v}\r\n".encode() for k, v in spec.get("headers", {}).items())
    return http(spec["status"], spec["body"].encode(), headers)


@pytest.mark.parametrize("case", CASES["cases"], ids=[c["name"] for c in CASES["cases"]])
def test_shared_request_case(case: dict[str, Any]) -> None:
    answers = [_answer(a) for a in case["answers"]]
    options = {**CASES["defaults"], **case.get("options", {})}

    async def go():  # type: ignore[no-untyped-def]
        def answer(head: bytes, body: bytes) -> bytes:
            return answers[min(len(seen), len(answers)) - 1]

        async with raw_server(answer) as (url, seen), VllmClient(url, **options) as client:
            outcome = await client.send({"messages": [{"role": "user", "content": "p"}]})
            return outcome, len(seen)

    outcome, requests = asyncio.run(go())
    expect = case["expect"]
    assert outcome.ok is expect["ok"], outcome.error
    assert outcome.status == expect["status"]
    assert outcome.error_kind == expect["error_kind"]
    assert requests == outcome.attempts  # every attempt reached the server
    if "attempts" in expect:
        assert outcome.attempts == expect["attempts"]
    else:
        assert outcome.attempts >= expect["attempts_at_least"]
    if "error" in expect:
        assert re.fullmatch(expect["error"].replace("{gave_up}", GAVE_UP), outcome.error or ""), outcome.error
