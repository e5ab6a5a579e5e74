"""Several replicas behind one model: ML_PREDICT at parallelism 2 over three simulators, one killed by its pid.

The Requester's routing, ejection and failover are tested against real servers in JUnit
(java/src/test/.../request/ReplicasTest.java); here the same in a Flink job, through `dspark-vllm sql`. Three
replicas that serve 16 completions at once each (100 ms; 429 beyond), two subtasks with 'request.concurrency' =
'auto' (each its own limit on each replica), each reading a file of its own, one replica killed after 500 requests:
every key comes out once, none as an error row, each row names the replica that answered it (`request.replica`),
every replica had its share before the kill, both ML_PREDICT subtasks sent requests (their per-replica metrics), and
under 5% of the requests were answered 429. And a 'dspark-vllm' table at parallelism 2 with
'prefix' routing: both subtasks send each head to the same replica; a model with 'request.routing.key-column': both
subtasks send each user's rows to the same replica. And a replica that hangs (takes completions, never answers them,
its /health answering): ejected by its timeouts, taken back on probation, every prompt answered by the other.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.flink_support import read_json_dir

pytest.importorskip("pyflink")

from connector.simulator import testing  # noqa: E402

pytestmark = [pytest.mark.flink, pytest.mark.slow]

ROWS = 2000
KILL_AFTER = 500  # completions asked for, all replicas together

SQL = """
SET 'parallelism.default' = '2';
CREATE TABLE questions (k STRING, question STRING) WITH (
  'connector' = 'filesystem', 'path' = '{questions}', 'format' = 'csv');
CREATE MODEL answerer
  INPUT (question STRING)
  OUTPUT (content STRING, `request.replica` STRING, `error.reason` STRING)
  WITH ('provider' = 'dspark-vllm', 'endpoint' = '{endpoint}', 'model' = '{model}', 'request.max-tokens' = '4',
        'request.concurrency' = 'auto');
CREATE TABLE answers (k STRING, content STRING, replica STRING, reason STRING)
  WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'json');
INSERT INTO answers SELECT k, content, `request.replica`, `error.reason`
  FROM ML_PREDICT(TABLE questions, MODEL answerer, DESCRIPTOR(question),
                  MAP['async', 'true', 'output-mode', 'ALLOW_UNORDERED', 'max-concurrent-operations', '64']);
"""


def _answers(sim: testing.RunningSimulator) -> float:
    try:
        return sim.stats().get("requests /v1/chat/completions", 0.0)  # (not status_200: /metrics is one too)
    except OSError:
        return 0.0


def _with_metrics(sql_file: Path, log_file: Path) -> list[str]:
    """The command `dspark-vllm sql` runs, with Flink's Slf4j metrics reporter on its class path: every second
    it logs each metric under `dspark-subtask.<subtask index>.<operator>`, the request step's per-replica gauges
    among them."""
    from connector.flink.sql_cli import java_command

    home = Path(next(iter(importlib.util.find_spec("pyflink").submodule_search_locations)))
    settings = [
        "metrics.reporter.slf.factory.class=org.apache.flink.metrics.slf4j.Slf4jReporterFactory",
        "metrics.reporter.slf.interval=1 SECONDS",
        "metrics.scope.operator=dspark-subtask.<subtask_index>.<operator_name>",
    ]
    command = java_command(str(sql_file), settings, str(log_file))
    (reporter,) = (home / "plugins" / "metrics-slf4j").glob("flink-metrics-slf4j-*.jar")
    at = command.index("-cp") + 1
    command[at] += os.pathsep + str(reporter)
    return command


def _answers_by_subtask(log_file: Path) -> dict[int, int]:
    """Each ML_PREDICT subtask's answers, all replicas (the last report of its `numAnswers` gauges)."""
    last: dict[tuple[int, str], int] = {}
    pattern = r"^dspark-subtask\.(\d+)\..*\.dspark\.replica\.(\S+)\.numAnswers: (\d+)$"
    for subtask, replica, n in re.findall(pattern, log_file.read_text(errors="replace"), re.MULTILINE):
        last[(int(subtask), replica)] = int(n)
    by_subtask: dict[int, int] = {}
    for (subtask, _), n in last.items():
        by_subtask[subtask] = by_subtask.get(subtask, 0) + n
    return by_subtask


def test_a_replica_killed_mid_run_costs_no_row(tmp_path):
    questions = tmp_path / "questions"
    questions.mkdir()
    for part in range(2):  # a file is one split, read by one source subtask: a file for each subtask
        (questions / f"part-{part}.csv").write_text("".join(f"k{i},What is {i} + {i}?\n" for i in range(part, ROWS, 2)))
    with ExitStack() as stack:
        sims = [
            stack.enter_context(
                testing.serve_simulator(mode="process", profiles=("openai",), seed=i, latency_ms=100, capacity=16)
            )
            for i in range(3)
        ]
        with urllib.request.urlopen(sims[0].url + "/v1/models", timeout=10) as response:
            model = json.load(response)["data"][0]["id"]
        victim = sims[1]
        killed_at: list[float] = []
        shares: list[float] = []
        victim_throttled: list[float] = []

        def kill_mid_run() -> None:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                seen = [_answers(s) for s in sims]
                if sum(seen) >= KILL_AFTER:
                    shares.extend(n / sum(seen) for n in seen)
                    killed_at.append(_answers(victim))
                    victim_throttled.append(victim.stats().get("throttled", 0.0))
                    assert victim.process is not None
                    os.kill(victim.process.pid, signal.SIGKILL)  # by its pid, as a replica dies
                    return
                time.sleep(0.02)

        watcher = threading.Thread(target=kill_mid_run, daemon=True)
        watcher.start()
        script = tmp_path / "enrich.sql"
        endpoint = ",".join(s.url for s in sims)
        script.write_text(SQL.format(questions=questions, endpoint=endpoint, model=model, out=tmp_path / "out"))
        log_file = tmp_path / "flink.log"
        run = subprocess.run(_with_metrics(script, log_file), capture_output=True, text=True, timeout=600)
        watcher.join(timeout=10)
        survivors = [_answers(s) for s in (sims[0], sims[2])]
        throttled = sum(s.stats().get("throttled", 0.0) for s in (sims[0], sims[2])) + sum(victim_throttled)
        asked = sum(survivors) + killed_at[0] if killed_at else 0.0
    assert run.returncode == 0, run.stderr[-3000:]
    assert killed_at, "the replica was killed while the job ran"
    rows = read_json_dir(tmp_path / "out")
    assert sorted(r["k"] for r in rows) == sorted(f"k{i}" for i in range(ROWS))  # every key once
    assert [r for r in rows if r["reason"]] == []  # no error row: the others took its requests
    by_replica: dict[str, int] = {}
    for r in rows:
        by_replica[r["replica"]] = by_replica.get(r["replica"], 0) + 1
    names = {f"127.0.0.1:{s.port}" for s in sims}
    assert set(by_replica) <= names and len(by_replica) == 3, by_replica
    # the killed replica answered at most what it was asked before it died; the two others the rest
    assert 0 < by_replica[f"127.0.0.1:{victim.port}"] <= killed_at[0] < ROWS / 2
    assert sum(survivors) >= ROWS - by_replica[f"127.0.0.1:{victim.port}"]
    assert min(shares) >= 0.20, shares  # before the kill, each replica had its share
    # 'auto' on each replica: few 429s (the victim's counted at its kill)
    assert throttled < 0.05 * asked, (throttled, asked)
    # parallelism 2 is two senders: both ML_PREDICT subtasks had rows and sent requests
    by_subtask = _answers_by_subtask(log_file)
    assert sorted(by_subtask) == [0, 1] and min(by_subtask.values()) > 0, by_subtask


# A 'dspark-vllm' table in request mode on the two replicas, each answer's prompt, replica and error reason in a
# JSON file; {{parallelism}} and the table's {{options}} are each test's.
ANSWERS_SQL = """
SET 'parallelism.default' = '{parallelism}';
CREATE TABLE answers_in (
  content STRING,
  prompt STRING METADATA FROM 'request.prompt' VIRTUAL,
  replica STRING METADATA FROM 'request.replica' VIRTUAL,
  reason STRING METADATA FROM 'error.reason' VIRTUAL
) WITH ('connector' = 'dspark-vllm', 'endpoint' = '{{endpoint}}', 'model' = '{{model}}', 'prompts.path' = '{{prompts}}',
        {options}, 'parse.backend' = 'cpu');
CREATE TABLE answers (prompt STRING, replica STRING, reason STRING)
  WITH ('connector' = 'filesystem', 'path' = '{{out}}', 'format' = 'json');
INSERT INTO answers SELECT prompt, replica, reason FROM answers_in;
"""
TABLE_SQL = ANSWERS_SQL.format(
    parallelism=2,
    options="'request.routing' = 'prefix', 'request.routing.prefix-length' = '24', 'request.routing.load-bound' = '1000'",
)


def _rows_of_sql_on_two_replicas(
    tmp_path: Path, sql: str, sims_with: tuple[dict, dict] = ({}, {}), **values: object
) -> tuple[list[dict], list[str], list[float]]:
    """Runs `sql` (a template of {endpoint}, {model}, {out} and `values`) through `dspark-vllm sql` against two
    simulators (each with the changes of its `sims_with`), the endpoint naming both: the rows it wrote to {out},
    the two replicas' names, and the completions each was asked for."""
    cli = shutil.which("dspark-vllm", path=str(Path(sys.executable).parent))
    assert cli, "the dspark-vllm command is installed beside this Python"
    with ExitStack() as stack:
        sims = [
            stack.enter_context(
                testing.serve_simulator(
                    mode="process", profiles=("openai",), **{"seed": i, "latency_ms": 5, **sims_with[i]}
                )
            )
            for i in range(2)
        ]
        with urllib.request.urlopen(sims[0].url + "/v1/models", timeout=10) as response:
            model = json.load(response)["data"][0]["id"]
        script = tmp_path / "job.sql"
        endpoint = ",".join(s.url for s in sims)
        script.write_text(sql.format(endpoint=endpoint, model=model, out=tmp_path / "out", **values))
        run = subprocess.run([cli, "sql", str(script)], capture_output=True, text=True, timeout=600)
        asked = [_answers(s) for s in sims]
    assert run.returncode == 0, run.stderr[-3000:]
    return read_json_dir(tmp_path / "out"), [f"127.0.0.1:{s.port}" for s in sims], asked


def test_a_table_at_parallelism_2_sends_each_head_to_one_replica(tmp_path):
    """Prefix routing is a function of the heads seen and the replicas, the same in every subtask: at parallelism 2
    (two request steps, each with its own connections and limits), once each has seen the 7 heads, every prompt of
    a head goes to one replica (no load bound here: 'request.routing.load-bound' = '1000'), and the table's
    `request.replica` says which."""
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    for part in range(2):  # two files: each subtask reads one
        (prompts / f"p{part}.txt").write_text(
            "".join(f"head number {h:02d} of seven | question {part}-{i}\n" for i in range(120) for h in [i % 7])
        )
    rows, names, _ = _rows_of_sql_on_two_replicas(tmp_path, TABLE_SQL, prompts=prompts)
    assert sorted(r["prompt"] for r in rows) == sorted(
        f"head number {i % 7:02d} of seven | question {part}-{i}" for part in range(2) for i in range(120)
    )  # every prompt once
    assert [r for r in rows if r["reason"]] == []
    replicas_of: dict[str, set[str]] = {}
    for r in rows:
        if int(r["prompt"].rsplit("-", 1)[1]) >= 7:  # once each subtask has seen the 7 heads (while new heads
            replicas_of.setdefault(r["prompt"][:24], set()).add(r["replica"])  # come, each one's share moves)
    assert len(replicas_of) == 7 and all(len(v) == 1 for v in replicas_of.values()), replicas_of
    assert set().union(*replicas_of.values()) <= set(names)


KEY_SQL = """
SET 'parallelism.default' = '2';
CREATE TABLE questions (user_id STRING, question STRING) WITH (
  'connector' = 'filesystem', 'path' = '{questions}', 'format' = 'json');
CREATE MODEL answerer
  INPUT (user_id STRING, question STRING)
  OUTPUT (content STRING, `request.replica` STRING, `error.reason` STRING)
  WITH ('provider' = 'dspark-vllm', 'endpoint' = '{endpoint}', 'model' = '{model}', 'request.max-tokens' = '4',
        'prompt.template' = '{{question}}', 'request.routing' = 'prefix', 'request.routing.key-column' = 'user_id',
        'request.routing.load-bound' = '1000');
CREATE TABLE answers (user_id STRING, question STRING, replica STRING, reason STRING)
  WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'json');
INSERT INTO answers SELECT user_id, question, `request.replica`, `error.reason`
  FROM ML_PREDICT(TABLE questions, MODEL answerer, DESCRIPTOR(user_id, question));
"""


def test_a_model_routes_each_user_to_one_replica(tmp_path):
    """'request.routing.key-column' = 'user_id': every row of a user goes to one replica (where that user's
    conversation is cached), in both subtasks (once each has seen the 16 users: their first rows can move), though each row asks a different question (by the head of its
    messages they would spread over both); a row whose user_id is NULL goes by its head and is answered too. The
    load bound is off ('1000'), as in the table's test above: here only the key chooses."""
    questions = tmp_path / "questions"
    questions.mkdir()
    users = [f"user-{u:02d}" for u in range(16)]
    for part in range(2):  # two files: each subtask reads one
        lines = [
            {"user_id": u, "question": f"Question {part}-{i} of {u}: what is {i} + {part}?"}
            for i in range(6)
            for u in users
        ]
        lines += [{"user_id": None, "question": f"Question {part}-{i} of nobody"} for i in range(4)]
        (questions / f"q{part}.json").write_text("".join(json.dumps(line) + "\n" for line in lines))
    rows, names, _ = _rows_of_sql_on_two_replicas(tmp_path, KEY_SQL, questions=questions)
    assert len(rows) == 2 * (6 * 16 + 4) and len({r["question"] for r in rows}) == len(rows)  # every row once
    assert [r for r in rows if r["reason"]] == []
    replicas_of: dict[str, set[str]] = {}
    for r in rows:
        if r["user_id"] is not None and not r["question"].startswith(("Question 0-0 ", "Question 1-0 ")):
            replicas_of.setdefault(r["user_id"], set()).add(r["replica"])  # (once each subtask has seen the users)
    assert sorted(replicas_of) == users and all(len(v) == 1 for v in replicas_of.values()), replicas_of
    assert set().union(*replicas_of.values()) == set(names)  # the users spread over both
    assert {r["replica"] for r in rows if r["user_id"] is None} <= set(names)


HUNG_SQL = ANSWERS_SQL.format(
    parallelism=1,
    options="'request.timeout' = '500 ms', 'request.concurrency' = '2', 'request.retry.initial-backoff' = '2 s'",
)


def test_a_replica_that_hangs_is_ejected(tmp_path):
    """One of two replicas takes every completion and never answers it, while its /health answers 200: its
    timeouts eject it (3 in a row), its probes take it back on probation (one request at a time), each timeout
    there ejects it again, and every prompt is answered by the other replica, none an error row. Without the
    ejection, it held its two slots all along, each request there costing the timeout: about 4 a second for the
    job's 10 s or so (300 prompts at 2 x 50 ms on the other). The probes' first backoff step of 2 s (1-2 s with
    its jitter, then 2-4 s...) keeps the requests that probation lets through few, however long the job takes
    (the timed-out requests go to the other replica at once, without a backoff)."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("".join(f"question {i}\n" for i in range(300)))
    hung, good = {"faults": {"hang": 1.0}}, {"latency_ms": 50}
    rows, names, asked = _rows_of_sql_on_two_replicas(tmp_path, HUNG_SQL, (hung, good), prompts=prompts)
    assert sorted(r["prompt"] for r in rows) == sorted(f"question {i}" for i in range(300))  # every prompt once
    assert [r for r in rows if r["reason"]] == []
    assert {r["replica"] for r in rows} == {names[1]}
    assert 3 <= asked[0] <= 15, asked  # ejected after 3; then one request per probe that took it back
