"""The Java request step (java/src/main/java/io/dspark/vllm/request) against real servers: compiles it and its
tests (java/src/test/java) with the installed JDK against PyFlink's jars, runs the tests' runner, and reads
its verdict. The runner's own output (PASS/FAIL per test) is shown when it fails."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.java import NEEDS_JDK, build_jar

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "java" / "src" / "test" / "java" / "io" / "dspark" / "vllm" / "request" / "RequesterTests.java"

pytestmark = [
    pytest.mark.slow,
    NEEDS_JDK,
]


def test_java_requester() -> None:
    expected = len(re.findall(r"^\s*static void test\w+\(\)", RUNNER.read_text(), re.MULTILINE))
    assert expected >= 30
    result = build_jar().java_tests()
    lines = result.stdout.strip().splitlines()
    report = result.stdout + result.stderr[-4000:]
    assert lines, report
    assert lines[-1] == f"{expected} passed, 0 failed", report
    assert result.returncode == 0, report
    assert sum(line.startswith("PASS ") for line in lines) == expected, report
