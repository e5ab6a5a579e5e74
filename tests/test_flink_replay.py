"""Mini-cluster end to end: replay files -> 'dspark-vllm' tables -> files, checked against known values.

One Flink job (a statement set with four sinks) feeds every test of this module.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.flink_support import BAD, T0, good_body, quoted, read_json_dir

pytest.importorskip("pyflink")

pytestmark = [pytest.mark.flink, pytest.mark.slow]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("replay")
    (root / "bodies").mkdir()
    with open(root / "bodies" / "a.jsonl", "wb") as f:
        for i in range(30):
            f.write(json.dumps(good_body(i)).encode() + b"\n")
    with open(root / "bodies" / "b.jsonl", "wb") as f:
        for i in range(30, 40):
            f.write(json.dumps(good_body(i, model="coder-1b")).encode() + b"\n")
            if i - 30 < len(BAD):
                f.write(BAD[i - 30][0] + b"\n")
    return root


@pytest.fixture(scope="module")
def job(corpus: Path) -> dict[str, list[dict]]:
    from connector.flink import local_environment

    env, t_env = local_environment()  # use_connector(t_env): the jar added, nothing else
    body_path = corpus / "bodies"
    # Nested ROW, metadata, computed column, watermark, projection; error rows through 'error.*' metadata.
    t_env.execute_sql(f"""
        CREATE TEMPORARY TABLE responses (
            id STRING,
            model STRING,
            created TIMESTAMP(3),
            finish_reason STRING,
            `language` STRING,
            code_blocks INT,
            usage ROW<prompt_tokens INT, completion_tokens BIGINT, total_tokens BIGINT>,
            metrics ROW<time_to_first_token_ms DOUBLE, tokens_per_second DOUBLE>,
            backend STRING METADATA FROM 'parse.backend' VIRTUAL,
            src STRING METADATA FROM 'source.path' VIRTUAL,
            src_line BIGINT METADATA FROM 'source.line' VIRTUAL,
            reason STRING METADATA FROM 'error.reason' VIRTUAL,
            raw_bytes BYTES METADATA FROM 'raw.body' VIRTUAL,
            doubled AS usage.prompt_tokens * 2,
            -- files are read in no set order: the delay covers the spread of the whole corpus
            WATERMARK FOR created AS created - INTERVAL '10' MINUTE
        ) WITH (
            'connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '{body_path}',
            'profile' = 'coder', 'model' = 'unlabelled', 'parse.backend' = 'cpu', 'parse.batch-size' = '7'
        )""")
    # A permanent table in the catalog, only two columns, the raw body as text.
    t_env.execute_sql(f"""
        CREATE TABLE plain (
            id STRING, content STRING,
            raw_body STRING METADATA FROM 'raw.body'
        ) WITH (
            'connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '{body_path / "a.jsonl"}'
        )""")
    out = corpus / "out"
    sinks = {
        "rows": "id STRING, model STRING, created STRING, finish_reason STRING, lang STRING, "
        "code_blocks INT, prompt_tokens INT, completion_tokens BIGINT, ttft DOUBLE, tps DOUBLE, "
        "backend STRING, src STRING, "
        "src_line BIGINT, doubled INT",
        "errors": "source STRING, line BIGINT, reason STRING, body_len INT, model STRING, created STRING",
        "windows": "window_start STRING, model STRING, n BIGINT, bad BIGINT, tokens BIGINT",
        "plain": "id STRING, content_len INT, raw_len INT",
        "count": "n BIGINT",
    }
    for name, columns in sinks.items():
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE sink_{name} ({quoted(columns)}) WITH "
            f"('connector' = 'filesystem', 'path' = '{out / name}', 'format' = 'json')"
        )
    statements = t_env.create_statement_set()
    statements.add_insert_sql("""
        INSERT INTO sink_rows SELECT id, model, CAST(created AS STRING), finish_reason, `language`,
            code_blocks, usage.prompt_tokens, usage.completion_tokens, metrics.time_to_first_token_ms,
            metrics.tokens_per_second, backend, src, src_line, doubled FROM responses WHERE reason IS NULL""")
    statements.add_insert_sql("""
        INSERT INTO sink_errors SELECT src, src_line, reason, CHAR_LENGTH(CAST(raw_bytes AS STRING)), model,
            CAST(created AS STRING) FROM responses WHERE reason IS NOT NULL""")
    statements.add_insert_sql("""
        INSERT INTO sink_windows SELECT CAST(window_start AS STRING), model, COUNT(*), COUNT(reason),
            SUM(usage.prompt_tokens + 0)
        FROM TABLE(TUMBLE(TABLE responses, DESCRIPTOR(created), INTERVAL '1' MINUTES))
        GROUP BY window_start, window_end, model""")
    statements.add_insert_sql(
        "INSERT INTO sink_plain SELECT id, CHAR_LENGTH(content), CHAR_LENGTH(raw_body) FROM plain"
    )
    # No column read: nothing parsed, one row per body all the same.
    statements.add_insert_sql("INSERT INTO sink_count SELECT 1 FROM plain")
    statements.execute().wait()
    result = {name: read_json_dir(out / name) for name in sinks}
    result["_t_env"] = t_env  # type: ignore[assignment]
    return result


def test_every_good_body_is_a_row_with_its_values(job):
    rows = {r["id"]: r for r in job["rows"]}
    assert sorted(rows) == sorted(f"cmpl-{i}" for i in range(40))
    assert len(job["rows"]) == 40
    for i in range(40):
        row = rows[f"cmpl-{i}"]
        expected_time = datetime.fromtimestamp(T0 + 10 * i, UTC).strftime("%Y-%m-%d %H:%M:%S")
        assert row["created"].startswith(expected_time)
        assert row["model"] == ("coder-7b" if i < 30 else "coder-1b")
        assert row["finish_reason"] == ("length" if i % 5 == 0 else "stop")
        assert (row["lang"], row["code_blocks"]) == ("python", 1 + i % 2)
        assert (row["prompt_tokens"], row["completion_tokens"]) == (10 + i, 2 * i)
        assert row["doubled"] == 2 * (10 + i)
        if i % 3 == 0:
            assert (row["ttft"], row["tps"]) == (float(i), 100.0 + i)
        else:
            assert row["ttft"] is None and row["tps"] is None
        assert row["backend"] == "cpu"


def test_metadata_source_and_line(job):
    rows = {r["id"]: r for r in job["rows"]}
    assert rows["cmpl-0"]["src"].endswith("a.jsonl") and rows["cmpl-0"]["src_line"] == 1
    assert rows["cmpl-29"]["src_line"] == 30
    # b.jsonl alternates good and bad lines for its first bodies.
    assert rows["cmpl-30"]["src"].endswith("b.jsonl") and rows["cmpl-30"]["src_line"] == 1
    assert rows["cmpl-31"]["src_line"] == 3
    assert rows["cmpl-39"]["src_line"] == 14


def test_every_bad_body_is_an_error_row_with_reason_and_line(job):
    errors = sorted(job["errors"], key=lambda r: r["line"])
    assert [e["line"] for e in errors] == [2, 4, 6, 8]
    for error, (_body, needle) in zip(errors, BAD, strict=True):
        assert error["source"].endswith("b.jsonl")
        assert needle.lower() in error["reason"].lower(), error
        assert error["body_len"] >= 1
        # The table's 'model' option labels a row whose body named none.
        assert error["model"] == "unlabelled"
        # Error rows carry the newest event time seen, never NULL (the watermark needs one).
        assert error["created"] is not None and not error["created"].startswith("1970")


def test_windows_use_event_time_and_count_error_rows(job):
    windows = {(w["window_start"][:16], w["model"]): w for w in job["windows"]}
    assert sum(w["n"] for w in job["windows"]) == 44  # every body once: 40 rows + 4 error rows
    assert sum(w["bad"] for w in job["windows"]) == 4
    # 22:13:20 + 10 s steps: minute 22:13 holds bodies 0..3, 22:14 holds 4..9.
    assert windows[("2023-11-14 22:13", "coder-7b")]["n"] == 4
    assert windows[("2023-11-14 22:14", "coder-7b")]["n"] == 6
    assert windows[("2023-11-14 22:14", "coder-7b")]["tokens"] == sum(10 + i for i in range(4, 10))


def test_a_second_table_reads_only_its_columns(job):
    plain = {r["id"]: r for r in job["plain"]}
    assert len(plain) == 30
    body = json.dumps(good_body(3))
    assert plain["cmpl-3"]["raw_len"] == len(body)
    assert plain["cmpl-3"]["content_len"] == len(good_body(3)["choices"][0]["message"]["content"])
    assert job["_t_env"].from_path("plain").get_schema().get_field_names() == ["id", "content", "raw_body"]
    assert job["count"] == [{"n": 1}] * 30


def test_declared_schema_is_kept(job):
    schema = job["_t_env"].from_path("responses").get_schema()
    assert schema.get_field_names()[:3] == ["id", "model", "created"]
    assert "ROWTIME" in str(schema.get_field_data_type("created")).upper() or "*ROWTIME*" in str(schema)


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        (
            "id STRING) WITH ('connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '/x', "
            "'parse.bakend' = 'cpu'",
            # On one line, as the SQL Client shows it (tests/test_flink_gateway.py).
            "Unsupported options found for 'dspark-vllm'. Unsupported options: parse.bakend (did you mean "
            "parse.backend?) (",
        ),
        (
            "complteion_tokens BIGINT) WITH ('connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '/x'",
            "Column 'complteion_tokens' is neither a column of profile 'openai' nor a metadata key, so it would be an "
            "answer field: did you mean 'completion_tokens'?",
        ),
        (
            "id STRING) WITH ('connector' = 'dspark-vllm', 'endpoint' = 'http://x', 'model' = 'm'",
            "One of 'prompts.path' or 'prompts.rate' is required when 'mode' = 'request' (prompts from another "
            "table: read them with a table of their own connector and ask the model with ML_PREDICT",
        ),
        (
            # Retired: one line that says what replaced it, not Flink's "Unsupported options".
            "id STRING) WITH ('connector' = 'dspark-vllm', 'endpoint' = 'http://x', 'model' = 'm', "
            "'prompts.source.connector' = 'kafka', 'prompts.source.topic' = 't', 'prompts.column' = 'q'",
            "('connector' = 'dspark-vllm'): Option 'prompts.column' is retired with 'prompts.source.*': name the "
            "prompt column in ML_PREDICT's DESCRIPTOR(column);",
        ),
        (
            "id STRING) WITH ('connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '/x', "
            "'profile' = 'no-such-profile'",
            "no-such-profile",
        ),
    ],
)
def test_bad_declarations_fail_with_clear_messages(job, declaration, message):
    from py4j.protocol import Py4JJavaError

    t_env = job["_t_env"]
    t_env.execute_sql(f"CREATE TEMPORARY TABLE bad ({declaration})")  # Flink plans a table when it is read
    try:
        with pytest.raises(Py4JJavaError) as info:
            t_env.explain_sql("SELECT * FROM bad")
        text = str(info.value)
        assert (
            "ValidationException: Table 'default_catalog.default_database.bad' ('connector' = 'dspark-vllm'): " in text
        )
        assert message in text
    finally:
        t_env.execute_sql("DROP TEMPORARY TABLE bad")


def test_unknown_metadata_key_is_refused_by_flink(job):
    from py4j.protocol import Py4JJavaError

    t_env = job["_t_env"]
    t_env.execute_sql(
        "CREATE TEMPORARY TABLE bad (c STRING METADATA FROM 'request.colour') WITH ("
        "'connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '/x')"
    )
    try:
        with pytest.raises(Py4JJavaError, match="Invalid metadata key 'request.colour'"):
            t_env.explain_sql("SELECT * FROM bad")
    finally:
        t_env.execute_sql("DROP TEMPORARY TABLE bad")
