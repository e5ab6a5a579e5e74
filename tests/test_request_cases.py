"""The request step's shared cases (tests/data/request_cases.json) through the Python client.

The same file runs through the JVM's Requester (RequesterTests.test90SharedCases, in tests/test_java_junit.py):
one list of behaviours (retries, Retry-After, 429/5xx, the deadline, error kinds, refused and broken
connections, slow and lying servers, the gate) that both clients must have. A case may differ per client only
where it says why ('deliberate'); `test_the_cases_file` holds the file to that.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from connector.client import VllmClient
from tests.http_support import Reply, http, raw_server

CASES = json.loads((Path(__file__).parent / "data" / "request_cases.json").read_text())
CLIENT = "python"
# The end of a given-up request's error; with why, when the next wait would end past the deadline.
GAVE_UP = (
    r" \(gave up after \d+ attempts? in \d+\.\d s"
    r"(: the (Retry-After|backoff) wait of \d+\.\d s ends past the deadline, \d+\.\d s away)?\)"
)
ANSWER_KEYS = {"status", "body", "headers", "raw", "delay_s", "then"}
EXPECT_KEYS = {"ok", "status", "attempts", "attempts_at_least", "error_kind", "error", "body", "probes_at_least",
               "concurrency_limit_below"}  # fmt: skip


def reply(spec: dict[str, Any]) -> Reply:
    """One answer of a case as bytes on the wire (RequesterTests.reply builds the same ones)."""
    if "raw" in spec:
        raw = spec["raw"].encode("latin-1")
    else:
        headers = b"".join(f"{k}: {v}\r\n".encode() for k, v in spec.get("headers", {}).items())
        raw = http(spec["status"], spec["body"].encode(), headers)
    return Reply(raw, spec.get("delay_s", 0.0), spec.get("then", "keep"))


def for_client(case: dict[str, Any], client: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The options and the expected outcome of `case` for `client`: the case's, with what it says differs."""
    own = case.get("clients", {}).get(client, {})
    options = {**CASES["defaults"], **case.get("options", {}), **own.get("options", {})}
    return options, {**case["expect"], **own.get("expect", {})}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_cases_file() -> None:
    """Every case is well formed, and a case that differs per client says why."""
    assert len(CASES["cases"]) >= 25
    names = [c["name"] for c in CASES["cases"]]
    assert len(set(names)) == len(names)
    for case in CASES["cases"]:
        keys = {"name", "server", "options", "answers", "health", "expect", "clients", "deliberate", "defect"}
        assert set(case) <= keys, case
        assert set(case.get("defect", {})) <= {"python", "java"}, case["name"]
        assert case.get("server", "scripted") in ("scripted", "none"), case["name"]
        assert ("answers" in case) == (case.get("server") != "none"), case["name"]
        for answer in case.get("answers", []) + ([case["health"]] if "health" in case else []):
            assert set(answer) <= ANSWER_KEYS and ("raw" in answer) != ("status" in answer), case["name"]
            assert answer.get("then", "keep") in ("keep", "close", "reset", "hang"), case["name"]
        assert set(case.get("clients", {})) <= {"python", "java"}, case["name"]
        assert bool(case.get("clients")) == bool(case.get("deliberate")), case["name"]
        for client in ("python", "java"):
            _, expect = for_client(case, client)
            assert set(expect) <= EXPECT_KEYS and ("attempts" in expect) != ("attempts_at_least" in expect), case


def _param(case: dict[str, Any]) -> Any:
    defect = case.get("defect", {}).get(CLIENT)
    marks = [pytest.mark.xfail(reason=f"defect of the Python client: {defect}", strict=True)] if defect else []
    return pytest.param(case, id=case["name"], marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES["cases"]])
def test_shared_request_case(case: dict[str, Any]) -> None:
    options, expect = for_client(case, CLIENT)
    answers = [reply(a) for a in case.get("answers", [])]
    health = reply(case.get("health", {"status": 200, "body": "{}"}))

    async def go():  # type: ignore[no-untyped-def]
        posts: list[int] = []

        def answer(head: bytes, body: bytes) -> Reply:
            if head.startswith(b"GET /health "):
                return health
            posts.append(1)
            return answers[min(len(posts), len(answers)) - 1]

        if case.get("server") == "none":
            url = f"http://127.0.0.1:{free_port()}"
            async with VllmClient(url, **options) as client:
                outcome = await client.send({"messages": [{"role": "user", "content": "p"}]})
                return outcome, outcome.attempts, client
        async with raw_server(answer) as (url, _), VllmClient(url, **options) as client:
            outcome = await client.send({"messages": [{"role": "user", "content": "p"}]})
            return outcome, len(posts), client

    outcome, requests, client = asyncio.run(go())
    assert outcome.ok is expect["ok"], outcome.error
    assert outcome.status == expect["status"], outcome.error
    assert outcome.error_kind == expect["error_kind"], outcome.error
    assert requests == outcome.attempts  # every attempt reached the server
    if "attempts" in expect:
        assert outcome.attempts == expect["attempts"], outcome.error
    else:
        assert outcome.attempts >= expect["attempts_at_least"], outcome.error
    if "error" in expect:
        assert re.fullmatch(expect["error"].replace("{gave_up}", GAVE_UP), outcome.error or ""), outcome.error
    else:
        assert outcome.error is None
    if "body" in expect:
        assert outcome.body == (None if expect["body"] is None else expect["body"].encode("latin-1"))
    if "probes_at_least" in expect:
        assert client.gate is not None and client.gate.probes >= expect["probes_at_least"]
    assert "concurrency_limit_below" not in expect, "the Python client's concurrency is fixed"
