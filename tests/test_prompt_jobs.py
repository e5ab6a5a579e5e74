"""The prompt jobs' scripts (jobs/enrich.py, jobs/responses.py) end as `dspark-vllm`'s commands do: what goes
wrong is one line naming the job, a failure of Flink's by its root cause, exit 1; never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from connector.flink.env import _root_of_trace

ROOT = Path(__file__).resolve().parents[1]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    "job,more,said",
    [
        ("enrich", [], "enrich: cannot connect to http://127.0.0.1:{port}: "),
        (
            "responses",
            ["--model", "m", "--option", "nonsense=1"],
            "responses: the job failed: Table 'default_catalog.default_database.responses' ('connector' = "
            "'dspark-vllm'): Unsupported options found for 'dspark-vllm'. Unsupported options: nonsense",
        ),
    ],
)
def test_a_prompt_job_says_what_went_wrong_in_one_line(tmp_path: Path, job: str, more: list[str], said: str):
    """Both printed a Python traceback (and the second a Java trace): a server that is down, an option the
    table does not take."""
    (tmp_path / "prompts.txt").write_text("hello\n")
    port = _closed_port()
    args = ["--endpoint", f"http://127.0.0.1:{port}", "--prompts", "prompts.txt", "--output", "out", *more]
    done = subprocess.run([sys.executable, str(ROOT / "jobs" / f"{job}.py"), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(said.format(port=port)), done.stderr


def test_a_java_trace_as_text_is_said_by_its_root_cause():
    trace = (
        "org.apache.flink.table.api.TableException: Failed to execute sql\n"
        "\tat org.apache.flink.table.api.internal.TableEnvironmentImpl.executeInternal(X.java:1)\n"
        "Caused by: org.apache.flink.table.api.ValidationException: Unable to create a source\n"
        "\t... 3 more\n"
        "Caused by: java.io.IOException: No space left on device: /tmp/x\n"
        "\tat a.b.C(C.java:1)\n"
    )
    assert _root_of_trace(trace) == "No space left on device: /tmp/x"
    assert _root_of_trace("java.lang.NullPointerException\n\tat a.b.C(C.java:1)") == "java.lang.NullPointerException"
    assert _root_of_trace("a message: with a colon") == "a message: with a colon"
