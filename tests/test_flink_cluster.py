"""A real standalone Flink cluster from the PyFlink wheel's scripts: `flink run -py jobs/features.py` (replay)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyflink")

pytestmark = [pytest.mark.cluster, pytest.mark.flink, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "jobs" / "standalone_cluster.sh"
T0 = 1_700_000_000


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
    env = {**os.environ, "DSPARK_PYTHON": sys.executable, "DSPARK_CLUSTER_DIR": str(tmp_path / "cluster")}
    run = subprocess.run(
        [
            str(SCRIPT), "run", "--replay", str(bodies), "--profile", "math", "--output", str(out),
            "--model", "math-a", "--progress", "0",
        ],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "cluster: ready" in run.stdout and "cluster: stopped" in run.stdout
    assert "Job has been submitted with JobID" in run.stdout + run.stderr

    rows = []
    for file in (out / "features").rglob("part-*"):
        rows += list(csv.reader(file.open()))
    by_key = {(r[0][:16], r[2]): r for r in rows}
    # window_start, window_end, model, profile, requests, errors, error_rate, length_share, ...
    assert sum(int(r[4]) for r in rows) == 49
    first = by_key[("2023-11-14 22:13", "math-a")]  # 22:13:20 .. 22:13:55: bodies 0..7
    assert first[3] == "math" and (first[4], first[5]) == ("8", "0")
    # The broken line is labelled with --model and gets the newest event time of its batch (22:15:15).
    assert by_key[("2023-11-14 22:15", "math-a")][5] == "1"
    assert by_key[("2023-11-14 22:14", "math-b")][4] == "12"
    boxed_share = float(by_key[("2023-11-14 22:14", "math-b")][-1])
    assert boxed_share == 1.0
    errors = [json.loads(line) for f in (out / "errors").rglob("part-*") for line in f.read_text().splitlines()]
    assert len(errors) == 1 and errors[0]["line"] == 49 and errors[0]["model"] == "math-a"
