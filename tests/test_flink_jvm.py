"""The parse step inside the JVM (issue 18): a cpu-mode table runs without a Python worker on its TaskManager.

One job on the mini-cluster with 'python.executable' pointing at nothing: had any Python operator been in
the job, it could not start. Its rows and error rows are those `parse_batch` gives for the same bodies.
"""

from __future__ import annotations

import json

import pytest

from connector.decode import parse_batch
from tests.test_flink_replay import BAD, good_body, quoted, read_json_dir

pytest.importorskip("pyflink")

pytestmark = [pytest.mark.flink, pytest.mark.slow]

COLUMNS = ["id", "model", "created", "finish_reason", "prompt_tokens", "tokens_per_second", "choice_contents"]


@pytest.fixture(scope="module")
def bodies() -> list[bytes]:
    out = []
    for i in range(60):
        out.append(json.dumps(good_body(i)).encode())
        if i < len(BAD):
            out.append(BAD[i][0])
    out.append(b'{"id": "no-time", "object": "chat.completion", "model": "m", "choices": []}')
    return out


@pytest.fixture(scope="module")
def job(tmp_path_factory, bodies: list[bytes]) -> dict[str, list[dict]]:
    from connector.flink import local_environment

    root = tmp_path_factory.mktemp("jvm")
    (root / "bodies").mkdir()
    (root / "bodies" / "a.jsonl").write_bytes(b"\n".join(bodies) + b"\n")
    env, t_env = local_environment()
    t_env.get_config().set("python.executable", str(root / "there-is-no-python-here"))
    # With object reuse Flink hands each operator the same row object again and again: the parse step, which
    # holds a batch of rows, must copy them (it did not: 4 distinct ids in 200 rows). test_flink_replay runs
    # without it.
    t_env.get_config().set("pipeline.object-reuse", "true")
    t_env.execute_sql(f"""
        CREATE TEMPORARY TABLE responses (
            id STRING, model STRING, created TIMESTAMP(3), finish_reason STRING,
            usage ROW<prompt_tokens BIGINT>, metrics ROW<tokens_per_second DOUBLE>, choice_contents ARRAY<STRING>,
            backend STRING METADATA FROM 'parse.backend' VIRTUAL,
            line BIGINT METADATA FROM 'source.line' VIRTUAL,
            reason STRING METADATA FROM 'error.reason' VIRTUAL,
            field STRING METADATA FROM 'error.field' VIRTUAL
        ) WITH (
            'connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '{root / "bodies"}',
            'profile' = 'openai', 'parse.backend' = 'cpu', 'parse.batch-size' = '13'
        )""")
    sink = (
        "id STRING, model STRING, created STRING, finish_reason STRING, prompt_tokens BIGINT, "
        "tokens_per_second DOUBLE, choice_contents ARRAY<STRING>, backend STRING, line BIGINT, reason STRING, "
        "field STRING"
    )
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE sink ({quoted(sink)}) WITH "
        f"('connector' = 'filesystem', 'path' = '{root / 'out'}', 'format' = 'json')"
    )
    # Columns the parse step cannot write as declared (a number as text, a DECIMAL): its flat row, then SQL.
    t_env.execute_sql(f"""
        CREATE TEMPORARY TABLE casted (
            id STRING, usage ROW<prompt_tokens STRING>, metrics ROW<tokens_per_second DECIMAL(10, 2)>,
            line BIGINT METADATA FROM 'source.line' VIRTUAL
        ) WITH (
            'connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '{root / "bodies"}',
            'profile' = 'openai', 'parse.backend' = 'cpu'
        )""")
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE sink_casted ({quoted('id STRING, prompt_tokens STRING, tps STRING, line BIGINT')}) "
        f"WITH ('connector' = 'filesystem', 'path' = '{root / 'casted'}', 'format' = 'json')"
    )
    statements = t_env.create_statement_set()
    statements.add_insert_sql("""
        INSERT INTO sink SELECT id, model, CAST(created AS STRING), finish_reason,
            usage.prompt_tokens, metrics.tokens_per_second, choice_contents, backend, line, reason, field
        FROM responses""")
    statements.add_insert_sql("""
        INSERT INTO sink_casted SELECT id, usage.prompt_tokens, CAST(metrics.tokens_per_second AS STRING), line
        FROM casted""")
    statements.execute().wait()
    return {"rows": read_json_dir(root / "out"), "casted": read_json_dir(root / "casted")}


def test_every_body_is_the_row_or_error_row_python_gives(job, bodies):
    expected = parse_batch(bodies, "openai", backend="cpu", columns=COLUMNS, inline_errors=True).table.to_pylist()
    got = {r["line"]: r for r in job["rows"]}
    assert sorted(got) == list(range(1, len(bodies) + 1))
    for line, want in enumerate(expected, start=1):
        row = got[line]
        assert (row["reason"], row["field"]) == (want["error_reason"], want["error_field"]), line
        assert row["backend"] == "cpu"
        if want["error_reason"] is not None:
            assert row["id"] is None
            continue
        assert (row["id"], row["model"], row["finish_reason"]) == (want["id"], want["model"], want["finish_reason"])
        assert (row["prompt_tokens"], row["tokens_per_second"]) == (want["prompt_tokens"], want["tokens_per_second"])
        assert row["choice_contents"] == want["choice_contents"]
        if want["created"] is not None:
            assert row["created"].startswith(want["created"].strftime("%Y-%m-%d %H:%M:%S")), line
    assert sum(r["reason"] is not None for r in job["rows"]) == len(BAD)


def test_a_row_without_created_gets_the_newest_time_before_it(job):
    row = next(r for r in job["rows"] if r["id"] == "no-time")
    newest = max(r["created"] for r in job["rows"] if r["id"] not in (None, "no-time"))
    assert row["created"] == newest
    assert newest.startswith("2023-")


def test_columns_only_sql_can_make_go_through_the_flat_row(job, bodies):
    expected = parse_batch(bodies, "openai", backend="cpu", columns=["id", "prompt_tokens", "tokens_per_second"])
    want = {row["line"]: row for row in expected.table.to_pylist()}
    got = {r["line"]: r for r in job["casted"]}
    assert sorted(got) == list(range(1, len(bodies) + 1))
    for line, row in want.items():
        assert got[line]["id"] == row["id"]
        assert got[line]["prompt_tokens"] == (None if row["prompt_tokens"] is None else str(row["prompt_tokens"]))
        tps = row["tokens_per_second"]
        assert got[line]["tps"] == (None if tps is None else f"{tps:.2f}"), line
