"""The response store ('request.store') and the cache ('request.cache') in real Flink jobs against the simulator.

Two jobs, each a statement set. The first answers a rate table (30 identical prompts; its folder store holds a
FIFO, which is left alone), a model (6 rows, two of them with the same question) and a table whose store cannot be
opened (a file where the folder should be). The second runs the same table and model again over the same stores,
as a restored job does: every answer comes from the store and nothing is sent, but for the one row whose record
was damaged between the runs (skipped, sent again); a second table of other request ids with 'request.cache' is
answered from the cache, and a third without it is sent. The simulator counts what it received.

Every test runs on both stores: a folder ('file://...') and a Kafka topic ('kafka://...', on the session's real
broker, the `kafka` fixture); the Kafka store that cannot be opened is one whose broker is down (a closed port).
"""

from __future__ import annotations

import csv
import json
import os
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("pyflink")

from connector.simulator import testing  # noqa: E402

pytestmark = [pytest.mark.flink, pytest.mark.slow]

N = 30
QUESTIONS = ["What is 2+2?", "What is 2+2?", "Name a prime.", "Name a colour.", "What is 3+3?", "Why?"]
REQUESTS = "requests /v1/chat/completions"


def read_json_dir(path: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(path.rglob("part-*")) for line in f.read_text().splitlines() if line]


def table_ddl(name: str, url: str, model: str, **options: str | None) -> str:
    given = {
        "connector": "dspark-vllm", "endpoint": url, "model": model, "prompts.rate": "200",
        "prompts.count": str(N), "prompts.template": "The same question for every row",
        "request.retry.max-attempts": "1", "parse.backend": "cpu", **options,
    }  # fmt: skip
    with_ = ", ".join(f"'{k}' = '{v}'" for k, v in given.items() if v is not None)
    return (
        f"CREATE TEMPORARY TABLE {name} (content STRING, "
        "rid STRING METADATA FROM 'request.id' VIRTUAL, `key` STRING METADATA FROM 'request.key' VIRTUAL, "
        "cached BOOLEAN METADATA FROM 'request.cached' VIRTUAL, reason STRING METADATA FROM 'error.reason' VIRTUAL"
        f") WITH ({with_})"
    )


def model_ddl(url: str, model: str, store: str) -> str:
    return (
        "CREATE TEMPORARY MODEL answerer INPUT (user_id STRING, question STRING) "
        "OUTPUT (content STRING, `request.key` STRING, `request.cached` BOOLEAN, `error.reason` STRING) WITH ("
        f"'provider' = 'dspark-vllm', 'endpoint' = '{url}', 'model' = '{model}', 'prompt.template' = "
        f"'{{question}}', 'request.retry.max-attempts' = '1', 'request.store' = '{store}')"
    )


def run(url: str, model: str, out: Path, stores: dict[str, str], second: bool) -> None:
    from connector.flink import local_environment

    _, t_env = local_environment()
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE questions (user_id STRING, question STRING) WITH ('connector' = 'filesystem', "
        f"'path' = '{out / 'questions.csv'}', 'format' = 'csv')"
    )
    t_env.execute_sql(model_ddl(url, model, stores["model"]))
    tables = {"first": {"request.store": stores["table"]}}
    if second:
        tables["cached"] = {"request.store": stores["table"], "request.cache": "1 h"}
        tables["uncached"] = {"request.store": stores["table"]}
    else:
        tables["broken"] = {"request.store": stores["broken"]}
        if "compressed" in stores:
            tables["compressed"] = {"request.store": stores["compressed"]}
        # a prompts file of two identical lines: two rows, so two requests and two keys
        tables["lines"] = {
            "request.store": stores["lines"], "prompts.path": str(out / "same.txt"), "prompts.rate": None,
            "prompts.count": None, "prompts.template": None,
        }  # fmt: skip
    statements = t_env.create_statement_set()
    run_name = "second" if second else "first"
    for name, options in tables.items():
        t_env.execute_sql(table_ddl(name, url, model, **options))
        sink = out / run_name / name
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE sink_{name} (content STRING, rid STRING, `key` STRING, cached BOOLEAN, "
            f"reason STRING) WITH ('connector' = 'filesystem', 'path' = '{sink}', 'format' = 'json')"
        )
        statements.add_insert_sql(f"INSERT INTO sink_{name} SELECT content, rid, `key`, cached, reason FROM {name}")
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE sink_model (user_id STRING, question STRING, content STRING, `key` STRING, "
        f"cached BOOLEAN, reason STRING) WITH ('connector' = 'filesystem', 'path' = '{out / run_name / 'model'}', "
        "'format' = 'json')"
    )
    statements.add_insert_sql(
        "INSERT INTO sink_model SELECT user_id, question, content, `request.key`, `request.cached`, `error.reason` "
        "FROM ML_PREDICT(TABLE questions, MODEL answerer, DESCRIPTOR(user_id, question))"
    )
    statements.execute().wait()


def closed_port() -> int:
    import socket

    with socket.socket() as s:  # nothing listens there once it is closed
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module", params=["filesystem", pytest.param("kafka", marks=pytest.mark.kafka)])
def jobs(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("store")
    (out / "same.txt").write_text("The same line twice\nThe same line twice\n")
    with open(out / "questions.csv", "w", newline="") as f:
        csv.writer(f).writerows([f"user-{i}", q] for i, q in enumerate(QUESTIONS))
    if request.param == "kafka":
        broker = request.getfixturevalue("kafka")
        stores = {
            "table": f"kafka://{broker.bootstrap}/answers-table",
            "model": f"kafka://{broker.bootstrap}/answers-model",
            "broken": f"kafka://127.0.0.1:{closed_port()}/answers",
            # records compressed with zstd, a codec neither the jar nor Flink's lib carries: the store cannot read
            # them (lz4 and snappy it can: flink-dist has both)
            "compressed": f"kafka://{broker.bootstrap}/answers-zstd",
            "lines": f"kafka://{broker.bootstrap}/answers-lines",
        }
        broker.create_topic("answers-zstd")
        broker.produce("answers-zstd", [{"key": bytes(32), "value": bytes(200)}] * 3, **{"compression.type": "zstd"})
    else:
        broken = out / "not-a-folder"
        broken.write_text("a file where the store's folder should be\n")
        # a FIFO named as a store file: opening read it, and waited for ever for a writer (it is not a regular file)
        (out / "table-store").mkdir()
        os.mkfifo(out / "table-store" / "part-9-0-fifo.responses")
        stores = {
            "table": (out / "table-store").as_uri(), "model": str(out / "model-store"), "broken": broken.as_uri(),
            "lines": (out / "lines-store").as_uri(),
        }  # fmt: skip
    with testing.serve_simulator(mode="thread", profiles=("openai",), seed=3) as sim:
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=10) as response:
            model = json.load(response)["data"][0]["id"]
        run(sim.url, model, out, stores, second=False)
        first = sim.stats().get(REQUESTS, 0)
        broker = request.getfixturevalue("kafka") if request.param == "kafka" else None
        damaged = damage_one_record(stores["table"], read_json_dir(out / "first" / "first"), broker)
        run(sim.url, model, out, stores, second=True)
        second = sim.stats().get(REQUESTS, 0) - first
    result = {"sent_first": first, "sent_second": second, "damaged": damaged}
    for run_name in ("first", "second"):
        for name in ("first", "broken", "compressed", "cached", "uncached", "model", "lines"):
            if (out / run_name / name).exists():
                result[(run_name, name)] = read_json_dir(out / run_name / name)
    if request.param == "kafka":
        result["topic_config"] = broker_topic_config(broker.bootstrap, "answers-table")
    return result


def damage_one_record(store: str, rows: list[dict], broker) -> str:
    """Damages the stored answer of one row of the first run's table (the oldest, so not the one the cache answers
    from): in a folder, a byte of the first record's body (its CRC no longer matches); in a topic, a record of that
    key after the whole one, not of the store's layout. Returns the key (hex)."""
    if broker is not None:
        key = sorted(rows, key=lambda r: int(r["rid"].rsplit("-", 1)[1]))[0]["key"]
        broker.produce(store.rsplit("/", 1)[1], [{"key": bytes.fromhex(key), "value": bytes(200)}])
        return key
    file = sorted(f for f in Path(store.removeprefix("file://")).glob("*.responses") if f.is_file())[0]
    data = bytearray(file.read_bytes())
    data[8 + 88 + 2] ^= 0x20  # magic, length | keys, times, status, body length | the body
    file.write_bytes(bytes(data))
    return bytes(data[8:40]).hex()


def broker_topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=60)
    return {name: entry.value for name, entry in configs.items()}


def test_a_first_run_sends_every_row_once_and_keeps_its_answer(jobs):
    rows = jobs[("first", "first")]
    assert sorted(r["rid"] for r in rows) == sorted(f"first-{n}" for n in range(N))
    assert all(r["reason"] is None and r["content"] and r["cached"] is False for r in rows)
    # 30 identical prompts from 30 rows are 30 requests, 30 keys: each row gets its own answer once
    assert len({r["key"] for r in rows}) == N
    model = jobs[("first", "model")]
    assert sorted(r["user_id"] for r in model) == [f"user-{i}" for i in range(len(QUESTIONS))]
    assert len({r["key"] for r in model}) == len(QUESTIONS)  # the same question from two rows: two keys
    assert all(r["reason"] is None and r["cached"] is False for r in model)
    # the table, the model and the table whose store is broken (and, on Kafka, the zstd topic's) each sent every
    # row; the prompts file its two lines
    assert jobs["sent_first"] == N + len(QUESTIONS) + N * (2 if ("first", "compressed") in jobs else 1) + 2


def test_a_restarted_job_answers_from_the_store_and_sends_nothing_of_it(jobs):
    before = {r["key"]: r for r in jobs[("first", "first")]}
    again = jobs[("second", "first")]
    assert len(again) == N and {r["key"] for r in again} == set(before)
    for r in again:
        if r["key"] == jobs["damaged"]:
            continue  # sent again (test_a_damaged_record_is_skipped_and_the_others_still_answer)
        assert (
            r["cached"] is True and r["content"] == before[r["key"]]["content"] and r["rid"] == before[r["key"]]["rid"]
        )
    model_before = {r["user_id"]: r for r in jobs[("first", "model")]}
    for r in jobs[("second", "model")]:
        assert r["cached"] is True and r["key"] == model_before[r["user_id"]]["key"]
        assert r["content"] == model_before[r["user_id"]]["content"]
    # of the second job, only the table without 'request.cache' sent anything, and the row whose record was damaged
    assert jobs["sent_second"] == N + 1


def test_a_damaged_record_is_skipped_and_the_others_still_answer(jobs):
    """One damaged record turned the whole store off for a minute (28 of 30 rows paid again): it is skipped, its
    row sent again, and every other row is answered from the store."""
    again = {r["key"]: r for r in jobs[("second", "first")]}
    damaged = again.pop(jobs["damaged"])
    assert damaged["cached"] is False and damaged["reason"] is None and damaged["content"]
    assert len(again) == N - 1 and all(r["cached"] is True for r in again.values())


def test_the_cache_answers_an_identical_request_of_another_row(jobs):
    first = {r["content"] for r in jobs[("first", "first")]}
    cached = jobs[("second", "cached")]
    assert sorted(r["rid"] for r in cached) == sorted(f"cached-{n}" for n in range(N))
    assert all(r["cached"] is True and r["content"] in first for r in cached)
    uncached = jobs[("second", "uncached")]
    assert len(uncached) == N and all(r["cached"] is False and r["reason"] is None for r in uncached)


def test_two_identical_lines_of_a_prompts_file_are_two_requests(jobs):
    """A line's request id is made of its file, its line number and the line (FileLines.requestId): it was the MD5
    of the line, so two identical lines had one request id and one key, and the store could answer the second
    from the first's response."""
    rows = jobs[("first", "lines")]
    assert len(rows) == 2 and all(r["reason"] is None and r["content"] for r in rows)
    assert len({r["rid"] for r in rows}) == 2 and len({r["key"] for r in rows}) == 2
    assert not any(r["cached"] for r in rows)  # each sent (the simulator's count: test_a_first_run_sends_...)


def test_a_store_that_cannot_be_opened_loses_no_row(jobs):
    rows = jobs[("first", "broken")]
    assert sorted(r["rid"] for r in rows) == sorted(f"broken-{n}" for n in range(N))
    assert all(r["reason"] is None and r["content"] and r["cached"] is False for r in rows)


def test_a_kafka_store_makes_its_topic_compacted_with_a_retention(jobs):
    if "topic_config" not in jobs:
        pytest.skip("the folder store has no topic")
    assert jobs["topic_config"]["cleanup.policy"] == "compact,delete"
    assert jobs["topic_config"]["retention.ms"] == str(7 * 24 * 3600 * 1000)


def test_a_topic_of_records_the_store_cannot_decompress_loses_no_row(jobs):
    if ("first", "compressed") not in jobs:
        pytest.skip("only a Kafka topic holds compressed records")
    rows = jobs[("first", "compressed")]
    assert sorted(r["rid"] for r in rows) == sorted(f"compressed-{n}" for n in range(N))
    assert all(r["reason"] is None and r["content"] and r["cached"] is False for r in rows)


# --- a Kafka store on a broker of its own: SASL logins, and the broker dying while the job runs ---------------

USER, PASSWORD = "dspark", "store-s3cret"
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="{}" password="{}";'


def sasl_uri(broker, topic: str, password: str) -> str:
    from urllib.parse import quote

    settings = {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": JAAS.format(USER, password),
    }  # fmt: skip
    return f"kafka://{broker.bootstrap}/{topic}?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in settings.items())


@pytest.fixture(scope="module")
def sasl_broker(kafka, tmp_path_factory):
    """A broker whose clients must log in (SASL PLAIN), for this module only: the last test kills it."""
    from tests.kafka_broker import Broker

    broker = Broker.start(tmp_path_factory.mktemp("sasl-kafka"), sasl_plain=f"{USER}:{PASSWORD}")
    try:
        yield broker
    finally:
        broker.stop()


def rate_table_job(url: str, model: str, out: Path, tables: dict[str, dict[str, str]]):
    """One job: each table of `tables` (its options) into a JSON folder out/<name>; returns the TableResult."""
    from connector.flink import local_environment

    _, t_env = local_environment()
    statements = t_env.create_statement_set()
    for name, options in tables.items():
        t_env.execute_sql(table_ddl(name, url, model, **options))
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE sink_{name} (content STRING, rid STRING, `key` STRING, cached BOOLEAN, "
            f"reason STRING) WITH ('connector' = 'filesystem', 'path' = '{out / name}', 'format' = 'json')"
        )
        statements.add_insert_sql(f"INSERT INTO sink_{name} SELECT content, rid, `key`, cached, reason FROM {name}")
    return statements.execute()


@pytest.mark.kafka
def test_a_kafka_store_logs_in_with_the_settings_after_its_question_mark(sasl_broker, tmp_path):
    """Client settings after '?' reach the store's clients (a SASL login); a wrong password is a store that
    cannot be opened: every row still answered."""
    with testing.serve_simulator(mode="thread", profiles=("openai",), seed=5) as sim:
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=10) as response:
            model = json.load(response)["data"][0]["id"]
        tables = {
            "login": {"request.store": sasl_uri(sasl_broker, "answers-sasl", PASSWORD)},
            "refused": {"request.store": sasl_uri(sasl_broker, "answers-refused", "not-the-password")},
        }
        rate_table_job(sim.url, model, tmp_path, tables).wait()
        sent = sim.stats().get(REQUESTS, 0)
    for name in tables:
        rows = read_json_dir(tmp_path / name)
        assert sorted(r["rid"] for r in rows) == sorted(f"{name}-{n}" for n in range(N))
        assert all(r["reason"] is None and r["content"] and r["cached"] is False for r in rows)
    assert sent == 2 * N
    # the login's answers are in its topic (read back with the same login); the refused store wrote nothing
    assert len(sasl_broker.consume("answers-sasl", expect=N, isolation="read_uncommitted", timeout=60)) == N


@pytest.mark.kafka
def test_a_broker_that_dies_mid_run_loses_no_row(sasl_broker, tmp_path):
    """The store's broker SIGKILLed while the job runs: the puts on the wire fail (after the producer's delivery
    timeout), the store is left alone, and every row is still answered once with its content."""
    import signal
    import time

    count = 240
    with testing.serve_simulator(mode="thread", profiles=("openai",), seed=9, latency_ms=50.0) as sim:
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=10) as response:
            model = json.load(response)["data"][0]["id"]
        options = {
            "request.store": sasl_uri(sasl_broker, "answers-dying", PASSWORD), "prompts.rate": "20",
            "prompts.count": str(count),
        }  # fmt: skip
        result = rate_table_job(sim.url, model, tmp_path, {"dying": options})
        deadline = time.monotonic() + 300
        while sim.stats().get(REQUESTS, 0) < 60 and time.monotonic() < deadline:
            time.sleep(0.2)
        sent_before = sim.stats().get(REQUESTS, 0)
        os.kill(sasl_broker.pid, signal.SIGKILL)
        result.wait()
        sent = sim.stats().get(REQUESTS, 0)
    rows = read_json_dir(tmp_path / "dying")
    assert 60 <= sent_before < count  # it died mid-run
    assert sorted(r["rid"] for r in rows) == sorted(f"dying-{n}" for n in range(count))
    assert all(r["reason"] is None and r["content"] and r["cached"] is False for r in rows)
    assert sent == count


@pytest.fixture
def small_disk(tmp_path):
    """A file system of 64 KiB (tmpfs, mounted here and unmounted after): it fills after ~50 answers."""
    import subprocess

    where = tmp_path / "small"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"a full disk needs a tmpfs of our own (mount as root): {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], capture_output=True)


def test_a_full_disk_loses_no_row(small_disk, tmp_path):
    """The folder store on a disk that fills mid-run: the writes fail (said once, the store left alone), and
    every row is still answered once with its content."""
    count = 150
    with testing.serve_simulator(mode="thread", profiles=("openai",), seed=11) as sim:
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=10) as response:
            model = json.load(response)["data"][0]["id"]
        options = {"request.store": (small_disk / "store").as_uri(), "prompts.count": str(count)}
        rate_table_job(sim.url, model, tmp_path, {"filled": options}).wait()
        sent = sim.stats().get(REQUESTS, 0)
    rows = read_json_dir(tmp_path / "filled")
    assert sorted(r["rid"] for r in rows) == sorted(f"filled-{n}" for n in range(count))
    assert all(r["reason"] is None and r["content"] and r["cached"] is False for r in rows)
    assert sent == count
    kept = sum(f.stat().st_size for f in (small_disk / "store").iterdir())
    assert 32 * 1024 < kept < count * 1000  # the disk filled: some answers kept, not all


@pytest.mark.kafka
def test_a_kafka_store_skips_a_damaged_record_and_says_a_failed_put(kafka):
    """As on the folder store (the JUnit StoredRequestsTest): a damaged record in the topic is skipped (its request
    sent, counted, one line) while the others still answer; a put that fails (a record over the producer's
    max.request.size, set after the URI's '?') is one line and counted, its row answered. No line holds what
    follows the '?'. The JVM's side: io.dspark.vllm.request.KafkaStoreCheck, on this session's broker."""
    from tests.java import build_jar

    done = build_jar().java_tests(kafka.bootstrap, "answers-check", main="io.dspark.vllm.request.KafkaStoreCheck")
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "ok", done.stdout + done.stderr[-4000:]
    assert "s3cret-canary" not in done.stdout + done.stderr
