"""The Java request step (java/src/main/java/io/dspark/vllm/request) against real servers: compiles it and its
tests (java/src/test/java) with the installed JDK against PyFlink's jars, runs the tests' runner, and reads
its verdict. The runner's own output (PASS/FAIL per test) is shown when it fails."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "java" / "src" / "test" / "java" / "io" / "dspark" / "vllm" / "request" / "RequesterTests.java"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("javac") is None or shutil.which("java") is None, reason="needs a JDK"),
]


def _build_jar() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_jar", ROOT / "java" / "build_jar.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_java_requester() -> None:
    expected = len(re.findall(r"^\s*static void test\w+\(\)", RUNNER.read_text(), re.MULTILINE))
    assert expected >= 30
    result = _build_jar().java_tests()
    lines = result.stdout.strip().splitlines()
    report = result.stdout + result.stderr[-4000:]
    assert lines, report
    assert lines[-1] == f"{expected} passed, 0 failed", report
    assert result.returncode == 0, report
    assert sum(line.startswith("PASS ") for line in lines) == expected, report
