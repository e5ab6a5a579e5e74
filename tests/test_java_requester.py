"""The Java request step (java/src/main/java/io/dspark/vllm/request) against real servers: its JUnit 5 tests
(java/src/test/java/.../RequesterTests.java) compiled with the installed JDK against PyFlink's jars and run by
JUnit's console launcher (from Maven Central, deploy/maven/junit.pom.xml); the verdicts are read from JUnit's XML
report and its counts printed. The launcher's own output (a tree of the tests, the failures' traces) is shown
when one fails."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.java import NEEDS_JDK, build_jar

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "java" / "src" / "test" / "java" / "io" / "dspark" / "vllm" / "request" / "RequesterTests.java"

pytestmark = [
    pytest.mark.slow,
    NEEDS_JDK,
]


def test_java_requester(capsys: pytest.CaptureFixture[str]) -> None:
    expected = re.findall(r"^\s*@Test\s+void (test\w+)\(\)", TESTS.read_text(), re.MULTILINE)
    assert len(expected) >= 70
    try:
        build_jar().junit_jars()
    except SystemExit as exc:  # fetch.sh's one line: no mvn, or Maven Central out of reach
        pytest.skip(str(exc))
    report = build_jar().junit_tests("io.dspark.vllm.request.RequesterTests")
    with capsys.disabled():  # the counts in the run's log (CI's too), passed or not
        print(f"\n{report.summary()} (RequesterTests)")
    shown = report.output[-8000:]
    assert report.verdicts == {f"io.dspark.vllm.request.RequesterTests.{name}": "passed" for name in expected}, shown
    assert (report.tests, report.failures, report.errors, report.skipped) == (len(expected), 0, 0, 0), shown
    assert report.returncode == 0, shown
