"""Pure SQL, no Python program: a `.sql` file run by the SQL runner shipped in the connector jar.

The runner (`io.dspark.vllm.sql.SqlRunner`) runs as a plain JVM with only Flink's jars (from the PyFlink
wheel), the connector jar and `python.executable` set: the path the SQL Client takes, without its prompt.
One statement set feeds every test of this module: a replay table, a request-mode table and ML_PREDICT over a
table of prompts (against the simulator) into filesystem sinks, checked row by row (every body and every prompt
exactly once).
"""

from __future__ import annotations

import json
import subprocess
import urllib.request

import pytest

from tests.flink_support import read_json_dir

pytest.importorskip("pyflink")

from connector.flink.sql_cli import java_command  # noqa: E402
from connector.simulator import testing  # noqa: E402

pytestmark = [pytest.mark.flink, pytest.mark.slow]

T0 = 1_700_000_000
PROMPTS = 120
FUNCTION_PROMPTS = 40
GOOD = 50
BAD = [
    b"not json",
    b'{"id": "cut", "object": "chat.completion", "created": 17',
    b'{"error": {"message": "model overloaded", "type": "ServiceUnavailable", "code": 503}}',
]


def body(i: int) -> bytes:
    content = json.dumps({"language": "python" if i % 2 else "go", "code": f"f({i})", "code_blocks": 1})
    return json.dumps(
        {
            "id": f"cmpl-{i}",
            "object": "chat.completion",
            "created": T0 + 4 * i,
            "model": "coder-a" if i % 3 else "coder-b",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": i, "total_tokens": 10 + i},
        }
    ).encode()


SCRIPT = """
-- Statements end with ';' (not inside quotes, comments or BEGIN ... END).
SET 'parallelism.default' = '1';

CREATE TABLE replayed (
  id STRING, model STRING, created TIMESTAMP(3),
  usage ROW<prompt_tokens BIGINT, completion_tokens BIGINT>, `language` STRING,
  line BIGINT METADATA FROM 'source.line' VIRTUAL,
  reason STRING METADATA FROM 'error.reason' VIRTUAL,
  WATERMARK FOR created AS created - INTERVAL '5' SECOND
) WITH ('connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '{bodies}', 'profile' = 'coder',
        'parse.backend' = 'cpu');

CREATE TABLE responses (
  id STRING, model STRING, created TIMESTAMP(3),
  usage ROW<prompt_tokens BIGINT, completion_tokens BIGINT>, `language` STRING,
  latency_ms DOUBLE METADATA FROM 'request.latency-ms' VIRTUAL,
  rid STRING METADATA FROM 'request.id' VIRTUAL,
  prompt STRING METADATA FROM 'request.prompt' VIRTUAL,
  reason STRING METADATA FROM 'error.reason' VIRTUAL,
  WATERMARK FOR created AS created - INTERVAL '5' SECOND
) WITH ('connector' = 'dspark-vllm', 'endpoint' = '{endpoint}', 'profile' = 'coder',
        'model' = '{model}', 'prompts.rate' = '100', 'prompts.count' = '{prompts}',
        'prompts.template' = 'Say ''hi''; then count to {{n}}', 'request.retry.max-attempts' = '1',
        'parse.backend' = 'cpu', 'python.fn-execution.bundle.size' = '100',
        'python.fn-execution.arrow.batch.size' = '100');

CREATE TABLE sink_replayed (id STRING, model STRING, tokens BIGINT, lang STRING, line BIGINT, reason STRING)
WITH ('connector' = 'filesystem', 'path' = '{out}/replayed', 'format' = 'json');
CREATE TABLE sink_responses (rid STRING, prompt STRING, id STRING, lang STRING, latency_ms DOUBLE, reason STRING)
WITH ('connector' = 'filesystem', 'path' = '{out}/responses', 'format' = 'json');
CREATE TABLE sink_windows (model STRING, n BIGINT, bad BIGINT, mean_tokens DOUBLE)
WITH ('connector' = 'filesystem', 'path' = '{out}/windows', 'format' = 'json');

-- The parse step as a SQL function over a table of any connector; prompts of any table through ML_PREDICT.
CREATE TEMPORARY FUNCTION parse_coder AS 'connector.flink.sql.parse_coder' LANGUAGE PYTHON;
CREATE TABLE raw_bodies (body BYTES) WITH ('connector' = 'filesystem', 'path' = '{bodies}', 'format' = 'raw');
CREATE TABLE prompt_lines (prompt STRING)
WITH ('connector' = 'filesystem', 'path' = '{prompts_file}', 'format' = 'raw');
CREATE TABLE sink_functions (id STRING, lang STRING, tokens BIGINT, error STRING)
WITH ('connector' = 'filesystem', 'path' = '{out}/functions', 'format' = 'json');
CREATE TABLE sink_requested (prompt STRING, status INT, id STRING, error STRING)
WITH ('connector' = 'filesystem', 'path' = '{out}/requested', 'format' = 'json');
CREATE MODEL asker
  INPUT (prompt STRING)
  OUTPUT (id STRING, `request.http-status` INT, `error.reason` STRING)
  WITH ('provider' = 'dspark-vllm', 'endpoint' = '{endpoint}', 'model' = '{model}', 'profile' = 'coder',
        'request.retry.max-attempts' = '1');

EXECUTE STATEMENT SET BEGIN
  INSERT INTO sink_replayed SELECT id, model, usage.completion_tokens, `language`, line, reason FROM replayed;
  INSERT INTO sink_responses SELECT rid, prompt, id, `language`, latency_ms,
    CASE WHEN reason IS NULL THEN NULL ELSE reason END FROM responses;
  INSERT INTO sink_windows SELECT model, COUNT(*), COUNT(reason), AVG(CAST(usage.completion_tokens AS DOUBLE))
    FROM replayed GROUP BY model, TUMBLE(created, INTERVAL '10' SECOND);
  INSERT INTO sink_functions SELECT p.id, p.`language`, p.completion_tokens, p.error
    FROM (SELECT parse_coder(body) AS p FROM raw_bodies);
  INSERT INTO sink_requested SELECT prompt, `request.http-status`, id, `error.reason`
    FROM ML_PREDICT(TABLE prompt_lines, MODEL asker, DESCRIPTOR(prompt), MAP['output-mode', 'ALLOW_UNORDERED']);
END;
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("sql")
    bodies = root / "bodies"
    bodies.mkdir()
    lines = [body(i) for i in range(GOOD)]
    for k, bad in enumerate(BAD):
        lines.insert(10 * (k + 1), bad)
    (bodies / "captured.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    out = root / "out"
    prompts_file = root / "prompts.txt"
    prompts_file.write_text("".join(f"function prompt {n}\n" for n in range(FUNCTION_PROMPTS)))
    with testing.serve_simulator(mode="process", profiles=("coder",), seed=3, faults={"500": 0.1}) as sim:
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=10) as response:
            model = json.load(response)["data"][0]["id"]
        script = root / "job.sql"
        script.write_text(
            SCRIPT.format(
                bodies=bodies, endpoint=sim.url, model=model, prompts=PROMPTS, out=out, prompts_file=prompts_file
            ),
            encoding="utf-8",
        )
        command = java_command(str(script), [], str(root / "flink.log"))
        assert command[0] == "java" and "io.dspark.vllm.sql.SqlRunner" in command
        run = subprocess.run(command, capture_output=True, text=True, timeout=600)
        stats = sim.stats()
    assert run.returncode == 0, run.stderr[-4000:]
    return {
        "lines": lines,
        "replayed": read_json_dir(out / "replayed"),
        "responses": read_json_dir(out / "responses"),
        "windows": read_json_dir(out / "windows"),
        "functions": read_json_dir(out / "functions"),
        "requested": read_json_dir(out / "requested"),
        "stats": stats,
        "stderr": run.stderr,
    }


def test_the_runner_is_a_plain_jvm_with_flinks_jars_and_ours(job):
    command = java_command("job.sql", ["a=b"], "/tmp/x.log")
    classpath = command[command.index("-cp") + 1].split(":")
    assert any(p.endswith("flink-dist-2.3.0.jar") for p in classpath)
    assert any(p.endswith("flink-python-2.3.0.jar") for p in classpath)
    assert classpath[-1].endswith(".jar") and "dspark-vllm-flink-" in classpath[-1]
    assert "python.executable=" in " ".join(command) and command[-1] == "a=b"
    assert job["stderr"].count("submitted job") == 1  # one statement set, one job


def test_every_replayed_body_is_one_row(job):
    rows = sorted(job["replayed"], key=lambda r: r["line"])
    assert [r["line"] for r in rows] == list(range(1, len(job["lines"]) + 1))
    for row, line in zip(rows, job["lines"], strict=True):
        if line in BAD:
            assert row["reason"] and row["id"] is None
        else:
            i = int(row["id"].split("-")[1])
            assert row["reason"] is None and line == body(i)
            assert (row["model"], row["tokens"], row["lang"]) == (
                "coder-a" if i % 3 else "coder-b",
                i,
                "python" if i % 2 else "go",
            )
    reasons = [r["reason"] for r in rows if r["reason"]]
    assert reasons[0].startswith("not JSON") and reasons[1].startswith("truncated")
    assert reasons[2].startswith("error response")


def test_every_prompt_is_one_row(job):
    rows = job["responses"]
    assert sorted(r["rid"] for r in rows) == sorted(f"responses-{n}" for n in range(PROMPTS))
    for row in rows:
        n = row["rid"].split("-")[1]
        assert row["prompt"] == f"Say 'hi'; then count to {n}"
        if row["reason"] is None:
            assert row["id"].startswith("chatcmpl-") and row["lang"] and row["latency_ms"] > 0
        else:
            assert row["reason"].startswith("request failed: status: HTTP 500")
    assert any(r["reason"] for r in rows), "the simulator answered 10% with 500"
    # Each prompt sent once (500 is not retried): the table's and ML_PREDICT's.
    assert job["stats"]["requests /v1/chat/completions"] == PROMPTS + FUNCTION_PROMPTS


def test_group_window_of_the_issue(job):
    windows = job["windows"]
    assert sum(w["n"] for w in windows) == GOOD + len(BAD)
    assert sum(w["bad"] for w in windows) == len(BAD)


def test_parse_function_from_sql(job):
    rows = job["functions"]
    assert len(rows) == len(job["lines"])
    good = sorted((r for r in rows if r["error"] is None), key=lambda r: r["tokens"])
    assert [r["id"] for r in good] == [f"cmpl-{i}" for i in range(GOOD)]
    assert [r["lang"] for r in good] == ["python" if i % 2 else "go" for i in range(GOOD)]
    assert sorted(r["error"][:8] for r in rows if r["error"]) == ["error re", "not JSON", "truncate"]


def test_ml_predict_over_a_table_of_prompts_from_sql(job):
    """What the retired `vllm_request` function did, through ML_PREDICT: each row of a table of any connector is
    one request and one row, its answer or its error beside the row's own column."""
    rows = job["requested"]
    assert sorted(r["prompt"] for r in rows) == sorted(f"function prompt {n}" for n in range(FUNCTION_PROMPTS))
    for row in rows:
        if row["error"] is None:
            assert row["status"] == 200 and row["id"].startswith("chatcmpl-")
        else:
            assert row["status"] == 500 and "HTTP 500" in row["error"]


def test_the_sql_command_says_what_failed_in_one_line(tmp_path):
    import os
    import sys

    bad = tmp_path / "bad.sql"
    bad.write_text(
        "CREATE TABLE t (id STRING) WITH ('connector' = 'dspark-vllm', 'mode' = 'replay', "
        "'replay.path' = '/x', 'parse.bakend' = 'cpu');\nSELECT * FROM t;\n"
    )

    def sql(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "connector.cli", "sql", *args]
        # Its temporary folder: the log a failed run keeps (and names) stays with the test's files.
        env = {**os.environ, "TMPDIR": str(tmp_path)}
        return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)

    run = sql(str(bad))
    assert run.returncode == 1, run.stderr
    # One line, the statement's beginning and the key meant in it (~60 keys and two more lines before).
    assert run.stderr.count("\n") == 1 and run.stderr.startswith(
        "dspark-vllm sql: statement 2 (SELECT * FROM t) failed: "
    )
    assert "Unsupported options found for 'dspark-vllm'." in run.stderr
    assert "parse.bakend (did you mean parse.backend" in run.stderr and "replay.monitor-interval" not in run.stderr
    assert "\tat org.apache" not in run.stderr  # no Java stack trace unless asked for
    # Retired: a table's 'prompts.source.*' and the SQL function vllm_request say what replaced them.
    retired = tmp_path / "retired.sql"
    retired.write_text(
        "CREATE TABLE t (id STRING) WITH ('connector' = 'dspark-vllm', 'endpoint' = 'http://127.0.0.1:9', "
        "'model' = 'm', 'prompts.source.connector' = 'kafka', 'prompts.source.topic' = 'p');\nSELECT * FROM t;\n"
    )
    run = sql(str(retired))
    assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr
    assert "('connector' = 'dspark-vllm'): Option 'prompts.source.*' is retired: " in run.stderr
    assert "ML_PREDICT" in run.stderr and "Unsupported options" not in run.stderr
    function = tmp_path / "function.sql"
    function.write_text(
        "CREATE TEMPORARY FUNCTION vllm_request AS 'connector.flink.sql.vllm_request' LANGUAGE PYTHON;\n"
        "SELECT vllm_request('http://127.0.0.1:9', 'm', 'hi');\n"
    )
    run = sql(str(function))
    assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr
    assert "The SQL function 'vllm_request' is retired: ask the model with ML_PREDICT" in run.stderr
    assert "Traceback" not in run.stderr and "\tat org.apache" not in run.stderr
    missing = sql(str(tmp_path / "none.sql"))
    assert (missing.returncode, missing.stderr.strip()) == (
        2,
        f"dspark-vllm sql: {tmp_path / 'none.sql'}: no such file",
    )


@pytest.mark.parametrize(
    ("face", "script", "names"),
    [
        (
            "model",
            "CREATE TEMPORARY VIEW q AS SELECT CAST(x AS STRING) AS question FROM (VALUES ('a')) AS t(x);\n"
            "CREATE MODEL m INPUT (question STRING) OUTPUT (`error.reason` STRING) WITH ('provider' = 'dspark-vllm', "
            "'endpoint' = 'http://127.0.0.1:1', 'model' = 'x', 'request.temprature' = '0.2');\n"
            "SELECT * FROM ML_PREDICT(TABLE q, MODEL m, DESCRIPTOR(question));\n",
            "Model 'default_catalog.default_database.m' ('provider' = 'dspark-vllm'): Unsupported options found for "
            "'dspark-vllm'.",
        ),
        (
            "table",
            "CREATE TABLE r (id STRING) WITH ('connector' = 'dspark-vllm', 'endpoint' = 'http://127.0.0.1:1', "
            "'model' = 'x', 'prompts.rate' = '1', 'request.temprature' = '0.2');\nSELECT * FROM r;\n",
            "Table 'default_catalog.default_database.r' ('connector' = 'dspark-vllm'): Unsupported options found for "
            "'dspark-vllm'.",
        ),
    ],
)
def test_a_misspelt_option_is_one_short_line_with_the_key_meant_on_both_faces(tmp_path, face, script, names):
    """A misspelt model option got a 1,503-character line: Flink's "Unable to create a model provider ... Model
    options are: ..." and every supported key, no word of the one meant, where a table's got "did you mean". Both
    faces now say the same short line, without Flink's wrapper (which also repeats every option's value)."""
    import os
    import sys

    bad = tmp_path / "bad.sql"
    bad.write_text(script)
    run = subprocess.run([sys.executable, "-m", "connector.cli", "sql", str(bad)], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "TMPDIR": str(tmp_path)})  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert run.stderr.count("\n") == 1, run.stderr
    line = run.stderr.split(" failed: ", 1)[1].split("; Flink's log: ")[0]
    assert line.startswith(names), line
    assert "Unsupported options: request.temprature (did you mean request.temperature?)" in line, line
    assert "Unable to create" not in line and "options are:" not in line and "request.top-p" not in line, line
    assert len(line) < 300, (len(line), line)
