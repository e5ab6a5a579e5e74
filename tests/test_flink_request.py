"""The request step end to end, one suite over its two faces (one test per behaviour, not one
copy per route).

Routes, both in one Flink job against one simulator (with 500s, malformed bodies and slow answers):
- 'table': a request-mode `'dspark-vllm'` table reading its prompts from a file (`'prompts.path'`);
- 'model': `CREATE MODEL ... WITH ('provider' = 'dspark-vllm')` and `ML_PREDICT` over a CSV of questions with a
  key, an arm and an event time (WATERMARK), also through a view of it into an event-time TUMBLE per arm.
Each row is checked one by one on both routes: every input exactly once, as a row or an error row saying why,
the request's metadata, and the answer's typed columns equal to what a plain client gets from a clean
simulator. What only one face has (ordered output of a table, unbounded 'prompts.rate'; a model's input
columns, windows, plan) is tested here on the same job where it can be; tests/test_flink_model.py holds the
model's own jobs (planning refusals, a .sql file). The model's DDL is tests/flink_support.model_ddl.
"""

from __future__ import annotations

import csv
import json
import re
import urllib.request
from datetime import datetime, timedelta

import pytest

from tests.flink_support import PREDICT, SYSTEM, TEMPLATE, model_ddl, read_json_dir

pytest.importorskip("pyflink")

from connector.simulator import testing  # noqa: E402

pytestmark = [pytest.mark.flink, pytest.mark.slow]

T0 = 1_700_000_000
N = 120
SLOW_MS = 1500.0
ROUTES = ["table", "model"]
ARMS = ("a", "b", "c")
START = datetime(2026, 1, 1, 0, 0, 0)
# What both routes write, one sink each: `n` the input's number, then the answer's columns and the metadata.
SINK = (
    "n BIGINT, `language` STRING, code STRING, completion_tokens BIGINT, model STRING, prompt_tokens BIGINT, "
    "latency_ms DOUBLE, status INT, attempts INT, prompt STRING, reason STRING"
)


def question(i: int) -> str:
    return f"def f{i}(x): return x * {i}"


def line(i: int) -> str:
    return f"Write function number {i}"


def _table_ddl(name: str, endpoint: str, model: str, prompts, mode: str) -> str:
    return f"""
        CREATE TEMPORARY TABLE {name} (
            `language` STRING, code STRING, model STRING,
            usage ROW<prompt_tokens BIGINT, completion_tokens BIGINT>,
            prompt STRING METADATA FROM 'request.prompt' VIRTUAL,
            status INT METADATA FROM 'request.http-status' VIRTUAL,
            latency_ms DOUBLE METADATA FROM 'request.latency-ms' VIRTUAL,
            attempts INT METADATA FROM 'request.attempts' VIRTUAL,
            reason STRING METADATA FROM 'error.reason' VIRTUAL
        ) WITH (
            'connector' = 'dspark-vllm', 'endpoint' = '{endpoint}', 'model' = '{model}', 'profile' = 'coder',
            'prompts.path' = '{prompts}', 'request.retry.max-attempts' = '1', 'request.concurrency' = '32',
            'request.structured-output' = 'true', 'request.output-mode' = '{mode}', 'parse.backend' = 'cpu'
        )"""


def _sink(t_env, name: str, columns: str, path) -> None:
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE {name} ({columns}) WITH ('connector' = 'filesystem', 'path' = '{path}', "
        f"'format' = 'json')"
    )


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    from connector.flink import local_environment

    out = tmp_path_factory.mktemp("request")
    inputs = []
    for i in range(N):
        # 4 s apart: 10-second windows of 2-3 questions, per arm
        inputs.append([f"user-{i}", ARMS[i % 3], question(i), 1 + i % 7, (START + timedelta(seconds=4 * i))])
    with open(out / "questions.csv", "w", newline="") as f:
        writer = csv.writer(f)
        for r in inputs:
            writer.writerow([*r[:4], r[4].strftime("%Y-%m-%d %H:%M:%S.000")])
    (out / "prompts.txt").write_text("".join(line(i) + "\n" for i in range(N)))
    faults = {"500": 0.05, "malformed": 0.05, "slow": 0.1}
    with testing.serve_simulator(
        mode="process", profiles=("coder",), seed=5, created=T0, faults=faults, slow_ms=SLOW_MS
    ) as sim:
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=10) as response:
            model = json.load(response)["data"][0]["id"]
        env, t_env = local_environment()
        statements = t_env.create_statement_set()
        # The table: its rows, and the same prompts again with 'request.output-mode' = 'ordered'.
        t_env.execute_sql(_table_ddl("answers", sim.url, model, out / "prompts.txt", "unordered"))
        t_env.execute_sql(_table_ddl("answers_ordered", sim.url, model, out / "prompts.txt", "ordered"))
        _sink(t_env, "sink_table", SINK, out / "table")
        _sink(t_env, "sink_ordered", "prompt STRING, latency_ms DOUBLE", out / "ordered")
        statements.add_insert_sql(
            "INSERT INTO sink_table SELECT CAST(SPLIT_INDEX(prompt, ' ', 3) AS BIGINT), `language`, code, "
            "usage.completion_tokens, model, usage.prompt_tokens, latency_ms, status, attempts, prompt, reason "
            "FROM answers"
        )
        statements.add_insert_sql("INSERT INTO sink_ordered SELECT prompt, latency_ms FROM answers_ordered")
        # The model.
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
        _sink(t_env, "sink_model", f"user_id STRING, arm STRING, question STRING, max_tokens INT, {SINK}",
              out / "model")  # fmt: skip
        _sink(t_env, "sink_windows", "arm STRING, window_start TIMESTAMP(3), answers BIGINT, errors BIGINT",
              out / "windows")  # fmt: skip
        _sink(t_env, "sink_order", "n BIGINT, latency_ms DOUBLE", out / "order")
        t_env.execute_sql(f"CREATE TEMPORARY VIEW enriched AS SELECT * FROM {PREDICT}")
        select = (
            "SELECT user_id, arm, question, max_tokens, CAST(SPLIT_INDEX(user_id, '-', 1) AS BIGINT), `language`, "
            "code, completion_tokens, model, usage.prompt_tokens, `request.latency-ms`, `request.http-status`, "
            f"`request.attempts`, `request.prompt`, `error.reason` FROM {PREDICT}"
        )
        plan = t_env.explain_sql(select)
        statements.add_insert_sql(f"INSERT INTO sink_model {select}")
        statements.add_insert_sql(
            "INSERT INTO sink_windows SELECT arm, window_start, COUNT(*), COUNT(`error.reason`) "
            "FROM TABLE(TUMBLE(TABLE enriched, DESCRIPTOR(event_time), INTERVAL '10' SECOND)) "
            "GROUP BY arm, window_start, window_end"
        )
        statements.add_insert_sql(
            "INSERT INTO sink_order SELECT CAST(SPLIT_INDEX(user_id, '-', 1) AS BIGINT), `request.latency-ms` FROM "
            + PREDICT.replace("TABLE questions", "TABLE questions_no_watermark")
        )
        statements.execute().wait()
        stats = sim.stats()
    sample = range(0, N, 10)
    payloads = {
        "table": [{"messages": [{"role": "user", "content": line(i)}]} for i in sample],
        "model": [
            {
                "messages": [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": TEMPLATE.format(question=question(i))},
                ],
                "max_tokens": 1 + i % 7,
            }
            for i in sample
        ],
    }
    expected = {}
    with testing.serve_simulator(mode="thread", profiles=("coder",), seed=5, created=T0) as clean:
        from connector.server import ClientConfig, prepare_request, response_format_of

        # Each request as the planner renders it (prepare_request), sent once by a plain HTTP client.
        config = ClientConfig(clean.url, model=model, structured_output="coder")
        response_format = response_format_of(config)

        def answer(payload: dict[str, object]) -> bytes:
            body = json.dumps(prepare_request(config, payload, response_format=response_format)).encode()
            request = urllib.request.Request(
                clean.url + "/v1/chat/completions", data=body, headers={"content-type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.read()

        for route in ROUTES:
            expected[route] = {n: answer(p) for n, p in zip(sample, payloads[route], strict=True)}
    table_rows = read_json_dir(out / "table")
    return {
        "input": inputs,
        "rows": {"table": table_rows, "model": read_json_dir(out / "model")},
        # the rows in the order they left an unordered request step, where no watermark stands between them
        "order": {"table": table_rows, "model": read_json_dir(out / "order")},
        "ordered": read_json_dir(out / "ordered"),
        "windows": read_json_dir(out / "windows"),
        "stats": stats,
        "plan": plan,
        "expected": expected,
    }


def sent_prompt(route: str, n: int) -> str:
    """The user message the request of input `n` sends on `route`."""
    return line(n) if route == "table" else TEMPLATE.format(question=question(n))


# --- one suite over both routes -----------------------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES)
def test_every_input_is_one_row(job, route):
    assert sorted(r["n"] for r in job["rows"][route]) == list(range(N))
    assert sorted(r["n"] for r in job["order"][route]) == list(range(N))


def test_each_input_is_sent_once_per_scan(job):
    # The table twice (unordered, ordered); the model twice: Flink's planner reuses the ML_PREDICT over
    # `questions` for the sink and the window's view; the other reads `questions_no_watermark`.
    assert job["stats"].get("requests /v1/chat/completions") == 4 * N


@pytest.mark.parametrize("route", ROUTES)
def test_answers_carry_the_requests_metadata(job, route):
    answers = [r for r in job["rows"][route] if r["reason"] is None]
    # 10% of the requests drew a fault: most inputs must be answers (if every request failed, this would say so).
    assert len(answers) >= N * 0.75, len(answers)
    for row in job["rows"][route]:
        assert row["prompt"] == sent_prompt(route, row["n"])
    for a in answers:
        assert a["status"] == 200 and a["attempts"] == 1 and a["latency_ms"] > 0, a
        assert a["model"] is not None, a


@pytest.mark.parametrize("route", ROUTES)
def test_failed_requests_and_rejected_bodies_are_error_rows(job, route):
    errors = [r for r in job["rows"][route] if r["reason"] is not None]
    assert errors, "the simulator injected 500s and malformed bodies: some rows must be error rows"
    assert any(e["reason"].startswith("request failed: status") for e in errors)
    assert any(e["reason"].startswith("not JSON") for e in errors), sorted({e["reason"][:40] for e in errors})
    for e in errors:
        assert e["code"] is None and e["completion_tokens"] is None, e
        assert e["model"] is not None  # the 'model' option fills it in
        if e["reason"].startswith("request failed"):
            assert e["status"] == 500 and e["attempts"] == 1, e


@pytest.mark.parametrize("route", ROUTES)
def test_rows_equal_a_plain_clients_answers(job, route):
    """The request a row makes (a table's prompt line; a model's template over its columns, the system prompt and
    its own max_tokens) is the one `prepare_request` renders: a plain client sending that gets the same answer
    from the simulator (a function of the request)."""
    from connector.parse import parse_batch

    rows = {r["n"]: r for r in job["rows"][route] if r["reason"] is None}
    checked = 0
    for n, body in job["expected"][route].items():
        if n not in rows:
            continue  # that request drew a fault in the job
        parsed = parse_batch([body], "coder", backend="cpu").table.to_pylist()[0]
        for key in ("language", "code", "completion_tokens", "model", "prompt_tokens"):
            assert rows[n][key] == parsed[key], (n, key)
        checked += 1
    assert checked >= 6


@pytest.mark.parametrize("route", ROUTES)
def test_rows_leave_in_completion_order(job, route):
    """Unordered (the table's default 'request.output-mode'; ML_PREDICT's ALLOW_UNORDERED): a slow answer (10% of
    them 1.5 s late) holds back no row behind it, so the rows leave out of their input order (parallelism 1, one
    part file per sink). PyFlink's ordered async function held every row behind a slow one."""
    order = [r["n"] for r in job["order"][route]]
    slow = [r["n"] for r in job["order"][route] if r["latency_ms"] is not None and r["latency_ms"] >= SLOW_MS]
    assert slow, "the simulator drew slow answers"
    assert order != sorted(order)
    # some row after a slow one in the input left before it
    assert any(order.index(m) < order.index(s) for s in slow for m in range(s + 1, N)), order


@pytest.mark.parametrize("route", ROUTES)
def test_fail_job_fails_the_job_on_a_failed_request(route, tmp_path):
    """'request.on-failure' = 'fail-job': a request that failed for good fails the job instead of giving an error
    row, and the failure names the request and why it failed. No restarts here: under a restart strategy the
    failure Flink reports last can be a consequence of the first (a source's lost OperatorEvent), which made this
    test fail by timing. A job of its own per route: the failure of either would fail a job that held both."""
    from connector.flink import local_environment

    with testing.serve_simulator(mode="thread", profiles=("openai",), seed=2, faults={"500": 1.0}) as sim:
        _, t_env = local_environment()
        t_env.get_config().set("restart-strategy.type", "none")
        options = (
            f"'endpoint' = '{sim.url}', 'model' = 'm', 'request.retry.max-attempts' = '1', "
            "'request.on-failure' = 'fail-job'"
        )
        if route == "table":
            (tmp_path / "prompts.txt").write_text("".join(line(i) + "\n" for i in range(3)))
            t_env.execute_sql(
                "CREATE TEMPORARY TABLE failing (id STRING, reason STRING METADATA FROM 'error.reason' VIRTUAL) "
                f"WITH ('connector' = 'dspark-vllm', 'prompts.path' = '{tmp_path / 'prompts.txt'}', {options})"
            )
            select = "SELECT id, reason FROM failing"
        else:
            t_env.execute_sql(
                "CREATE TEMPORARY TABLE qs (q STRING) WITH ('connector' = 'datagen', 'number-of-rows' = '3', "
                "'fields.q.length' = '8')"
            )
            t_env.execute_sql(
                "CREATE TEMPORARY MODEL strict INPUT (q STRING) OUTPUT (id STRING, `error.reason` STRING) WITH ("
                f"'provider' = 'dspark-vllm', {options})"
            )
            select = "SELECT id, `error.reason` FROM ML_PREDICT(TABLE qs, MODEL strict, DESCRIPTOR(q))"
        t_env.execute_sql("CREATE TEMPORARY TABLE out_rows (id STRING, reason STRING) WITH ('connector' = 'blackhole')")
        result = t_env.execute_sql(f"INSERT INTO out_rows {select}")
        with pytest.raises(Exception) as raised:
            result.wait()
        # which request, and why
        assert re.search(
            r"request [0-9a-f]+ failed for good \('request.on-failure' = 'fail-job'\): status: HTTP 500",
            str(raised.value),
        ), str(raised.value)[-3000:]


# --- what one face has ----------------------------------------------------------------------------------


def test_ordered_output_keeps_the_prompts_order(job):
    """A table with 'request.output-mode' = 'ordered' lets its rows leave in the order of their prompts, slow
    answers among them."""
    rows = job["ordered"]
    assert [r["prompt"] for r in rows] == [line(i) for i in range(N)]
    assert any(r["latency_ms"] is not None and r["latency_ms"] >= SLOW_MS for r in rows)


def test_the_models_input_columns_come_out_with_the_answer(job):
    by_user = {r[0]: r for r in job["input"]}
    for row in job["rows"]["model"]:
        user, arm, text, max_tokens, _ = by_user[row["user_id"]]
        assert (row["arm"], row["question"], row["max_tokens"]) == (arm, text, max_tokens)
        if row["reason"] is None:
            # the row's own max_tokens was sent (an INPUT column named like a body option)
            assert row["completion_tokens"] <= row["max_tokens"]
    assert "MLPredictTableFunction" in job["plan"]


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


def test_prompts_rate_without_a_count_runs_until_cancelled():
    """Unbounded 'prompts.rate' (no 'prompts.count') is the compose job's default. Flink's datagen
    sequence refused the old end of 2**62 when the source opened (more than Integer.MAX_VALUE elements per
    subtask), so the job failed and restarted for ever before sending a request."""
    from connector.flink import local_environment

    with testing.serve_simulator(mode="process", profiles=("openai",), seed=3) as sim:
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=10) as response:
            model = json.load(response)["data"][0]["id"]
        _, t_env = local_environment()
        t_env.get_config().set("restart-strategy.type", "none")
        t_env.execute_sql(f"""
            CREATE TEMPORARY TABLE endless (id STRING, rid STRING METADATA FROM 'request.id' VIRTUAL)
            WITH ('connector' = 'dspark-vllm', 'endpoint' = '{sim.url}', 'model' = '{model}',
                  'prompts.rate' = '20', 'parse.backend' = 'cpu', 'request.concurrency' = '5',
                  'python.fn-execution.bundle.size' = '5', 'python.fn-execution.arrow.batch.size' = '5')""")
        with t_env.execute_sql("SELECT rid FROM endless").collect() as results:
            ids = sorted(str(next(results)[0]) for _ in range(5))
    # Unordered async I/O: the first five answers need not be the first five prompts, but they are prompts.
    assert len(set(ids)) == 5 and all(i.startswith("endless-") for i in ids), ids
