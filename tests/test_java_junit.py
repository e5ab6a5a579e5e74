"""The Java side's JUnit 5 tests (java/build_jar.py TEST_CLASSES): the request step against real servers
(java/src/test/java/.../request/RequesterTests.java), the parse step in Flink's operator test harness
(.../flink/ParseOperatorTest.java) and the JNI boundary driven with hostile inputs (.../parse/NativeBoundaryTest.java),
compiled with the installed JDK against PyFlink's jars and run by JUnit's console launcher in one JVM (JUnit and
the harness's test jars from Maven Central: deploy/maven/junit.pom.xml, flink-test-harness.pom.xml). The verdicts
are read from JUnit's XML report and its counts printed; the launcher's own output (a tree of the tests, the
failures' traces) is shown when one fails."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.java import NEEDS_JDK, build_jar

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "java" / "src" / "test" / "java"

pytestmark = [
    pytest.mark.slow,
    NEEDS_JDK,
]


def test_java_junit(capsys: pytest.CaptureFixture[str]) -> None:
    script = build_jar()
    expected = {}
    for name in script.TEST_CLASSES:
        source = (TESTS / (name.replace(".", "/") + ".java")).read_text()
        for method in re.findall(r"^\s*@Test\s+(?:@\w+(?:\([^)]*\))?\s+)*void (\w+)\(\)", source, re.MULTILINE):
            expected[f"{name}.{method}"] = "passed"
    assert sum(k.startswith("io.dspark.vllm.request.RequesterTests.") for k in expected) >= 70
    assert sum(k.startswith("io.dspark.vllm.engine.ParseOperatorTest.") for k in expected) >= 5
    assert sum(k.startswith("io.dspark.vllm.parse.NativeBoundaryTest.") for k in expected) >= 5
    try:
        script.junit_jars()
    except SystemExit as exc:  # fetch.sh's one line: no mvn, or Maven Central out of reach
        pytest.skip(str(exc))
    report = script.junit_tests()
    with capsys.disabled():  # the counts in the run's log (CI's too), passed or not
        print(f"\n{report.summary()} ({', '.join(c.rsplit('.', 1)[1] for c in script.TEST_CLASSES)})")
    shown = report.output[-8000:]
    assert report.verdicts == expected, shown
    assert (report.tests, report.failures, report.errors, report.skipped) == (len(expected), 0, 0, 0), shown
    assert report.returncode == 0, shown
