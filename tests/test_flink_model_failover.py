"""ML_PREDICT on a standalone cluster: the TaskManager is killed mid-job, restarted, and no row is lost.

`jobs/enrich.py` sends a file of prompts through ML_PREDICT with a 'dspark-vllm' model (checkpoints every 2 s,
EXACTLY_ONCE) and writes one CSV row per input row, keyed by the MD5 of its line, to a filesystem sink whose
files are committed at checkpoints. After a checkpoint has completed the TaskManager is SIGKILLed and a new one
started; the job restarts from that checkpoint. The rows in flight at the checkpoint are in the state of
Flink's async operator (which runs ML_PREDICT) and are sent again: every key is in the committed output once.
"""

from __future__ import annotations

import time

import pytest

from tests.cluster import ROOT, rest, wait_for, wait_for_job_end

pytest.importorskip("pyflink")

from connector.flink.planner import request_id_of  # noqa: E402
from connector.simulator.testing import serve_simulator  # noqa: E402
from tests.test_flink_failover import cluster_script, committed_rows  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.flink, pytest.mark.slow]

PROMPTS = 400


def test_no_row_is_lost_when_the_taskmanager_dies(tmp_path):
    prompts = [f"Question {i}: answer briefly." for i in range(PROMPTS)]
    (tmp_path / "prompts.txt").write_text("\n".join(prompts) + "\n")
    out = tmp_path / "out"
    script = cluster_script(tmp_path)

    # 400 prompts, 4 in flight, 200 ms each: ~20-25 s of requests, long enough to fail over in the middle.
    with serve_simulator(mode="process", seed=7, latency_ms=200.0) as sim:
        try:
            script("start")
            base = "http://127.0.0.1:" + (tmp_path / "cluster" / "rest.port").read_text().strip()
            submitted = script(
                "submit", "--endpoint", sim.url, "--prompts", str(tmp_path / "prompts.txt"),
                "--output", str(out), "--concurrency", "4", "--checkpoint-interval", "2", "--detached",
                DSPARK_JOB=str(ROOT / "jobs" / "enrich.py"),
            )  # fmt: skip
            job = next(line.split()[-1] for line in submitted.splitlines() if line.startswith("enrich: job "))

            def sent() -> float:
                return sim.stats().get("requests /v1/chat/completions", 0.0)

            def last_checkpoint_triggered_ms() -> int:
                latest = rest(base, f"/jobs/{job}/checkpoints")["latest"]["completed"]
                return int(latest["trigger_timestamp"]) if latest else 0

            wait_for("the first requests", lambda: sent() >= 20, timeout=120)
            flowing_since_ms = time.time() * 1000
            wait_for("a checkpoint", lambda: last_checkpoint_triggered_ms() > flowing_since_ms, timeout=60)
            sent_before_kill = sent()
            assert "killed TaskManager" in script("kill-taskmanager")
            script("start-taskmanager")

            state = wait_for_job_end(base, job, timeout=240)
            assert state == "FINISHED"
            history = rest(base, f"/jobs/{job}/exceptions")["exceptionHistory"]["entries"]
            assert history, "no failure recorded: the TaskManager was not killed while the job ran"
            sent_total = sent()
        finally:
            script("stop")

    rows = committed_rows(out)
    keys = [r[0] for r in rows]
    assert sorted(keys) == sorted(request_id_of(p) for p in prompts)  # every row exactly once
    assert all(r[3] == "200" and r[5] == "" for r in rows), [r for r in rows if r[5]][:3]
    assert 0 < sent_before_kill < PROMPTS, sent_before_kill
    assert sent_total >= PROMPTS
    print(f"model failover: {PROMPTS} rows, {sent_total:.0f} requests ({sent_before_kill:.0f} before the kill)")
