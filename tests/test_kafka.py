"""Kafka, for real: a KRaft broker started by deploy/kafka/start.sh (the session fixture `kafka`) and
Flink's Kafka SQL connector from Maven Central (deploy/maven/flink-kafka.pom.xml) on the job's classpath.

Two Flink jobs:
- raw response bodies in a topic of two partitions read with 'format' = 'dspark-vllm' through the Kafka
  connector (valid, malformed, tombstones, a body over the parser's size limit; keys, partitions, offsets and
  timestamps beside the parsed columns), on a PyFlink mini-cluster: every record one row or one error row,
  the same as `parse_batch`;
- the README's Kafka recipe as written (questions topic -> ML_PREDICT with a 'dspark-vllm' model -> answers
  topic with 'sink.delivery-guarantee' = 'exactly-once'), through `dspark-vllm sql`, against the simulator: a
  `read_committed` consumer sees every question's answer exactly once, beside the row that asked; and the same
  on a standalone cluster whose TaskManager is killed mid-run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from connector.parse import parse_batch
from connector.strict import MAX_BODY_BYTES
from tests.flink_support import BAD, FORMAT_COLUMNS, good_body, quoted, read_json_dir

pytest.importorskip("pyflink")

pytestmark = [pytest.mark.kafka, pytest.mark.flink, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
T0_MS = 1_700_000_000_000
TOMBSTONE = "not a body: got NoneType (give bytes or str)"
# The body over the parser's limit goes as one record compressed (zstd: a few KB on the wire, so the broker's
# limits of 1 MB a record and 100 MB a request hold; librdkafka checks the uncompressed size against this).
# Uncompressed, Kafka 4.4's broker fails a produce request over 256 MiB (a NullPointerException in its log).
BIG_PRODUCER = {"message.max.bytes": 300_000_000, "compression.type": "zstd"}


def _records() -> list[dict]:
    """25 good bodies, the malformed ones of test_flink_replay between them, two tombstones and a body one byte
    over the 256 MiB the parser reads; keys `req-<i>`, partition i % 2, timestamp T0 + i seconds."""
    values: list[bytes | None] = [json.dumps(good_body(i)).encode() for i in range(25)]
    for i, (bad, _) in enumerate(BAD):
        values.insert(3 * i + 1, bad)
    values.insert(7, None)
    values.append(None)
    big = b'{"id": "big", "object": "chat.completion", "model": "'
    values.insert(12, big + b"x" * (MAX_BODY_BYTES + 1 - len(big) - 2) + b'"}')
    return [
        {"key": f"req-{i}".encode(), "value": v, "partition": i % 2, "timestamp": T0_MS + 1000 * i}
        for i, v in enumerate(values)
    ]


@pytest.fixture(scope="module")
def format_job(kafka, flink_kafka_jars, tmp_path_factory) -> dict:
    from connector.flink import add_jars, local_environment

    records = _records()
    # Kept for ever: the records' timestamps are of 2023, past the broker's default retention of 7 days (their
    # segments were deleted before the job read them).
    kafka.create_topic("bodies", partitions=2, **{"retention.ms": "-1"})
    kafka.produce("bodies", records, **BIG_PRODUCER)
    values = [r["value"] for r in records]
    expected = parse_batch(values, "coder", backend="cpu", columns=FORMAT_COLUMNS, inline_errors=True).table.to_pylist()
    sizes = [None if v is None else len(v) for v in values]
    del records, values

    out = tmp_path_factory.mktemp("kafka-format") / "out"
    env, t_env = local_environment()
    add_jars(t_env, *flink_kafka_jars)
    t_env.get_config().set("table.local-time-zone", "UTC")
    t_env.execute_sql(f"""
        CREATE TEMPORARY TABLE captured (
            k STRING,
            id STRING, model STRING, created TIMESTAMP(3),
            usage ROW<prompt_tokens INT, total_tokens BIGINT>, choice_finish_reasons ARRAY<STRING>,
            `language` STRING, code_blocks BIGINT,
            error_reason STRING, error_field STRING,
            `partition` INT METADATA VIRTUAL,
            `offset` BIGINT METADATA VIRTUAL,
            `timestamp` TIMESTAMP_LTZ(3) METADATA VIRTUAL
        ) WITH (
            'connector' = 'kafka', 'topic' = 'bodies', 'properties.bootstrap.servers' = '{kafka.bootstrap}',
            'properties.group.id' = 'format-test', 'scan.startup.mode' = 'earliest-offset',
            'scan.bounded.mode' = 'latest-offset',
            'key.format' = 'raw', 'key.fields' = 'k', 'value.fields-include' = 'EXCEPT_KEY',
            'value.format' = 'dspark-vllm', 'value.dspark-vllm.profile' = 'coder'
        )""")
    columns = (
        "k STRING, p INT, o BIGINT, ts STRING, id STRING, model STRING, created STRING, prompt_tokens INT, "
        "total_tokens BIGINT, reasons ARRAY<STRING>, lang STRING, code_blocks BIGINT, error_reason STRING, "
        "error_field STRING"
    )
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE sink ({quoted(columns)}) WITH "
        f"('connector' = 'filesystem', 'path' = '{out}', 'format' = 'json')"
    )
    t_env.execute_sql("""
        INSERT INTO sink SELECT k, `partition`, `offset`, CAST(`timestamp` AS STRING), id, model,
            CAST(created AS STRING), usage.prompt_tokens, usage.total_tokens, choice_finish_reasons, `language`,
            code_blocks, error_reason, error_field
        FROM captured""").wait()
    return {"rows": read_json_dir(out), "expected": expected, "sizes": sizes}


def test_every_record_is_one_row_or_one_error_row(format_job):
    rows, expected = format_job["rows"], format_job["expected"]
    by_key = {}
    for row in rows:
        assert row["k"] not in by_key, f"record {row['k']} came out twice"
        by_key[row["k"]] = row
    assert sorted(by_key) == sorted(f"req-{i}" for i in range(len(expected)))
    for i, want in enumerate(expected):
        row = by_key[f"req-{i}"]
        assert (row["error_reason"], row["error_field"]) == (want["error_reason"], want["error_field"]), i
        assert (row["id"], row["model"], row["prompt_tokens"], row["total_tokens"]) == (
            want["id"],
            want["model"],
            want["prompt_tokens"],
            want["total_tokens"],
        )
        assert row["reasons"] == want["choice_finish_reasons"]
        assert (row["lang"], row["code_blocks"]) == (want["language"], want["code_blocks"])
        if want["created"] is not None:
            assert row["created"].startswith(want["created"].strftime("%Y-%m-%d %H:%M:%S"))


def test_tombstones_and_the_body_over_the_limit_are_error_rows(format_job):
    rows = {r["k"]: r for r in format_job["rows"]}
    tombstones = [f"req-{i}" for i, size in enumerate(format_job["sizes"]) if size is None]
    (big,) = [f"req-{i}" for i, size in enumerate(format_job["sizes"]) if size and size > MAX_BODY_BYTES]
    assert len(tombstones) == 2
    assert all(rows[k]["error_reason"] == TOMBSTONE and rows[k]["id"] is None for k in tombstones)
    assert rows[big]["error_reason"] == f"body too large: over {MAX_BODY_BYTES} bytes" and rows[big]["id"] is None
    assert sum(r["error_reason"] is None for r in rows.values()) == 25


def test_kafka_metadata_columns_beside_the_parsed_ones(format_job):
    rows = format_job["rows"]
    for p in (0, 1):
        keys = [int(r["k"].split("-")[1]) for r in sorted(rows, key=lambda r: r["o"]) if r["p"] == p]
        assert keys == [i for i in range(len(format_job["expected"])) if i % 2 == p]  # written in order
        assert [r["o"] for r in rows if r["p"] == p] and sorted(r["o"] for r in rows if r["p"] == p) == list(
            range(len(keys))
        )
    for row in rows:
        i = int(row["k"].split("-")[1])
        when = datetime.fromtimestamp((T0_MS + 1000 * i) / 1000, UTC)
        assert row["ts"].startswith(when.strftime("%Y-%m-%d %H:%M:%S")), row["ts"]


# ------------------------------------------------------------------------------------------------------------
# The README's recipe: keyed questions -> ML_PREDICT -> answers beside the rows that asked, exactly once
# ------------------------------------------------------------------------------------------------------------

USERS = 7
README_BROKER = "127.0.0.1:9092"
README_QUESTIONS = 4  # the rows of the README's questions.sql
README_ENDPOINT = "http://127.0.0.1:8000"


def readme_recipe(name: str = "kafka-recipe") -> str:
    """The SQL of one of the README's Kafka recipes, as written there (between its `name` markers)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(rf"<!-- {name}:start -->\s*```sql\n(.*?)```\s*<!-- {name}:end -->", text, re.S)
    assert block, f"README.md has no {name} block"
    return block.group(1)


def run_readme_sql(sql: str, script: Path, jars: list[Path]) -> subprocess.CompletedProcess:
    """The README's command: `dspark-vllm sql FILE --set "pipeline.jars=..."` (Flink's log beside the script)."""
    script.write_text(sql)
    command = [
        str(Path(sys.executable).parent / "dspark-vllm"),
        "sql",
        str(script),
        "--set",
        "pipeline.jars=" + ";".join(f"file://{jar}" for jar in jars),  # as the README's command gives them
        "--log",
        str(script.with_suffix(".log")),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)


def questions(count: int, topic: str, kafka) -> list[tuple[str, str, int]]:
    """`count` questions as JSON records keyed by user, every question asked twice, by two users; timestamps of
    now (records older than the broker's retention, 7 days, may be deleted before the job reads them: a run with
    timestamps of 2023 read no question)."""
    now_ms = int(time.time() * 1000)
    asked = [
        (f"user-{n % USERS}", f"Write a function that returns {n // 2}; answer in JSON.", now_ms + n)
        for n in range(count)
    ]
    kafka.create_topic(topic, partitions=2)
    kafka.produce(
        topic,
        [
            {"key": user.encode(), "value": json.dumps({"question": q}).encode(), "timestamp": ts}
            for user, q, ts in asked
        ],
    )
    return asked


@pytest.fixture(scope="module")
def recipe_job(kafka, flink_kafka_jars, tmp_path_factory) -> dict:
    """The README's three files in turn, as its commands run them: questions.sql puts the questions into the topic,
    kafka-answers.sql answers them, read-answers.sql prints the committed answers."""
    from connector.simulator import testing

    root = tmp_path_factory.mktemp("kafka-recipe")
    kafka.create_topic("questions", partitions=2)
    kafka.create_topic("answers", partitions=2)

    def here(sql: str) -> str:  # where this run's broker and simulator are: the only change to the recipes
        return sql.replace(README_BROKER, kafka.bootstrap).replace(README_ENDPOINT, sim.url)

    with testing.serve_simulator(mode="process", profiles=("coder",), seed=5) as sim:
        put = run_readme_sql(here(readme_recipe("kafka-questions")), root / "questions.sql", flink_kafka_jars)
        assert put.returncode == 0, put.stderr[-4000:]
        records = kafka.consume("questions", expect=README_QUESTIONS)
        asked = [(m.key().decode(), json.loads(m.value())["question"], m.timestamp()[1]) for m in records]
        sql = readme_recipe()
        assert sql.count(README_BROKER) == 2 and sql.count(README_ENDPOINT) == 1
        run = run_readme_sql(here(sql), root / "kafka-answers.sql", flink_kafka_jars)
        stats = sim.stats()
    assert run.returncode == 0, run.stderr[-4000:]
    committed = kafka.consume("answers", expect=len(asked), isolation="read_committed")
    everything = kafka.consume("answers", expect=len(asked), isolation="read_uncommitted")
    read = run_readme_sql(here(readme_recipe("kafka-read")), root / "read-answers.sql", flink_kafka_jars)
    return {"asked": asked, "committed": committed, "everything": everything, "stats": stats, "run": run,
            "read": read}  # fmt: skip


def test_the_readme_puts_its_questions_into_the_topic(recipe_job):
    """The recipe read a topic that nothing in the README filled: questions.sql puts them there, keyed by user,
    two users asking the same question."""
    asked = recipe_job["asked"]
    assert len(asked) == README_QUESTIONS
    assert len({u for u, _, _ in asked}) == README_QUESTIONS and len({q for _, q, _ in asked}) < README_QUESTIONS


def test_recipe_answers_every_question_beside_its_row_once_read_committed(recipe_job):
    """ML_PREDICT over a Kafka topic (issues 27 and 28): every question's answer is committed once, with the
    columns of the row that asked (the key, the question, the record's timestamp); two users asking the same
    question get an answer each."""
    committed = recipe_job["committed"]
    rows = [json.loads(m.value()) for m in committed]
    assert sorted((r["user_id"], r["question"]) for r in rows) == sorted((u, q) for u, q, _ in recipe_job["asked"])
    for row in rows:
        assert row["error"] is None, row["error"]
        assert row["completion_tokens"] > 0 and row["latency_ms"] > 0 and row["language"]
        # The record's Kafka timestamp, carried through ML_PREDICT (TIMESTAMP_LTZ as text, in the session zone).
        assert row["asked_at"] is not None
    assert recipe_job["stats"]["requests /v1/chat/completions"] == len(recipe_job["asked"])


def test_recipe_writes_in_transactions(recipe_job, kafka):
    """The answers were written in Kafka transactions: each partition's commit markers take offsets of their own,
    so its end lies past its records (a plain write ends right after them); a read_uncommitted reader sees the
    same records, none aborted in a run without failures; a record's key is the user who asked."""
    committed = sorted((m.key(), m.value()) for m in recipe_job["committed"])
    assert sorted((m.key(), m.value()) for m in recipe_job["everything"]) == committed
    assert all(json.loads(v)["user_id"] == k.decode() for k, v in committed)
    for partition, end in kafka.end_offsets("answers").items():
        records = sum(m.partition() == partition for m in recipe_job["committed"])
        assert end > records > 0, (partition, end, records)


def test_the_readme_reads_the_answers_back(recipe_job):
    """read-answers.sql prints each committed answer beside its user and question, and the count line."""
    read = recipe_job["read"]
    assert read.returncode == 0, read.stderr[-3000:]
    for user, question, _ in recipe_job["asked"]:
        assert re.search(rf"\| +{user} \| +{re.escape(question)} \|", read.stdout), read.stdout
    assert read.stdout.splitlines()[-1] == f"{README_QUESTIONS} rows, 0 error rows (error set)", read.stdout


def test_the_recipe_over_an_empty_topic_says_it_waits_for_questions(kafka, flink_kafka_jars, tmp_path):
    """The recipe without 'scan.bounded.mode' (as its comment says, to keep answering) over a topic with no record
    printed nothing at all: a job waiting for questions looked like a job that hangs. The model says, once, that
    it has had no row to ask and that the job waits for its input's records; the job goes on (it is stopped)."""
    from connector.simulator import testing

    kafka.create_topic("questions-none")
    sql = readme_recipe().replace("'questions'", "'questions-none'").replace("'dspark-answers'", "'dspark-none'")
    sql = re.sub(r"\n *'scan.bounded.mode' = 'latest-offset',[^\n]*", "", sql)
    assert "questions-none" in sql and "scan.bounded.mode" not in sql
    with testing.serve_simulator(mode="process", profiles=("coder",)) as sim:
        script = tmp_path / "kafka-answers.sql"
        script.write_text(sql.replace(README_BROKER, kafka.bootstrap).replace(README_ENDPOINT, sim.url))
        jars = "pipeline.jars=" + ";".join(f"file://{jar}" for jar in flink_kafka_jars)
        command = [str(Path(sys.executable).parent / "dspark-vllm"), "sql", str(script), "--set", jars]
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        # A job that never says it is stopped (its stderr ends), so that the test fails instead of waiting for ever.
        deadline = threading.Timer(300, proc.send_signal, [signal.SIGTERM])
        deadline.start()
        try:
            assert proc.stderr is not None
            said = []
            for line in proc.stderr:
                said.append(line)
                if line.startswith("dspark-vllm: model "):
                    break
            assert said and said[-1].startswith("dspark-vllm: model "), said
            assert "has had no row to ask for 10 s: the job is waiting for its input's records" in said[-1]
            assert proc.poll() is None  # the job still runs, ready for questions
        finally:
            deadline.cancel()
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()


# ------------------------------------------------------------------------------------------------------------
# The recipe on a standalone cluster whose TaskManager is killed mid-run
# ------------------------------------------------------------------------------------------------------------

FAILOVER_PROMPTS = 300


@pytest.mark.cluster
def test_recipe_answers_each_prompt_once_when_the_taskmanager_dies(kafka, flink_kafka_jars, tmp_path):
    """The README's recipe through `flink run -c SqlRunner` on jobs/standalone_cluster.sh (4 requests in flight,
    200 ms each, so that the run outlasts a checkpoint): after a checkpoint completed while answers were being
    written, the TaskManager is SIGKILLed and a new one started; the job restarts from the checkpoint (Kafka's
    source offsets, ML_PREDICT's rows in flight, the open transactions aborted) and a read_committed reader sees
    every question's answer exactly once."""
    from connector.simulator.testing import serve_simulator
    from tests.cluster import cluster_script, rest, wait_for, wait_for_job_end

    asked = questions(FAILOVER_PROMPTS, "questions-failover", kafka)
    kafka.create_topic("answers-failover", partitions=2)
    sql = (
        readme_recipe()
        .replace("'questions'", "'questions-failover'")
        .replace("'answers'", "'answers-failover'")
        .replace("'dspark-answers'", "'dspark-failover'")
        .replace("'provider' = 'dspark-vllm',", "'provider' = 'dspark-vllm', 'request.concurrency' = '4',")
    )
    assert sql.count("failover") == 4 and "'request.concurrency' = '4'" in sql
    jars = ";".join(f"file://{jar}" for jar in flink_kafka_jars)
    script = cluster_script(tmp_path)
    with serve_simulator(mode="process", profiles=("coder",), seed=11, latency_ms=200.0) as sim:
        (tmp_path / "failover.sql").write_text(
            sql.replace(README_BROKER, kafka.bootstrap).replace(README_ENDPOINT, sim.url)
        )
        submit = None
        try:
            script("start")
            base = "http://127.0.0.1:" + (tmp_path / "cluster" / "rest.port").read_text().strip()
            # Attached, in the background: the client waits for the job through its restart.
            submit = subprocess.Popen(
                [str(ROOT / "jobs" / "standalone_cluster.sh"), "submit-sql", str(tmp_path / "failover.sql"),
                 f"pipeline.jars={jars}"],
                env={**os.environ, "DSPARK_PYTHON": sys.executable, "DSPARK_CLUSTER_DIR": str(tmp_path / "cluster")},
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip

            def running_job() -> str | None:
                jobs = rest(base, "/jobs/overview")["jobs"]
                return next((j["jid"] for j in jobs if j["state"] == "RUNNING"), None)

            def sent() -> float:
                return sim.stats().get("requests /v1/chat/completions", 0.0)

            def last_checkpoint_triggered_ms(job: str) -> int:
                latest = rest(base, f"/jobs/{job}/checkpoints")["latest"]["completed"]
                return int(latest["trigger_timestamp"]) if latest else 0

            job = wait_for("the job to run", running_job, timeout=180)
            wait_for("the first requests", lambda: sent() >= 20, timeout=120)
            flowing_since_ms = time.time() * 1000
            wait_for("a checkpoint", lambda: last_checkpoint_triggered_ms(job) > flowing_since_ms, timeout=60)
            sent_before_kill = sent()
            assert "killed TaskManager" in script("kill-taskmanager")
            script("start-taskmanager")
            assert wait_for_job_end(base, job, timeout=300) == "FINISHED"
            history = rest(base, f"/jobs/{job}/exceptions")["exceptionHistory"]["entries"]
            output, _ = submit.communicate(timeout=120)
            assert submit.returncode == 0, output[-3000:]
            sent_total = sent()
        finally:
            if submit is not None and submit.poll() is None:
                submit.kill()
                submit.wait()
            script("stop")

    assert history, "no failure recorded: the TaskManager was not killed while the job ran"
    assert 0 < sent_before_kill < FAILOVER_PROMPTS, sent_before_kill
    answers = [json.loads(m.value()) for m in kafka.consume("answers-failover", expect=FAILOVER_PROMPTS)]
    counts = Counter((a["user_id"], a["question"]) for a in answers)
    expected = {(u, q) for u, q, _ in asked}
    assert set(counts) == expected, f"{len(expected - set(counts))} questions lost"
    assert [p for p, n in counts.items() if n > 1] == []  # exactly once, to a read_committed reader
    assert all(a["error"] is None for a in answers), [a["error"] for a in answers if a["error"]][:3]
    print(
        f"kafka failover: {FAILOVER_PROMPTS} questions, {len(answers)} committed answers, {sent_total:.0f} requests "
        f"({sent_before_kill:.0f} before the kill), {len(history)} failure(s)"
    )
