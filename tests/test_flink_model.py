"""Enrichment: `CREATE MODEL ... WITH ('provider' = 'dspark-vllm')` and `ML_PREDICT`, the model's own jobs.

The request step through a model and through a request-mode table is one suite over both routes, on one job:
tests/test_flink_request.py (every input once, metadata, error rows, a plain client's answers, unordered
output; and a model's input columns, plan and event-time windows). Here: what is refused when a model is
planned and a .sql file through `dspark-vllm sql`.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from tests.flink_support import PREDICT, model_ddl, read_json_dir

pytest.importorskip("pyflink")

from connector.simulator import testing  # noqa: E402

pytestmark = [pytest.mark.flink, pytest.mark.slow]


def test_refused_when_the_model_is_first_used():
    """A name that is neither a profile column nor a metadata key, a template naming no INPUT column, and an
    unknown option: each refused with one line that says what to do, when ML_PREDICT is planned; a too short
    'timeout' and an API key a header cannot carry (a table's too), when the job is planned."""
    from connector.flink import local_environment

    _, t_env = local_environment()
    t_env.execute_sql(
        "CREATE TEMPORARY TABLE questions (question STRING, max_tokens INT) WITH ('connector' = 'datagen', "
        "'number-of-rows' = '1')"
    )
    cases = [
        (model_ddl("reviewer", "http://127.0.0.1:9", "m", output="`langauge` STRING"),
         "Column 'langauge' is neither a column of profile 'coder' nor a metadata key, so it would be an answer "
         "field: did you mean 'language'?"),
        (model_ddl("reviewer", "http://127.0.0.1:9", "m", **{"prompt.template": "Review {code}"}),
         "names '{code}', which is not an INPUT column of the model; its INPUT columns: question, max_tokens"),
        (model_ddl("reviewer", "http://127.0.0.1:9", "m", **{"prompts.path": "/tmp/x"}),
         "Unsupported options found for 'dspark-vllm'. Unsupported options: prompts.path"),
        (model_ddl("reviewer", "http://127.0.0.1:9", "m", output="`request.latency-ms` STRING"),
         "OUTPUT column 'request.latency-ms' is the metadata key 'request.latency-ms': declare it DOUBLE"),
    ]  # fmt: skip
    for ddl, message in cases:
        t_env.execute_sql("DROP TEMPORARY MODEL IF EXISTS reviewer")
        t_env.execute_sql(ddl)
        with pytest.raises(Exception, match="Model '.*reviewer' \\('provider' = 'dspark-vllm'\\)") as raised:
            t_env.explain_sql(f"SELECT * FROM {PREDICT}")
        assert message in str(raised.value)
    # ML_PREDICT's 'timeout' too short for any request: refused when the job is planned, no request sent
    t_env.execute_sql("DROP TEMPORARY MODEL IF EXISTS reviewer")
    t_env.execute_sql(model_ddl("reviewer", "http://127.0.0.1:9", "m"))
    t_env.execute_sql("CREATE TEMPORARY TABLE nowhere (reason STRING) WITH ('connector' = 'blackhole')")
    short = PREDICT.replace("'32']", "'32', 'timeout', '1 s']")
    with pytest.raises(Exception) as raised:
        t_env.execute_sql(f"INSERT INTO nowhere SELECT `error.reason` FROM {short}").wait()
    assert "ML_PREDICT's 'timeout' of 1 s is too short" in str(raised.value), str(raised.value)[-2000:]
    assert "set MAP['timeout', '2 s'] or more" in str(raised.value)
    # An API key a header cannot carry: refused by the request step's own rule when the job is planned, not shown
    t_env.execute_sql("DROP TEMPORARY MODEL IF EXISTS reviewer")
    t_env.execute_sql(model_ddl("reviewer", "http://127.0.0.1:9", "m", **{"api-key": "sk-1\nX-Evil: 1"}))
    with pytest.raises(Exception) as raised:
        t_env.execute_sql(f"INSERT INTO nowhere SELECT `error.reason` FROM {PREDICT}").wait()
    assert "the API key holds characters an HTTP header cannot carry" in str(raised.value), str(raised.value)[-2000:]
    assert "X-Evil" not in str(raised.value) and "sk-1" not in str(raised.value)
    t_env.execute_sql(  # a table's: the same rule, where its request step is made
        "CREATE TEMPORARY TABLE asked (id STRING) WITH ('connector' = 'dspark-vllm', 'prompts.path' = '/tmp/none', "
        "'endpoint' = 'http://127.0.0.1:9', 'model' = 'm', 'api-key' = 'sk-1\nX-Evil: 1')"
    )
    with pytest.raises(Exception) as raised:
        t_env.execute_sql("INSERT INTO nowhere SELECT id FROM asked").wait()
    assert "the API key holds characters an HTTP header cannot carry" in str(raised.value), str(raised.value)[-2000:]
    assert "X-Evil" not in str(raised.value) and "sk-1" not in str(raised.value)


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


HOSTILE = """
-- Rows a hostile user sends through ML_PREDICT, from a .sql file (dspark-vllm sql --log one.log).
SET 'parallelism.default' = '1';
CREATE TEMPORARY VIEW questions AS SELECT * FROM (VALUES
    (1, 'What is 1?', CAST(3 AS BIGINT), CAST(0.5 AS DOUBLE)),
    (2, CAST(NULL AS STRING), CAST(1 AS BIGINT), CAST(NULL AS DOUBLE)),
    (3, 'What is 3?', CAST(1 AS BIGINT), CAST('NaN' AS DOUBLE)),
    (4, 'What is 4?', CAST(1 AS BIGINT), CAST(-3.5 AS DOUBLE)),
    (5, 'What is 5?', CAST(2 AS BIGINT), CAST(NULL AS DOUBLE))
  ) AS t(id, q, n, temperature);
CREATE MODEL asker
  INPUT (q STRING, n BIGINT, temperature DOUBLE)
  OUTPUT (n_choices BIGINT, content STRING, `error.reason` STRING)
  WITH ('provider' = 'dspark-vllm', 'endpoint' = '{endpoint}', 'model' = '{model}', 'api-key' = '{key}',
        'prompt.template' = 'Question {{n}}: {{q}}', 'request.max-tokens' = '5',
        'request.on-failure' = 'fail-job');
CREATE MODEL quick
  INPUT (q STRING)
  OUTPUT (content STRING, `error.reason` STRING)
  WITH ('provider' = 'dspark-vllm', 'endpoint' = '{endpoint}', 'model' = '{model}', 'request.max-tokens' = '5');
CREATE MODEL refused
  INPUT (q STRING)
  OUTPUT (`error.reason` STRING)
  WITH ('provider' = 'dspark-vllm', 'endpoint' = 'http://127.0.0.1:{closed}', 'model' = 'm');
CREATE TABLE answers (id INT, n_choices BIGINT, content STRING, reason STRING)
  WITH ('connector' = 'filesystem', 'path' = '{out}/answers', 'format' = 'json');
CREATE TABLE quick_answers (id INT, content STRING, reason STRING)
  WITH ('connector' = 'filesystem', 'path' = '{out}/quick', 'format' = 'json');
CREATE TABLE refusals (id INT, reason STRING)
  WITH ('connector' = 'filesystem', 'path' = '{out}/refusals', 'format' = 'json');
SHOW CREATE MODEL asker;
EXECUTE STATEMENT SET BEGIN
INSERT INTO answers SELECT id, n_choices, content, `error.reason`
  FROM ML_PREDICT(TABLE questions, MODEL asker, DESCRIPTOR(q, n, temperature), MAP['output-mode', 'ALLOW_UNORDERED']);
INSERT INTO quick_answers SELECT id, content, `error.reason`
  FROM ML_PREDICT(TABLE questions, MODEL quick, DESCRIPTOR(q), MAP['timeout', '5 s']);
INSERT INTO refusals SELECT id, `error.reason`
  FROM ML_PREDICT(TABLE questions, MODEL refused, DESCRIPTOR(q), MAP['timeout', '3 s']);
END;
"""


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dspark_vllm() -> str:
    import shutil
    import sys

    cli = shutil.which("dspark-vllm", path=str(Path(sys.executable).parent))
    assert cli, "the dspark-vllm command is installed beside this Python"
    return cli


def test_hostile_rows_and_servers_through_dspark_vllm_sql(tmp_path):
    """One job of three models, run by `dspark-vllm sql --log one.log` (a bare file name, in the working folder):

    - a NULL prompt under 'request.on-failure' = 'fail-job' is an error row saying why, not a failed job (nor a
      job restarted on the same row for ever); the other rows are answered;
    - ML_PREDICT's 'timeout' of 5 s leaves a sound deadline: a healthy server's answers are rows, not timeouts
      (each of them was a timeout);
    - an INPUT column that the template uses (`n`) is not also the request's `n` (3 choices paid for);
    - a per-row temperature of NaN or -3.5 is an error row naming the rule ('request.temperature' refuses them),
      never sent;
    - an endpoint that refuses connections is said at once on stderr, as for a table;
    - the model's request and parse steps register no metric twice (no "Name collision" in Flink's log);
    - SHOW CREATE MODEL through the runner prints no API key."""
    import subprocess

    key = "sk-inline-secret-4711"
    closed = _closed_port()
    with testing.serve_simulator(mode="process", profiles=("openai",), seed=4) as sim:
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=10) as response:
            model = json.load(response)["data"][0]["id"]
        script = tmp_path / "hostile.sql"
        script.write_text(HOSTILE.format(endpoint=sim.url, model=model, key=key, closed=closed, out=tmp_path / "out"))
        run = subprocess.run(
            [_dspark_vllm(), "sql", "--log", str(tmp_path / "one.log"), script.name],
            capture_output=True, text=True, timeout=600, cwd=tmp_path,
        )  # fmt: skip
        stats = sim.stats()
    # Every expectation is checked, and those that fail are listed together: one job holds them all.
    log_file = tmp_path / "one.log"
    log = log_file.read_text() if log_file.is_file() else ""
    answers = {r["id"]: r for r in read_json_dir(tmp_path / "out" / "answers")}
    refusals = read_json_dir(tmp_path / "out" / "refusals")
    quick = {r["id"]: r for r in read_json_dir(tmp_path / "out" / "quick")}
    said = [line for line in run.stderr.splitlines() if f"endpoint http://127.0.0.1:{closed}: no connection" in line]
    bad_rule = (
        "request failed: request: INPUT column 'temperature' sets the request's 'temperature' to {}: it must be a "
        "number >= 0"
    )
    checks = {
        "no API key printed or logged": key not in run.stdout + run.stderr + log and "'api-key'" in run.stdout,
        "the job ran (--log one.log)": run.returncode == 0 and log_file.is_file(),
        "every row once": sorted(answers) == sorted(quick) == sorted(r["id"] for r in refusals) == [1, 2, 3, 4, 5],
        "the valid rows are answered": all(
            i in answers and answers[i]["reason"] is None and answers[i]["content"] for i in (1, 5)
        ),
        # (one answer at least: a loaded machine may still make one row pass 4 s)
        "a 5 s timeout answers": any(r["reason"] is None and r["content"] for r in quick.values()),
        "the template's n is no body n": all(answers.get(i, {}).get("n_choices") == 1 for i in (1, 5)),
        "the NULL prompt is an error row": answers.get(2, {}).get("reason")
        == "request failed: request: INPUT column 'q' of 'prompt.template' is NULL",
        "NaN temperature is refused": answers.get(3, {}).get("reason") == bad_rule.format("NaN"),
        "-3.5 temperature is refused": answers.get(4, {}).get("reason") == bad_rule.format("-3.5"),
        "only valid rows are sent": stats.get("requests /v1/chat/completions") == 2 + 4,  # asker's, quick's
        "a refused endpoint is said once": len(said) == 1,
        "the refused rows are error rows": bool(refusals) and all(r["reason"] for r in refusals),
        # durations as a person reads them: no "within 0.000893661 s"
        "durations in ms at most": not [r for r in refusals if re.search(r"[0-9]\.[0-9]{4,} s", r["reason"] or "")],
        "no metric registered twice": "Name collision" not in log,
    }
    failed = [name for name, ok in checks.items() if not ok]
    assert not failed, f"{failed}\n{answers}\n{quick}\n{refusals}\n{stats}\n{run.stderr[-3000:]}"


def test_secrets_are_masked_in_every_line_dspark_vllm_sql_prints(tmp_path):
    """A planning error repeats the table's options (Flink's "Table options are: ...") and EXPLAIN a hint's: what
    follows the '?' of a Kafka store's URI (a SASL password) and the 'api-key' are masked in every line, from the
    runner and the command; an endpoint with a password in it is refused without repeating it."""
    import subprocess

    password, key, user = "sk-store-secret-0815", "sk-inline-secret-4711", "sk-endpoint-secret-42"
    store = (
        "kafka://127.0.0.1:9/answers?security.protocol=SASL_PLAINTEXT&sasl.mechanism=PLAIN&sasl.jaas.config="
        "org.apache.kafka.common.security.plain.PlainLoginModule%20required%20username%3D%22u%22%20password%3D%22"
        f"{password}%22%3B"
    )
    script = tmp_path / "secrets.sql"
    script.write_text(
        "CREATE TABLE answers (id STRING) WITH ('connector' = 'dspark-vllm', 'endpoint' = 'http://127.0.0.1:9', "
        f"'model' = 'm', 'prompts.rate' = '1', 'api-key' = '{key}', 'request.store' = '{store}', "
        "'profile' = 'no-such-profile');\n"
        # EXPLAIN prints a hint's options as a map: {api-key=..., request.store=...}
        "CREATE TABLE plain (id STRING) WITH ('connector' = 'dspark-vllm', 'endpoint' = 'http://127.0.0.1:9', "
        "'model' = 'm', 'prompts.rate' = '1');\n"
        f"EXPLAIN SELECT * FROM plain /*+ OPTIONS('api-key'='{key}', 'request.store'='{store}') */;\n"
        "SELECT * FROM answers;\n"
    )
    endpoint = tmp_path / "endpoint.sql"
    endpoint.write_text(
        "CREATE TABLE answers (id STRING) WITH ('connector' = 'dspark-vllm', "
        f"'endpoint' = 'http://user:{user}@127.0.0.1:9', 'model' = 'm', 'prompts.rate' = '1');\n"
        "SELECT * FROM answers;\n"
    )
    runs = [
        subprocess.run([_dspark_vllm(), "sql", str(f)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
        for f in (script, endpoint)
    ]
    for run, statement in zip(runs, (4, 2), strict=True):
        assert run.returncode == 1, run.stderr[-3000:]
        assert f"statement {statement} (SELECT * FROM answers) failed" in run.stderr, run.stderr[-3000:]
        for secret in (password, key, user):
            assert secret not in run.stdout + run.stderr, run.stderr[-3000:]
    assert "no-such-profile" in runs[0].stderr, runs[0].stderr  # (Flink's list of the options is left out)
    assert "options:{api-key=******, request.store=kafka://127.0.0.1:9/answers?******}" in runs[0].stdout
    assert "it holds a user name or password" in runs[1].stderr
