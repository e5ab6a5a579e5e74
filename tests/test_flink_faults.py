"""The fault matrix on a standalone cluster (2 GB TaskManager): every simulator fault at once, 2 MB responses, the
server stopped and restarted on its port mid-job, and an API key that must appear in no log and no REST answer.

`jobs/responses.py` sends a file of prompts (request mode, the table's defaults, checkpoints every 2 s) and
writes one CSV row per prompt: request id, response id, status, attempts, error. Exact counts: every prompt is
one committed row (a row or an error row), none twice; the outage costs no error row.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from tests.cluster import ROOT, SCRIPT, rest, wait_for, wait_for_job_end

pytest.importorskip("pyflink")

from connector.flink.progress import free_port  # noqa: E402
from connector.simulator.testing import serve_simulator  # noqa: E402
from tests.request_ids import request_ids_of  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.flink, pytest.mark.slow]

PROMPTS = 400
KEY = "sk-dspark-test-5f1e9c0d"  # looked for in every log and REST answer
FAULTS = {
    "429": 0.02, "500": 0.02, "502": 0.02, "503": 0.02, "504": 0.02, "slow": 0.02, "hang": 0.01, "reset": 0.02,
    "cut": 0.02, "truncate": 0.02, "malformed": 0.02, "invalid-utf8": 0.02, "big": 0.05, "interim": 0.02,
    "flood": 0.01,
}  # fmt: skip
# Permanent by nature: the client gives up at once (500, a body too large) or the body is bad (parse errors).
PERMANENT = {"500", "truncate", "malformed", "invalid-utf8", "flood"}


def committed(out: Path) -> list[list[str]]:
    return [row for f in sorted(out.rglob("part-*")) for row in csv.reader(f.open(newline=""))]


def test_fault_matrix(tmp_path):
    prompts = [f"Fault prompt {i}: answer briefly." for i in range(PROMPTS)]
    (tmp_path / "prompts.txt").write_text("\n".join(prompts) + "\n")
    out, cluster = tmp_path / "out", tmp_path / "cluster"
    env = {
        **os.environ,
        "DSPARK_PYTHON": sys.executable,
        "DSPARK_CLUSTER_DIR": str(cluster),
        "DSPARK_JOB": str(ROOT / "jobs" / "responses.py"),
        "DSPARK_DETACHED": "1",
    }
    env.pop("DSPARK_TEST_API_KEY", None)  # the cluster's processes never see the key

    def script(*args: str, extra: dict | None = None, timeout: float = 180) -> str:
        run = subprocess.run(
            [str(SCRIPT), *args], env={**env, **(extra or {})}, capture_output=True, text=True, timeout=timeout
        )
        assert run.returncode == 0, f"{args}: {run.stdout[-3000:]}{run.stderr[-3000:]}"
        return run.stdout + run.stderr

    port = free_port()
    simulator = dict(
        mode="process", port=port, seed=5, faults=FAULTS, api_key=KEY, latency_ms=200.0, slow_ms=1500.0,
        hang_s=60.0, big_bytes=2 * 1024 * 1024, flood_bytes=256 * 1024 * 1024,
    )  # fmt: skip
    seen_before_outage = 0
    try:
        assert "cluster: ready" in script("start")
        base = "http://127.0.0.1:" + (cluster / "rest.port").read_text().strip()
        with serve_simulator(**simulator) as sim:
            submitted = script(
                "submit", "--endpoint", sim.url, "--model", "meta-llama/Llama-3.1-8B-Instruct",
                "--prompts", str(tmp_path / "prompts.txt"), "--output", str(out), "--concurrency", "4",
                "--checkpoint-interval", "2", "--detached",
                "--option", "api-key.env=DSPARK_TEST_API_KEY", "--option", "request.timeout=3 s",
                "--option", "request.retry.deadline=90 s", "--option", "request.retry.max-backoff=1 s",
                extra={"DSPARK_TEST_API_KEY": KEY},  # only the submitting client has it
            )  # fmt: skip
            job = next(line.split()[-1] for line in submitted.splitlines() if line.startswith("responses: job "))
            wait_for(
                "a quarter of the prompts answered",
                lambda: sim.stats().get("requests /v1/chat/completions", 0) >= PROMPTS // 4,
                timeout=180,
            )
            seen_before_outage = int(sim.stats()["requests /v1/chat/completions"])
        time.sleep(6)  # the server is down (a vLLM restart takes minutes; the deadline covers a few seconds here)
        with serve_simulator(**simulator) as sim:
            state = wait_for_job_end(base, job, timeout=400)
            assert state == "FINISHED", rest(base, f"/jobs/{job}/exceptions")
            after = sim.stats()
        answers = [rest(base, path) for path in (f"/jobs/{job}", f"/jobs/{job}/config", f"/jobs/{job}/plan")]
        answers += [rest(base, f"/jobs/{job}/exceptions"), rest(base, "/jobmanager/config")]
        answers += [rest(base, f"/jobs/{job}/checkpoints")]
        for tm in rest(base, "/taskmanagers")["taskmanagers"]:
            answers.append(rest(base, f"/taskmanagers/{tm['id']}"))
            for log in rest(base, f"/taskmanagers/{tm['id']}/logs")["logs"]:
                with urllib.request.urlopen(f"{base}/taskmanagers/{tm['id']}/logs/{log['name']}", timeout=30) as r:
                    answers.append(r.read().decode(errors="replace"))
    finally:
        script("stop")

    rows = committed(out)
    errors = [r[6] for r in rows if r[6]]
    kinds = Counter(e.split(":")[0] if not e.startswith("request failed") else e.split(":")[1].strip() for e in errors)
    print(f"error rows by kind: {dict(kinds)}; {len(rows) - len(errors)} rows; {seen_before_outage} requests before")
    ids = Counter(r[0] for r in rows)
    assert len(rows) == PROMPTS and set(ids) == set(request_ids_of(tmp_path / "prompts.txt"))  # each prompt once
    # The outage cost no prompt: while the server was down requests waited for it instead of failing.
    assert not [e for e in errors if "connect" in e], errors
    assert 0 < seen_before_outage < PROMPTS and after.get("requests /v1/chat/completions", 0) > 0
    assert len(errors) < PROMPTS * 0.25
    assert any(r[4] == "200" and r[1] for r in rows)  # the 2 MB answers came through (no OOM, no restarts)

    logs = [p.read_text(errors="replace") for p in (cluster / "log").rglob("*") if p.is_file()]
    leaked = [i for i, text in enumerate([*logs, *map(str, answers)]) if KEY in text]
    assert not leaked, f"the API key is in {len(leaked)} logs or REST answers"
    assert PERMANENT  # documented above: the error kinds an operator can expect from these faults
