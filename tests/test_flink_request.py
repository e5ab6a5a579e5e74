"""Request mode end to end: prompts -> async I/O against the simulator -> rows and errors, in one Flink job."""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.flink_support import read_json_dir

pytest.importorskip("pyflink")
testing = pytest.importorskip("connector.simulator.testing", reason="the simulator (issue 3) is not merged yet")

pytestmark = [pytest.mark.flink, pytest.mark.slow]

T0 = 1_700_000_000
N = 300


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    from connector.flink import local_environment

    out = tmp_path_factory.mktemp("request")
    faults = {"500": 0.05, "malformed": 0.05}
    with testing.serve_simulator(mode="process", profiles=("coder",), seed=11, created=T0, faults=faults) as sim:
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=10) as response:
            model = json.load(response)["data"][0]["id"]
        env, t_env = local_environment()
        t_env.execute_sql(f"""
            CREATE TEMPORARY TABLE answers (
                id STRING, model STRING, created TIMESTAMP(3), finish_reason STRING, content STRING,
                code_blocks BIGINT,
                usage ROW<prompt_tokens BIGINT, completion_tokens BIGINT>,
                rid STRING METADATA FROM 'request.id' VIRTUAL,
                prompt STRING METADATA FROM 'request.prompt' VIRTUAL,
                status INT METADATA FROM 'request.http-status' VIRTUAL,
                latency_ms DOUBLE METADATA FROM 'request.latency-ms' VIRTUAL,
                attempts INT METADATA FROM 'request.attempts' VIRTUAL,
                reason STRING METADATA FROM 'error.reason' VIRTUAL,
                WATERMARK FOR created AS created - INTERVAL '5' SECOND
            ) WITH (
                'connector' = 'dspark-vllm', 'endpoint' = '{sim.url}', 'model' = '{model}',
                'profile' = 'coder', 'prompts.rate' = '500', 'prompts.count' = '{N}',
                'prompts.template' = 'Write function number {{n}}', 'request.retry.max-attempts' = '1',
                'request.concurrency' = '32', 'request.structured-output' = 'true', 'parse.backend' = 'cpu',
                'python.fn-execution.bundle.size' = '100', 'python.fn-execution.arrow.batch.size' = '100'
            )""")
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE sink_rows (rid STRING, id STRING, model STRING, finish_reason STRING, "
            f"content STRING, code_blocks BIGINT, prompt_tokens BIGINT, completion_tokens BIGINT, "
            f"prompt STRING, status INT, latency_ms DOUBLE, attempts INT) "
            f"WITH ('connector' = 'filesystem', 'path' = '{out / 'rows'}', 'format' = 'json')"
        )
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE sink_errors (request_id STRING, prompt STRING, reason STRING, "
            f"http_status INT, attempts INT) "
            f"WITH ('connector' = 'filesystem', 'path' = '{out / 'errors'}', 'format' = 'json')"
        )
        statements = t_env.create_statement_set()
        statements.add_insert_sql(
            "INSERT INTO sink_rows SELECT rid, id, model, finish_reason, content, code_blocks, "
            "usage.prompt_tokens, usage.completion_tokens, prompt, status, latency_ms, attempts FROM answers "
            "WHERE reason IS NULL"
        )
        statements.add_insert_sql(
            "INSERT INTO sink_errors SELECT rid, prompt, reason, status, attempts FROM answers WHERE reason IS NOT NULL"
        )
        statements.execute().wait()
        stats = sim.stats()
    with testing.serve_simulator(mode="thread", profiles=("coder",), seed=11, created=T0) as clean:
        from connector.client import BlockingClient

        client = BlockingClient(clean.url, model=model, structured_output="coder", max_attempts=1)
        sample = [f"Write function number {n}" for n in range(0, N, 30)]
        expected = client.send_all([{"messages": [{"role": "user", "content": p}]} for p in sample])
        client.close()
    return {
        "rows": read_json_dir(out / "rows"),
        "errors": read_json_dir(out / "errors"),
        "stats": stats,
        "expected": dict(zip(sample, expected, strict=True)),
    }


def test_every_prompt_is_a_row_or_an_error(job):
    ids = [r["rid"] for r in job["rows"]] + [e["request_id"] for e in job["errors"]]
    assert sorted(ids) == sorted(f"answers-{n}" for n in range(N))
    assert job["errors"], "the simulator injected faults: some must be error rows"
    assert job["stats"].get("requests /v1/chat/completions") == N


def test_request_metadata(job):
    # 10% of the requests drew a fault: most prompts must be rows (if every request failed, this would say so).
    assert len(job["rows"]) >= N * 0.8, len(job["rows"])
    for row in job["rows"]:
        assert row["status"] == 200 and row["attempts"] == 1 and row["latency_ms"] > 0
        assert row["prompt"] == f"Write function number {row['rid'].split('-')[1]}"


def test_errors_have_reasons(job):
    reasons = {e["reason"].split(":")[0] for e in job["errors"]}
    assert "request failed" in reasons  # 500s, not retried
    assert any(e["reason"].startswith("not JSON") for e in job["errors"])  # malformed 200s
    for error in job["errors"]:
        assert error["prompt"].startswith("Write function number")
        if error["reason"].startswith("request failed"):
            assert error["http_status"] == 500


def test_rows_equal_the_simulators_responses(job):
    from connector.decode import parse_batch

    rows = {r["prompt"]: r for r in job["rows"]}
    checked = 0
    for prompt, outcome in job["expected"].items():
        if prompt not in rows:
            continue  # that request drew a fault in the job
        parsed = parse_batch([outcome.body], "coder", backend="cpu").table.to_pylist()[0]
        row = rows[prompt]
        for key in ("id", "model", "finish_reason", "content", "code_blocks", "prompt_tokens", "completion_tokens"):
            assert row[key] == parsed[key], key
        checked += 1
    assert checked >= 5


def test_prompts_rate_without_a_count_runs_until_cancelled():
    """Issue 9: unbounded 'prompts.rate' (no 'prompts.count') is the compose job's default. Flink's datagen
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


def test_rows_leave_in_completion_order_unless_ordered_is_asked_for(tmp_path):
    """Issue 16: one slow request held back every row behind it (PyFlink's async scalar function is ordered).
    Now a row leaves when its response is read; 'request.output-mode' = 'ordered' keeps the prompts' order. One
    job, both tables: 60 prompts at once, a tenth of them answered 2 s late."""
    from connector.flink import local_environment

    count = 60
    with testing.serve_simulator(
        mode="process", profiles=("openai",), seed=5, faults={"slow": 0.1}, slow_ms=2000.0
    ) as sim:
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=10) as response:
            model = json.load(response)["data"][0]["id"]
        _, t_env = local_environment()
        statements = t_env.create_statement_set()
        for mode in ("unordered", "ordered"):
            t_env.execute_sql(f"""
                CREATE TEMPORARY TABLE answers_{mode} (
                    id STRING, rid STRING METADATA FROM 'request.id' VIRTUAL,
                    latency_ms DOUBLE METADATA FROM 'request.latency-ms' VIRTUAL
                ) WITH (
                    'connector' = 'dspark-vllm', 'endpoint' = '{sim.url}', 'model' = '{model}',
                    'prompts.rate' = '1000', 'prompts.count' = '{count}', 'request.concurrency' = '{count}',
                    'request.output-mode' = '{mode}', 'parse.backend' = 'cpu'
                )""")
            t_env.execute_sql(
                f"CREATE TEMPORARY TABLE sink_{mode} (rid STRING, id STRING, latency_ms DOUBLE) "
                f"WITH ('connector' = 'filesystem', 'path' = '{tmp_path / mode}', 'format' = 'json')"
            )
            statements.add_insert_sql(f"INSERT INTO sink_{mode} SELECT rid, id, latency_ms FROM answers_{mode}")
        statements.execute().wait()
    for mode in ("unordered", "ordered"):
        rows = read_json_dir(tmp_path / mode)
        numbers = [int(r["rid"].rsplit("-", 1)[1]) for r in rows]
        assert sorted(numbers) == list(range(count)), mode  # every prompt once
        slow = [i for i, r in enumerate(rows) if r["latency_ms"] >= 2000]
        fast = [i for i, r in enumerate(rows) if r["latency_ms"] < 2000]
        assert slow and fast, mode
        if mode == "ordered":
            assert numbers == list(range(count))
        else:
            # Every fast row left before any slow one, whatever prompt it answered.
            assert max(fast) < min(slow), [(n, round(r["latency_ms"])) for n, r in zip(numbers, rows, strict=True)]
            assert numbers != sorted(numbers)
