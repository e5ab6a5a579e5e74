"""Enrichment: `CREATE MODEL ... WITH ('provider' = 'dspark-vllm')` and `ML_PREDICT` in a PyFlink program.

One statement set feeds the end-to-end tests of this module: a CSV of questions with a key, an arm and an event
time (WATERMARK) goes through `ML_PREDICT` against the simulator (with faults) into a filesystem sink of rows,
and through a view of the same `ML_PREDICT` into an event-time TUMBLE per arm. The rows are checked one by one:
every question exactly once, its own columns beside the answer's typed columns and metadata, error rows for
the faults, the template and the per-row `max_tokens` as a plain client sends them.
"""

from __future__ import annotations

import csv
import json
import urllib.request
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.flink_support import read_json_dir

pytest.importorskip("pyflink")

from connector.simulator import testing  # noqa: E402

pytestmark = [pytest.mark.flink, pytest.mark.slow]

T0 = 1_700_000_000
N = 120
ARMS = ("a", "b", "c")
START = datetime(2026, 1, 1, 0, 0, 0)
TEMPLATE = "Review this code: {question}"
SYSTEM = "You review code."
OUTPUT = """
    `language` STRING, code STRING, completion_tokens BIGINT, model STRING,
    usage ROW<prompt_tokens BIGINT, completion_tokens BIGINT>,
    `request.latency-ms` DOUBLE, `request.http-status` INT, `request.attempts` INT,
    `request.prompt` STRING, `error.reason` STRING
"""


def question(i: int) -> str:
    return f"def f{i}(x): return x * {i}"


def model_ddl(name: str, endpoint: str, model: str, output: str = OUTPUT, **options: str) -> str:
    given = {
        "provider": "dspark-vllm", "endpoint": endpoint, "model": model, "profile": "coder",
        "prompt.template": TEMPLATE, "system-prompt": SYSTEM, "request.structured-output": "true",
        "request.retry.max-attempts": "1", **options,
    }  # fmt: skip
    with_ = ", ".join(f"'{k}' = '{v}'" for k, v in given.items())
    return f"CREATE TEMPORARY MODEL {name} INPUT (question STRING, max_tokens INT) OUTPUT ({output}) WITH ({with_})"


PREDICT = (
    "ML_PREDICT(TABLE questions, MODEL reviewer, DESCRIPTOR(question, max_tokens), "
    "MAP['async', 'true', 'output-mode', 'ALLOW_UNORDERED', 'max-concurrent-operations', '32'])"
)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    from connector.flink import local_environment

    out = tmp_path_factory.mktemp("model")
    rows = []
    for i in range(N):
        # 4 s apart: 10-second windows of 2-3 questions, per arm
        rows.append([f"user-{i}", ARMS[i % 3], question(i), 1 + i % 7, (START + timedelta(seconds=4 * i))])
    with open(out / "questions.csv", "w", newline="") as f:
        writer = csv.writer(f)
        for r in rows:
            writer.writerow([*r[:4], r[4].strftime("%Y-%m-%d %H:%M:%S.000")])
    faults = {"500": 0.05, "malformed": 0.05, "slow": 0.1}
    with testing.serve_simulator(
        mode="process", profiles=("coder",), seed=5, created=T0, faults=faults, slow_ms=1500
    ) as sim:
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=10) as response:
            model = json.load(response)["data"][0]["id"]
        env, t_env = local_environment()
        t_env.execute_sql(f"""
            CREATE TEMPORARY TABLE questions (
                user_id STRING, arm STRING, question STRING, max_tokens INT, event_time TIMESTAMP(3),
                WATERMARK FOR event_time AS event_time - INTERVAL '1' SECOND
            ) WITH ('connector' = 'filesystem', 'path' = '{out / "questions.csv"}', 'format' = 'csv')""")
        # The same questions without a WATERMARK: no watermark between two rows, which an unordered async
        # operator never lets a row overtake.
        t_env.execute_sql(f"""
            CREATE TEMPORARY TABLE questions_no_watermark (
                user_id STRING, arm STRING, question STRING, max_tokens INT, event_time TIMESTAMP(3)
            ) WITH ('connector' = 'filesystem', 'path' = '{out / "questions.csv"}', 'format' = 'csv')""")
        t_env.execute_sql(model_ddl("reviewer", sim.url, model))
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE sink_rows (user_id STRING, arm STRING, question STRING, max_tokens INT, "
            f"`language` STRING, code STRING, completion_tokens BIGINT, model STRING, prompt_tokens BIGINT, "
            f"latency_ms DOUBLE, status INT, attempts INT, prompt STRING, reason STRING) "
            f"WITH ('connector' = 'filesystem', 'path' = '{out / 'rows'}', 'format' = 'json')"
        )
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE sink_windows (arm STRING, window_start TIMESTAMP(3), answers BIGINT, "
            f"errors BIGINT) WITH ('connector' = 'filesystem', 'path' = '{out / 'windows'}', 'format' = 'json')"
        )
        t_env.execute_sql(f"CREATE TEMPORARY VIEW enriched AS SELECT * FROM {PREDICT}")
        select = (
            "SELECT user_id, arm, question, max_tokens, `language`, code, completion_tokens, model, "
            "usage.prompt_tokens, `request.latency-ms`, `request.http-status`, `request.attempts`, "
            f"`request.prompt`, `error.reason` FROM {PREDICT}"
        )
        plan = t_env.explain_sql(select)
        statements = t_env.create_statement_set()
        statements.add_insert_sql(f"INSERT INTO sink_rows {select}")
        statements.add_insert_sql(
            "INSERT INTO sink_windows SELECT arm, window_start, COUNT(*), COUNT(`error.reason`) "
            "FROM TABLE(TUMBLE(TABLE enriched, DESCRIPTOR(event_time), INTERVAL '10' SECOND)) "
            "GROUP BY arm, window_start, window_end"
        )
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE sink_order (user_id STRING) "
            f"WITH ('connector' = 'filesystem', 'path' = '{out / 'order'}', 'format' = 'json')"
        )
        statements.add_insert_sql(
            "INSERT INTO sink_order SELECT user_id FROM "
            + PREDICT.replace("TABLE questions", "TABLE questions_no_watermark")
        )
        statements.execute().wait()
        stats = sim.stats()
    with testing.serve_simulator(mode="thread", profiles=("coder",), seed=5, created=T0) as clean:
        from connector.client import BlockingClient

        client = BlockingClient(clean.url, model=model, structured_output="coder", max_attempts=1)
        sample = range(0, N, 10)
        payloads = [
            {
                "messages": [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": TEMPLATE.format(question=question(i))},
                ],
                "max_tokens": 1 + i % 7,
            }
            for i in sample
        ]
        expected = client.send_all(payloads)
        client.close()
    return {
        "input": rows,
        "rows": read_json_dir(out / "rows"),
        "windows": read_json_dir(out / "windows"),
        "order": [r["user_id"] for r in read_json_dir(out / "order")],
        "stats": stats,
        "plan": plan,
        "expected": {f"user-{i}": outcome for i, outcome in zip(sample, expected, strict=True)},
    }


def test_every_input_row_is_one_output_row(job):
    users = [r["user_id"] for r in job["rows"]]
    assert sorted(users) == sorted(f"user-{i}" for i in range(N))
    assert sorted(job["order"]) == sorted(users)
    # Every question sent once per ML_PREDICT over its table: Flink's planner reuses the one over `questions` for
    # the sink and the window's view; the other reads `questions_no_watermark`.
    assert job["stats"].get("requests /v1/chat/completions") == 2 * N


def test_the_input_columns_come_out_with_the_answer(job):
    by_user = {r[0]: r for r in job["input"]}
    for row in job["rows"]:
        user, arm, text, max_tokens, _ = by_user[row["user_id"]]
        assert (row["arm"], row["question"], row["max_tokens"]) == (arm, text, max_tokens)
        assert row["prompt"] == TEMPLATE.format(question=text)


def test_failed_requests_and_rejected_bodies_are_error_rows(job):
    errors = [r for r in job["rows"] if r["reason"] is not None]
    answers = [r for r in job["rows"] if r["reason"] is None]
    assert errors, "the simulator injected 500s and malformed bodies: some rows must be error rows"
    assert len(answers) >= N * 0.75, len(answers)
    assert any(e["reason"].startswith("request failed: status") for e in errors)
    assert any(e["reason"].startswith("not JSON") for e in errors)
    for e in errors:
        assert e["code"] is None and e["completion_tokens"] is None
        assert e["model"] is not None  # the model's option fills it in, as in a table
        if e["reason"].startswith("request failed"):
            assert e["status"] == 500 and e["attempts"] == 1
    for a in answers:
        assert a["status"] == 200 and a["attempts"] == 1 and a["latency_ms"] > 0
        # the row's own max_tokens was sent (an INPUT column named like a body option)
        assert a["completion_tokens"] <= a["max_tokens"]


def test_rows_equal_a_plain_clients_answers(job):
    """The request a row makes is the template over its columns, the system prompt and its own max_tokens, sent
    as the Python client sends it: the simulator's answer (a function of the request) is the same."""
    from connector.decode import parse_batch

    rows = {r["user_id"]: r for r in job["rows"] if r["reason"] is None}
    checked = 0
    for user, outcome in job["expected"].items():
        if user not in rows:
            continue  # that request drew a fault in the job
        parsed = parse_batch([outcome.body], "coder", backend="cpu").table.to_pylist()[0]
        for key in ("language", "code", "completion_tokens", "model", "prompt_tokens"):
            assert rows[user][key] == parsed[key], (user, key)
        checked += 1
    assert checked >= 6


def test_unordered_async_operator(job):
    """ALLOW_UNORDERED: a slow answer (10% of them 1.5 s late) holds back no row behind it, so the rows leave out of
    their input order (parallelism 1, one part file per sink), where no watermark stands between them. (With the
    WATERMARK of `questions`, whose every row moved it on, the rows left in their order: Flink's unordered async
    mode never lets a row overtake a watermark.)"""
    assert "MLPredictTableFunction" in job["plan"]
    order = [int(u.split("-")[1]) for u in job["order"]]
    assert order != sorted(order)


def test_event_time_windows_over_the_enriched_rows(job):
    """The input's rowtime stays a time attribute through ML_PREDICT: a TUMBLE over a view of it works."""
    expected: dict[tuple[str, str], int] = {}
    for _, arm, _, _, at in job["input"]:
        start = at - timedelta(seconds=at.second % 10, microseconds=at.microsecond)
        key = (arm, start.strftime("%Y-%m-%d %H:%M:%S"))
        expected[key] = expected.get(key, 0) + 1
    got = {(w["arm"], w["window_start"][:19]): w["answers"] for w in job["windows"]}
    assert got == expected
    assert sum(w["errors"] for w in job["windows"]) > 0


def test_refused_when_the_model_is_first_used():
    """A name that is neither a profile column nor a metadata key, a template naming no INPUT column, and an
    unknown option: each refused with one line that says what to do, when ML_PREDICT is planned."""
    from connector.flink import local_environment

    _, t_env = local_environment()
    t_env.execute_sql(
        "CREATE TEMPORARY TABLE questions (question STRING, max_tokens INT) WITH ('connector' = 'datagen', "
        "'number-of-rows' = '1')"
    )
    cases = [
        (model_ddl("reviewer", "http://127.0.0.1:9", "m", output="`langauge` STRING"),
         "OUTPUT column 'langauge' is neither a column of profile 'coder' nor a metadata key"),
        (model_ddl("reviewer", "http://127.0.0.1:9", "m", **{"prompt.template": "Review {code}"}),
         "names '{code}', which is not an INPUT column of the model; its INPUT columns: question, max_tokens"),
        (model_ddl("reviewer", "http://127.0.0.1:9", "m", **{"prompts.path": "/tmp/x"}),
         "Unsupported options found for model provider 'dspark-vllm'"),
        (model_ddl("reviewer", "http://127.0.0.1:9", "m", output="`request.latency-ms` STRING"),
         "OUTPUT column 'request.latency-ms' is the metadata key 'request.latency-ms': declare it DOUBLE"),
    ]  # fmt: skip
    for ddl, message in cases:
        t_env.execute_sql("DROP TEMPORARY MODEL IF EXISTS reviewer")
        t_env.execute_sql(ddl)
        with pytest.raises(Exception, match="Model '.*reviewer' \\('provider' = 'dspark-vllm'\\)") as raised:
            t_env.explain_sql(f"SELECT * FROM {PREDICT}")
        assert message in str(raised.value)


SQL = """
-- ML_PREDICT from a .sql file (dspark-vllm sql): the chat messages from an INPUT column, as they are.
SET 'parallelism.default' = '1';
CREATE TABLE questions (user_id STRING, question STRING) WITH (
  'connector' = 'filesystem', 'path' = '{questions}', 'format' = 'csv');
CREATE VIEW chats AS SELECT user_id,
  CAST(ARRAY[ROW('system', 'You answer in one word.'), ROW('user', question)]
       AS ARRAY<ROW<`role` STRING, content STRING>>) AS messages
  FROM questions;
CREATE MODEL answerer
  INPUT (messages ARRAY<ROW<`role` STRING, content STRING>>)
  OUTPUT (id STRING, content STRING, completion_tokens BIGINT, n_choices BIGINT, choice_contents ARRAY<STRING>,
          `request.prompt` STRING, `error.reason` STRING)
  WITH ('provider' = 'dspark-vllm', 'endpoint' = '{endpoint}', 'model' = '{model}', 'request.max-tokens' = '5',
        'request.n' = '2');
CREATE TABLE answers (user_id STRING, id STRING, content STRING, tokens BIGINT, n BIGINT, choices ARRAY<STRING>,
                      prompt STRING, reason STRING)
  WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'json');
INSERT INTO answers SELECT user_id, id, content, completion_tokens, n_choices, choice_contents, `request.prompt`,
                           `error.reason`
  FROM ML_PREDICT(TABLE chats, MODEL answerer, DESCRIPTOR(messages),
                  MAP['async', 'true', 'output-mode', 'ALLOW_UNORDERED', 'max-concurrent-operations', '16']);
"""


def test_a_sql_file_through_dspark_vllm_sql(tmp_path):
    import shutil
    import subprocess
    import sys

    questions = tmp_path / "questions.csv"
    questions.write_text("".join(f"u{i},What is {i} + {i}?\n" for i in range(30)))
    cli = shutil.which("dspark-vllm", path=str(Path(sys.executable).parent))
    assert cli, "the dspark-vllm command is installed beside this Python"
    with testing.serve_simulator(mode="process", profiles=("openai",), seed=9, faults={"500": 0.1}) as sim:
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=10) as response:
            model = json.load(response)["data"][0]["id"]
        script = tmp_path / "enrich.sql"
        script.write_text(SQL.format(questions=questions, endpoint=sim.url, model=model, out=tmp_path / "out"))
        run = subprocess.run([cli, "sql", str(script)], capture_output=True, text=True, timeout=600)
        stats = sim.stats()
    assert run.returncode == 0, run.stderr[-3000:]
    rows = read_json_dir(tmp_path / "out")
    assert sorted(r["user_id"] for r in rows) == sorted(f"u{i}" for i in range(30))
    assert stats["requests /v1/chat/completions"] == 30
    errors = [r for r in rows if r["reason"]]
    assert errors and all(r["reason"].startswith("request failed: status") and r["id"] is None for r in errors)
    for row in rows:
        sent = json.loads(row["prompt"])  # request.prompt: the messages as sent
        assert sent[0] == {"role": "system", "content": "You answer in one word."}
        assert sent[1]["role"] == "user" and sent[1]["content"].startswith("What is ")
        if row["reason"] is None:
            assert row["id"].startswith("chatcmpl-") and 1 <= row["tokens"] <= 10  # 5 a choice
            # 'request.n' = '2': one row whose list columns hold both choices, as in a table
            assert row["n"] == 2 and len(row["choices"]) == 2 and row["choices"][0] == row["content"]


def test_fail_job_fails_the_job_on_a_failed_request():
    """'request.on-failure' = 'fail-job': a request that failed for good fails the job (which restarts from its
    checkpoint by its restart strategy; none here), instead of giving an error row."""
    from connector.flink import local_environment

    with testing.serve_simulator(mode="thread", profiles=("openai",), seed=2, faults={"500": 1.0}) as sim:
        _, t_env = local_environment()
        t_env.execute_sql(
            "CREATE TEMPORARY TABLE qs (q STRING) WITH ('connector' = 'datagen', 'number-of-rows' = '3', "
            "'fields.q.length' = '8')"
        )
        t_env.execute_sql(
            "CREATE TEMPORARY MODEL strict INPUT (q STRING) OUTPUT (id STRING, `error.reason` STRING) WITH ("
            f"'provider' = 'dspark-vllm', 'endpoint' = '{sim.url}', 'model' = 'm', 'request.retry.max-attempts' = '1', "
            "'request.on-failure' = 'fail-job')"
        )
        t_env.execute_sql("CREATE TEMPORARY TABLE out_rows (id STRING, reason STRING) WITH ('connector' = 'blackhole')")
        result = t_env.execute_sql(
            "INSERT INTO out_rows SELECT id, `error.reason` FROM ML_PREDICT(TABLE qs, MODEL strict, DESCRIPTOR(q))"
        )
        with pytest.raises(Exception, match="failed for good \\('request.on-failure' = 'fail-job'\\)"):
            result.wait()
