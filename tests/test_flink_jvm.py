"""The parse step inside the JVM (issue 18): a cpu-mode table runs without a Python worker on its TaskManager.

One job on the mini-cluster with 'python.executable' pointing at nothing: had any Python operator been in
the job, it could not start. Its rows and error rows are those `parse_batch` gives for the same bodies.
"""

from __future__ import annotations

import pytest

from connector.decode import parse_batch
from tests.test_flink_replay import BAD, mixed_bodies, quoted, read_json_dir

pytest.importorskip("pyflink")

pytestmark = [pytest.mark.flink, pytest.mark.slow]

COLUMNS = ["id", "model", "created", "finish_reason", "prompt_tokens", "tokens_per_second", "choice_contents"]


@pytest.fixture(scope="module")
def bodies() -> list[bytes]:
    out = mixed_bodies(60)
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
    # Every column of a profile over mutated bodies: the parse step writes the declared rows itself.
    every = every_flat_column("coder")
    (root / "every").mkdir()
    (root / "every" / "a.jsonl").write_bytes(b"\n".join(mutated_corpus()) + b"\n")
    t_env.execute_sql(f"""
        CREATE TEMPORARY TABLE every_column ({quoted(", ".join(f"{n} {t}" for n, t in every))},
            line BIGINT METADATA FROM 'source.line' VIRTUAL, reason STRING METADATA FROM 'error.reason' VIRTUAL
        ) WITH (
            'connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '{root / "every"}',
            'profile' = 'coder', 'parse.backend' = 'cpu', 'parse.batch-size' = '64'
        )""")
    sink_every = ", ".join(f"{n} {t}" for n, t in every) + ", line BIGINT, reason STRING"
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE sink_every ({quoted(sink_every)}) "
        f"WITH ('connector' = 'filesystem', 'path' = '{root / 'every-out'}', 'format' = 'json')"
    )
    statements = t_env.create_statement_set()
    statements.add_insert_sql("INSERT INTO sink_every SELECT * FROM every_column")
    statements.add_insert_sql("""
        INSERT INTO sink SELECT id, model, CAST(created AS STRING), finish_reason,
            usage.prompt_tokens, metrics.tokens_per_second, choice_contents, backend, line, reason, field
        FROM responses""")
    statements.add_insert_sql("""
        INSERT INTO sink_casted SELECT id, usage.prompt_tokens, CAST(metrics.tokens_per_second AS STRING), line
        FROM casted""")
    statements.execute().wait()
    return {
        "rows": read_json_dir(root / "out"),
        "casted": read_json_dir(root / "casted"),
        "every": read_json_dir(root / "every-out"),
    }


def every_flat_column(profile: str) -> list[tuple[str, str]]:
    """Every column of `profile` (but `line`) with its Flink type, as a user declares them all."""
    from connector.profiles import load_profile
    from connector.schema.columns import output_schema
    from connector.schema.flink_types import arrow_to_flink_sql

    return [(f.name, arrow_to_flink_sql(f.type)) for f in output_schema(load_profile(profile)) if f.name != "line"]


def mutated_corpus() -> list[bytes]:
    """Coder bodies, a third of them mutated, then JSONTestSuite's files (where it is here) as contents, as
    whole bodies and in a field that is read: one body per line, so bodies with a line break are left out."""
    import random

    from connector.simulator.responses import make_corpus
    from tests.test_fuzz import mutate
    from tests.test_jsontestsuite import FILES, as_content, in_read_field

    rng = random.Random("issue-18 every column")
    out = [mutate(body, rng) if rng.random() < 0.33 else body for body in make_corpus(400, "coder", seed=18)]
    for path in FILES:
        data = path.read_bytes()
        out += [as_content(data), data, in_read_field(data)]
    return [b for b in out if b"\n" not in b and b"\r" not in b and b.strip()]


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


def test_every_column_of_a_profile_over_mutated_bodies_is_what_parse_batch_gives(job):
    """The declared rows the parse step writes in the JVM (RowShape), every column type of a profile: strings,
    BIGINT, DOUBLE, TIMESTAMP(3), arrays, content properties and content_error, over mutated bodies and
    JSONTestSuite's files."""
    import math

    bodies = mutated_corpus()
    names = [n for n, _ in every_flat_column("coder")]
    expected = parse_batch(bodies, "coder", backend="cpu", inline_errors=True).table.to_pylist()
    got = {r["line"]: r for r in job["every"]}
    assert sorted(got) == list(range(1, len(bodies) + 1))
    assert sum(r["reason"] is not None for r in job["every"]) > 50  # the mutations made error rows
    for line, want in enumerate(expected, start=1):
        row = got[line]
        assert row["reason"] == want["error_reason"], line
        for name in names:
            value, reference = row[name], want[name]
            if name == "created":
                if reference is None or want["error_reason"] is not None:
                    continue  # the table fills it: the newest time before (test_a_row_without_created_...)
                reference, value = reference.strftime("%Y-%m-%d %H:%M:%S"), value[:19]
            if isinstance(reference, float):
                assert math.isclose(value, reference, rel_tol=1e-15), (line, name, value, reference)
            else:
                assert value == reference, (line, name, value, reference)
