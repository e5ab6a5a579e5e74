"""The request step's shared cases (tests/data/request_cases.json): the file's shape.

The cases run through the JVM's Requester (RequesterTests.test90SharedCases, in tests/test_java_junit.py), the
one engine that sends prompts: one list of behaviours (retries, Retry-After, 429/5xx, the deadline, error
kinds, refused and broken connections, slow and lying servers, the gate, the adaptive concurrency limit).
"""

from __future__ import annotations

import json
from pathlib import Path

CASES = json.loads((Path(__file__).parent / "data" / "request_cases.json").read_text())
ANSWER_KEYS = {"status", "body", "headers", "raw", "delay_s", "then"}
EXPECT_KEYS = {"ok", "status", "attempts", "attempts_at_least", "error_kind", "error", "body", "probes_at_least",
               "concurrency_limit_below"}  # fmt: skip


def test_the_cases_file() -> None:
    """Every case is well formed: the keys the JVM's runner reads, and nothing else."""
    assert len(CASES["cases"]) >= 25
    names = [c["name"] for c in CASES["cases"]]
    assert len(set(names)) == len(names)
    for case in CASES["cases"]:
        assert set(case) <= {"name", "server", "options", "answers", "health", "expect", "defect"}, case
        assert set(case.get("defect", {})) <= {"java"}, case["name"]
        assert case.get("server", "scripted") in ("scripted", "none"), case["name"]
        assert ("answers" in case) == (case.get("server") != "none"), case["name"]
        for answer in case.get("answers", []) + ([case["health"]] if "health" in case else []):
            assert set(answer) <= ANSWER_KEYS and ("raw" in answer) != ("status" in answer), case["name"]
            assert answer.get("then", "keep") in ("keep", "close", "reset", "hang"), case["name"]
        expect = case["expect"]
        assert set(expect) <= EXPECT_KEYS and ("attempts" in expect) != ("attempts_at_least" in expect), case
