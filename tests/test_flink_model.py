"""Enrichment: `CREATE MODEL ... WITH ('provider' = 'dspark-vllm')` and `ML_PREDICT`, the model's own jobs.

The request step through a model and through a request-mode table is one suite over both routes, on one job:
tests/test_flink_request.py (every input once, metadata, error rows, a plain client's answers, unordered
output; and a model's input columns, plan and event-time windows). Here: what is refused when a model is
planned and a .sql file through `dspark-vllm sql`.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from tests.flink_support import PREDICT, model_ddl, read_json_dir

pytest.importorskip("pyflink")

from connector.simulator import testing  # noqa: E402

pytestmark = [pytest.mark.flink, pytest.mark.slow]


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
