"""Failover on a standalone cluster: the TaskManager is killed mid-job, restarted, and no prompt is lost.

The first test runs over both routes from a prompt to a row: the 'dspark-vllm' table and ML_PREDICT with a
'dspark-vllm' model (`jobs/enrich.py`, keyed by the MD5 of its line). `jobs/responses.py` sends a file of prompts to the simulator (request mode, checkpoints every 2 s,
EXACTLY_ONCE) and writes one CSV row per request to a filesystem sink, whose files are committed at
checkpoints. After a checkpoint has completed the TaskManager is SIGKILLed and a new one started; the job
restarts from that checkpoint (fixed-delay restart strategy of jobs/standalone_cluster.sh). The requests in
flight at the checkpoint are in its state (Flink's async I/O operator) and are sent again after the restore:
every prompt's request id is in the committed output exactly once.

The second test holds 500 requests of 3 minutes in flight: checkpoints still complete (they never wait for a
request), and after a TaskManager is killed every one of them is sent again from the checkpoint. The third
stops the job with a savepoint while requests are in flight and resumes it from there: again every prompt is
one committed row.
"""

from __future__ import annotations

import csv
import hashlib
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from tests.cluster import ROOT, cluster_script, rest, wait_for, wait_for_job_end

pytest.importorskip("pyflink")

from connector.simulator.testing import serve_simulator  # noqa: E402
from tests.request_ids import request_ids_of  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.flink, pytest.mark.slow]

PROMPTS = 400
EARLIER = 300  # records already in the Kafka store's topic


def committed_rows(out: Path) -> list[list[str]]:
    # In-progress and pending files are hidden (".part-..."); only committed part files count.
    rows: list[list[str]] = []
    for file in sorted(out.rglob("part-*")):
        rows += list(csv.reader(file.open(newline="")))
    return rows


# The two routes from a prompt to a committed row, each a job of jobs/ with the same command line and the same
# CSV row (request id, ..., http status, ..., error reason): the 'dspark-vllm' table (jobs/responses.py) and
# ML_PREDICT with a 'dspark-vllm' model (jobs/enrich.py). (job, its name in "NAME: job ID", status, error).
ROUTES = {
    "table": ("responses.py", "responses", 4, 6),
    "ml_predict": ("enrich.py", "enrich", 3, 5),
}


@pytest.mark.parametrize("store", ["no-store", "store", pytest.param("kafka-store", marks=pytest.mark.kafka)])
@pytest.mark.parametrize("route", ROUTES)
def test_no_prompt_is_lost_when_the_taskmanager_dies(request, tmp_path, route, store):
    """With 'request.store' (a folder, or a topic of the session's Kafka broker) the restored job answers
    from the store every prompt answered before the kill: the server receives the prompts plus at most those in
    flight at the kill (4 on the wire)."""
    job_file, name, status, error = ROUTES[route]
    stored: tuple[str, ...] = ()
    if store == "store":
        stored = ("--option", f"request.store={(tmp_path / 'store').as_uri()}")
    elif store == "kafka-store":
        broker = request.getfixturevalue("kafka")
        topic = f"failover-{route}-{time.monotonic_ns()}"
        stored = ("--option", f"request.store=kafka://{broker.bootstrap}/{topic}")
        # Answers of an earlier job (keys of no prompt here): a restored request step reads the topic from the
        # positions in its checkpoint, so not these; a first opening (and the model, which has no checkpoint hook)
        # reads them all.
        broker.create_topic(topic, **{"cleanup.policy": "compact,delete"})
        broker.produce(topic, [{"key": i.to_bytes(4, "big") * 8, "value": bytes(200)} for i in range(EARLIER)])
    prompts = [f"Prompt {i}: answer briefly." for i in range(PROMPTS)]
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
                "--output", str(out), "--concurrency", "4", "--checkpoint-interval", "2", "--detached", *stored,
                DSPARK_JOB=str(ROOT / "jobs" / job_file),
            )  # fmt: skip
            job = next(line.split()[-1] for line in submitted.splitlines() if line.startswith(f"{name}: job "))

            # Kill after a checkpoint triggered while requests were flowing, before the last prompt was sent.
            def sent() -> float:
                return sim.stats().get("requests /v1/chat/completions", 0.0)

            def last_checkpoint_triggered_ms() -> int:
                latest = rest(base, f"/jobs/{job}/checkpoints")["latest"]["completed"]
                return int(latest["trigger_timestamp"]) if latest else 0

            wait_for("the first requests", lambda: sent() >= 20, timeout=120)
            flowing_since_ms = time.time() * 1000
            wait_for("a checkpoint", lambda: last_checkpoint_triggered_ms() > flowing_since_ms, timeout=60)
            sent_before_kill = sent()
            committed_before_kill = len(committed_rows(out))
            assert "killed TaskManager" in script("kill-taskmanager")
            script("start-taskmanager")

            state = wait_for_job_end(base, job, timeout=240)
            assert state == "FINISHED"
            # The job really failed over: the lost TaskManager is in its exception history.
            history = rest(base, f"/jobs/{job}/exceptions")["exceptionHistory"]["entries"]
            assert history, "no failure recorded: the TaskManager was not killed while the job ran"
            sent_total = sent()
        finally:
            script("stop")

    rows = committed_rows(out)
    duplicates = assert_every_prompt_once(rows, expected_keys(route, tmp_path / "prompts.txt"), status, error)
    # The kill came mid-run, so some prompts were sent again after the restart.
    assert 0 < sent_before_kill < PROMPTS, sent_before_kill
    if store != "no-store":
        # Paid twice: only what was in flight at the kill: on the wire (4 at most) or answered and not yet synced
        # to the store (a slot is free once its answer is read, so at most 4 more; a sync takes a few ms).
        # Without the store it is every prompt answered since the checkpoint (30-60 in these runs).
        assert sent_total - PROMPTS <= 4 + 4, (sent_before_kill, sent_total)
    if store == "kafka-store":
        # How each opening of the request step read the topic (its INFO line in the TaskManagers' logs).
        openings = [
            line.split(" read ", 1)[1]
            for line in taskmanager_log_lines(tmp_path)
            if "dspark-vllm: the response store kafka://" in line
        ]
        whole = [int(o.split()[0]) for o in openings if o.endswith("(the whole topic)")]
        restored = [int(o.split()[0]) for o in openings if "(from the restored checkpoint's positions" in o]
        assert EARLIER in whole, openings  # the first opening: every earlier answer
        if route == "table":
            # restored: only what the killed job stored after its first opening, not the earlier job's answers
            assert restored and all(n <= sent_before_kill + 8 for n in restored), openings  # (+ a few sent by the kill)
        else:
            assert not restored and max(whole) > EARLIER, openings  # ML_PREDICT: the whole topic again
    print(
        f"failover ({route}, {store}): {PROMPTS} prompts, {len(rows)} rows, "
        f"{duplicates} duplicates, {sent_total - PROMPTS:.0f} paid twice, "
        f"{sent_total:.0f} requests ({sent_before_kill:.0f} before the kill, {committed_before_kill} rows committed), "
        f"{len(history)} failure(s)"
    )


def taskmanager_log_lines(tmp_path: Path) -> list[str]:
    """The lines of the cluster's TaskManager logs (those of a killed TaskManager too)."""
    return [
        line
        for log in sorted((tmp_path / "cluster" / "log").glob("*taskexecutor*.log*"))
        for line in log.read_text(errors="replace").splitlines()
    ]


def expected_keys(route: str, prompts: Path) -> set[str]:
    """The key of each line of the prompts file in the committed rows: the table's request id (its file, line
    number and line: `request_ids_of`), or the MD5 of the line that jobs/enrich.py keys its questions by."""
    if route == "table":
        return set(request_ids_of(prompts))
    return {hashlib.md5(line.encode()).hexdigest() for line in prompts.read_text().splitlines()}


def assert_every_prompt_once(rows: list[list[str]], expected: set[str], status: int = 4, error: int = 6) -> int:
    """Every prompt's key (`expected`, one per prompt) in the committed rows exactly once, each a 200 (column
    `status`) with no error (column `error`); the duplicates (0)."""
    ids = Counter(r[0] for r in rows)
    assert len(expected) == PROMPTS
    missing = expected - set(ids)
    assert not missing, f"{len(missing)} of {PROMPTS} prompts lost"
    assert set(ids) == expected
    duplicates = sum(n - 1 for n in ids.values())
    assert duplicates == 0, [i for i, n in ids.items() if n > 1][:5]  # exactly once
    assert all(r[error] == "" and r[status] == "200" for r in rows), [r for r in rows if r[error]][:3]
    return duplicates


@pytest.mark.parametrize("store", ["no-store", pytest.param("kafka-store-rescaled", marks=pytest.mark.kafka)])
def test_a_job_resumed_from_a_savepoint_sends_the_requests_that_were_in_flight(request, tmp_path, store):
    """The requests in flight when a job is stopped with a savepoint (not drained) are in the
    savepoint, and the job resumed from it sends them again: every prompt is one committed row. With a
    Kafka store, resumed at parallelism 2 (a rescale: the savepoint's queued requests spread over two request
    steps, each reading the topic from the lowest of the savepoint's positions), the request keys are the same
    and only what was on the wire at the savepoint is sent again."""
    prompts = [f"Prompt {i}: answer briefly." for i in range(PROMPTS)]
    (tmp_path / "prompts.txt").write_text("\n".join(prompts) + "\n")
    out = tmp_path / "out"
    script = cluster_script(tmp_path)
    job_args: tuple[str, ...] = (
        "--prompts", str(tmp_path / "prompts.txt"), "--output", str(out), "--concurrency", "4",
        "--checkpoint-interval", "2", "--detached",
    )  # fmt: skip
    resume_args: tuple[str, ...] = ()
    if store == "kafka-store-rescaled":
        topic = f"savepoint-{time.monotonic_ns()}"
        job_args += ("--option", f"request.store=kafka://{request.getfixturevalue('kafka').bootstrap}/{topic}")
        resume_args = ("--parallelism", "2")

    # 400 prompts, 4 in flight, 500 ms each: ~50 s of requests; the savepoint comes early in them.
    with serve_simulator(mode="process", seed=7, latency_ms=500.0) as sim:
        try:
            script("start")
            base = "http://127.0.0.1:" + (tmp_path / "cluster" / "rest.port").read_text().strip()

            def sent() -> float:
                return sim.stats().get("requests /v1/chat/completions", 0.0)

            submitted = script("submit", "--endpoint", sim.url, *job_args)
            job = next(line.split()[-1] for line in submitted.splitlines() if line.startswith("responses: job "))
            wait_for("the first requests", lambda: sent() >= 20, timeout=120)
            stopped = script("suspend", job)
            savepoint = next(line.split("Path: ")[-1].strip() for line in stopped.splitlines() if "Path: " in line)
            assert wait_for_job_end(base, job, timeout=60) == "FINISHED"
            sent_before = sent()
            committed_before = len(committed_rows(out))
            assert sent_before < PROMPTS

            resumed = script("submit", "--endpoint", sim.url, *job_args, *resume_args, DSPARK_FROM_SAVEPOINT=savepoint)
            job2 = next(line.split()[-1] for line in resumed.splitlines() if line.startswith("responses: job "))
            assert wait_for_job_end(base, job2, timeout=240) == "FINISHED"
            sent_total = sent()
        finally:
            script("stop")

    rows = committed_rows(out)
    assert_every_prompt_once(rows, expected_keys("table", tmp_path / "prompts.txt"))
    # Answered before the savepoint and committed with it, or sent by the resumed job: the ones in flight at
    # the savepoint were sent twice (the same request id), every other prompt once.
    resent = sent_total - PROMPTS
    if store == "no-store":
        assert 0 < resent <= 4 + 4 * 4, (sent_before, sent_total)  # at most the queue (4 x concurrency) and the wire
    else:
        # answered before the savepoint: from the store, under the same keys at parallelism 2; sent again only what
        # was on the wire (4) or answered and not yet acknowledged by the broker
        assert resent <= 4 + 4, (sent_before, sent_total)
        restored = [line for line in taskmanager_log_lines(tmp_path) if "restored checkpoint's positions" in line]
        assert len(restored) == 2, restored  # both request steps of the resumed job read from the positions
    print(
        f"savepoint: {PROMPTS} prompts, {len(rows)} rows ({committed_before} committed at the savepoint), "
        f"{sent_total:.0f} requests ({sent_before:.0f} before it, {resent:.0f} sent again)"
    )


IN_FLIGHT = 500


def test_checkpoints_complete_with_requests_in_flight_and_restore_them(tmp_path):
    """Before (PyFlink's async function): a checkpoint waited for every request in flight; with 50 requests of
    30 s each and checkpoints every 2 s, one checkpoint completed, after 30.9 s.

    Prompts at a rate with no end (an unbounded source, as in production), 200/s, and a request step's queue
    ('request.queue-size') of 10,000 that has room throughout. Two cases wait on purpose (Flink's async operator,
    docs/flink.md): at the end of a bounded input the task delivers what is in flight before it finishes, and
    with a full queue the source is held back until the next response frees a place."""
    script = cluster_script(tmp_path)

    # Every request takes 3 minutes (the simulator's hang fault), far past the test.
    with serve_simulator(mode="process", seed=7, faults={"hang": 1.0}, hang_s=180.0) as sim:
        try:
            script("start")
            base = "http://127.0.0.1:" + (tmp_path / "cluster" / "rest.port").read_text().strip()
            submitted = script(
                "submit", "--endpoint", sim.url, "--rate", "200",
                "--output", str(tmp_path / "out"), "--concurrency", str(IN_FLIGHT), "--checkpoint-interval", "1",
                "--detached", "--option", "request.timeout=4 min", "--option", "request.retry.deadline=5 min",
                "--option", "request.queue-size=10000",
            )  # fmt: skip
            job = next(line.split()[-1] for line in submitted.splitlines() if line.startswith("responses: job "))

            def sent() -> float:
                return sim.stats().get("requests /v1/chat/completions", 0.0)

            wait_for("every request in flight", lambda: sent() >= IN_FLIGHT, timeout=180)
            all_in_flight_ms = time.time() * 1000

            def checkpoints_since() -> list[dict]:
                history = rest(base, f"/jobs/{job}/checkpoints")["history"]
                return [
                    c for c in history
                    if c["status"] == "COMPLETED" and int(c["trigger_timestamp"]) > all_in_flight_ms
                ]  # fmt: skip

            done = wait_for(
                "three checkpoints with every request in flight", lambda: len(c := checkpoints_since()) >= 3 and c, 60
            )
            durations = [int(c["end_to_end_duration"]) for c in done]
            assert sent() == IN_FLIGHT  # none answered, none sent twice: they were all in flight throughout
            # (More prompts wait for a slot in the request step's queue, 'request.queue-size', far from full.)
            assert max(durations) < 2000, durations
            state_bytes = max(int(c.get("checkpointed_size", c.get("state_size", 0))) for c in done)

            assert "killed TaskManager" in script("kill-taskmanager")
            script("start-taskmanager")
            # Restored from the checkpoint: the 500 prompts in its state are sent again.
            wait_for("the prompts in flight sent again", lambda: sent() >= 2 * IN_FLIGHT, timeout=240)
            request = urllib.request.Request(f"{base}/jobs/{job}?mode=cancel", method="PATCH")
            urllib.request.urlopen(request, timeout=10).close()
            assert wait_for_job_end(base, job, timeout=120) == "CANCELED"
        finally:
            script("stop")
    print(f"in flight: {IN_FLIGHT} requests; checkpoints in {durations} ms, state {state_bytes} bytes")
