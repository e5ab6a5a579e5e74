"""A real standalone Flink cluster from the PyFlink wheel's scripts: `flink run -py jobs/features.py` (replay),
then `flink run -c io.dspark.vllm.sql.SqlRunner` with a .sql file (no Python program).

The job is submitted detached and watches the replay directory (unbounded), so that while it runs the
TaskManager's Prometheus reporter (jobs/standalone_cluster.sh enables it) can be scraped for our `dspark`
metrics; then `flink stop --drain` ends it the way a bounded replay ends (all windows fire, files commit).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.cluster import SCRIPT, wait_for, wait_for_job_end

pytest.importorskip("pyflink")

pytestmark = [pytest.mark.cluster, pytest.mark.flink, pytest.mark.slow]

T0 = 1_700_000_000
# Our metrics as Flink's Prometheus reporter names them: <scope>_<group>_<name>, labels for the variables.
DSPARK = "flink_taskmanager_job_task_operator_dspark_"


def prometheus_port(log_dir: Path) -> int | None:
    # The reporter takes the first free port of its range and logs which.
    for log in log_dir.glob("flink-*-taskexecutor-*.log"):
        found = re.search(r"Started PrometheusReporter HTTP server on port (\d+)", log.read_text(errors="replace"))
        if found:
            return int(found.group(1))
    return None


def dspark_metrics(port: int, job: str) -> dict[str, float]:
    """The `dspark` metrics of one job from the TaskManager's /metrics, summed over subtasks."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    metrics: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(DSPARK) and f'job_id="{job}"' in line:
            name, value = line[len(DSPARK) :].split("{", 1)[0], float(line.rsplit(" ", 1)[1])
            metrics[name] = metrics.get(name, 0.0) + value
    return metrics


def body(i: int, model: str) -> bytes:
    return json.dumps(
        {
            "id": f"cmpl-{model}-{i}",
            "object": "chat.completion",
            "created": T0 + 5 * i,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "x = 1\n\\boxed{42}"},
                    "finish_reason": "length" if i % 4 == 0 else "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": i, "total_tokens": 10 + i},
        }
    ).encode()


def test_feature_job_on_a_standalone_cluster(tmp_path):
    bodies = tmp_path / "bodies"
    bodies.mkdir()
    with open(bodies / "captured.jsonl", "wb") as f:
        for i in range(24):  # 2 minutes of bodies, 5 s apart, for two models
            f.write(body(i, "math-a") + b"\n")
            f.write(body(i, "math-b") + b"\n")
        f.write(b"{broken\n")
    out = tmp_path / "out"
    cluster = tmp_path / "cluster"
    env = {**os.environ, "DSPARK_PYTHON": sys.executable, "DSPARK_CLUSTER_DIR": str(cluster), "DSPARK_DETACHED": "1"}

    def script(*args: str, timeout: float = 300) -> str:
        run = subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout)
        assert run.returncode == 0, f"{args}: {run.stdout[-3000:]}{run.stderr[-3000:]}"
        return run.stdout + run.stderr

    try:
        assert "cluster: ready" in script("start")
        base = "http://127.0.0.1:" + (cluster / "rest.port").read_text().strip()
        submitted = script(
            "submit", "--replay", str(bodies), "--replay-monitor", "1", "--profile", "math",
            "--output", str(out), "--model", "math-a", "--progress", "0", "--detached", "--window", "60",
        )  # fmt: skip
        assert "Job has been submitted with JobID" in submitted
        job = next(line.split()[-1] for line in submitted.splitlines() if line.startswith("features: job "))

        # Our metrics through Flink's metric reporters, here the Prometheus reporter of the wheel's
        # plugins/ (the metrics leave with the job's tasks, so they are read while it runs).
        port = wait_for("the Prometheus reporter", lambda: prometheus_port(cluster / "log"), timeout=60)

        def counted() -> dict | bool:
            # All three counted (a scrape reads the counters one by one, while a batch may be counted between).
            m = dspark_metrics(port, job)
            return (
                m.get("numRecordsIn") == 49 and m.get("numRecordsOut", 0) + m.get("numRecordsInErrors", 0) == 49 and m
            )

        metrics = wait_for("the parse metrics", counted, timeout=240)
        print(f"prometheus :{port} {DSPARK}*: {metrics}")
        assert (metrics["numRecordsOut"], metrics["numRecordsInErrors"]) == (48, 1)  # the broken line
        assert metrics["numBytesIn"] == sum(len(line) for line in (bodies / "captured.jsonl").read_bytes().split(b"\n"))
        assert metrics["numBatches"] >= 1 and metrics["parseTimeMsP99"] >= metrics["parseTimeMsP50"] >= 0
        # A meter: the reporter exports its rate, which Flink's view updates every 5 s.
        wait_for("the meter's rate", lambda: dspark_metrics(port, job).get("numRecordsInPerSecond", 0) > 0, 30)
        assert metrics["backendGpu"] == 0  # no GPU here: 'auto' parses on the CPU, and says so
        assert metrics["gpuFallbackBatches"] == metrics["numBatches"]
        assert metrics["backendJvm"] == 1  # the parse step runs in the TaskManager's JVM

        # End it as a bounded replay ends: MAX_WATERMARK fires every window, the final savepoint commits the files.
        assert "Savepoint completed" in script("drain", job)
        state = wait_for_job_end(base, job, timeout=120)
        assert state == "FINISHED"

        # The same cluster, no Python program: a .sql file through the connector jar's SQL runner.
        sql = tmp_path / "replay.sql"
        sql.write_text(
            "CREATE TABLE captured (id STRING, model STRING, completion_tokens BIGINT,"
            " reason STRING METADATA FROM 'error.reason' VIRTUAL, line BIGINT METADATA FROM 'source.line' VIRTUAL)"
            f" WITH ('connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '{bodies}', 'profile' = 'math');"
            " CREATE TABLE sink_sql (id STRING, model STRING, completion_tokens BIGINT, reason STRING, line BIGINT)"
            f" WITH ('connector' = 'filesystem', 'path' = '{tmp_path / 'sql-out'}', 'format' = 'json');"
            " INSERT INTO sink_sql SELECT id, model, completion_tokens, reason, line FROM captured;"
        )
        attached = {**env, "DSPARK_DETACHED": "0"}
        run = subprocess.run(
            [str(SCRIPT), "submit-sql", str(sql)], env=attached, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0, f"{run.stdout[-3000:]}{run.stderr[-3000:]}"
        assert "SqlRunner: statement 3 submitted job" in run.stdout + run.stderr
    finally:
        assert "cluster: stopped" in script("stop")

    # JSON lines with named fields.
    rows = [json.loads(line) for f in (out / "features").rglob("part-*") for line in f.read_text().splitlines()]
    by_key = {(r["window_start"][:16], r["model"]): r for r in rows}
    assert sum(r["requests"] for r in rows) == 49
    first = by_key[("2023-11-14 22:13", "math-a")]  # 22:13:20 .. 22:13:55: bodies 0..7
    assert first["profile"] == "math" and (first["requests"], first["errors"]) == (8, 0)
    # The broken line is labelled with --model and gets the newest event time of its batch (22:15:15).
    assert by_key[("2023-11-14 22:15", "math-a")]["errors"] == 1
    assert by_key[("2023-11-14 22:14", "math-b")]["requests"] == 12
    assert by_key[("2023-11-14 22:14", "math-b")]["boxed_answer_share"] == 1.0
    errors = [json.loads(line) for f in (out / "errors").rglob("part-*") for line in f.read_text().splitlines()]
    assert len(errors) == 1 and errors[0]["line"] == 49 and errors[0]["model"] == "math-a"

    sql_rows = [json.loads(line) for f in (tmp_path / "sql-out").rglob("part-*") for line in f.read_text().splitlines()]
    assert sorted(r["line"] for r in sql_rows) == list(range(1, 50))
    by_line = {r["line"]: r for r in sql_rows}
    assert by_line[1] == {"id": "cmpl-math-a-0", "model": "math-a", "completion_tokens": 0, "reason": None, "line": 1}
    assert by_line[48]["id"] == "cmpl-math-b-23" and by_line[48]["completion_tokens"] == 23
    assert by_line[49]["id"] is None and by_line[49]["reason"].startswith("not JSON")
