"""'format' = 'dspark-vllm' (issue 18): raw bodies in another connector's table (the filesystem connector here;
Kafka is documented, no broker is reachable) get the profile's typed columns, parsed in the JVM.

One job with two tables over the same file ('on-error' = 'column' and 'skip') and 'python.executable'
pointing at nothing; a second, tiny job shows 'fail' failing.
"""

from __future__ import annotations

import json

import pytest

from connector.decode import parse_batch
from tests.test_flink_replay import BAD, good_body, quoted, read_json_dir

pytest.importorskip("pyflink")

pytestmark = [pytest.mark.flink, pytest.mark.slow]

COLUMNS = [
    "id",
    "model",
    "created",
    "prompt_tokens",
    "total_tokens",
    "choice_finish_reasons",
    "language",
    "code_blocks",
]


@pytest.fixture(scope="module")
def bodies() -> list[bytes]:
    out = [json.dumps(good_body(i)).encode() for i in range(25)]
    for i, (bad, _) in enumerate(BAD):
        out.insert(3 * i + 1, bad)
    return out


@pytest.fixture(scope="module")
def root(tmp_path_factory, bodies):
    root = tmp_path_factory.mktemp("format")
    (root / "in").mkdir()
    (root / "in" / "bodies.jsonl").write_bytes(b"\n".join(bodies) + b"\n")
    return root


def _table(name: str, root, on_error: str, error_columns: str) -> str:
    return f"""
        CREATE TEMPORARY TABLE {name} (
            id STRING, model STRING, created TIMESTAMP(3),
            usage ROW<prompt_tokens INT, total_tokens BIGINT>, choice_finish_reasons ARRAY<STRING>,
            `language` STRING, code_blocks BIGINT{error_columns}
        ) WITH (
            'connector' = 'filesystem', 'path' = '{root / "in"}', 'format' = 'dspark-vllm',
            'dspark-vllm.profile' = 'coder', 'dspark-vllm.on-error' = '{on_error}'
        )"""


@pytest.fixture(scope="module")
def job(root) -> dict[str, list[dict]]:
    from connector.flink import local_environment

    env, t_env = local_environment()
    t_env.get_config().set("python.executable", str(root / "there-is-no-python-here"))
    t_env.execute_sql(_table("with_errors", root, "column", ", error_reason STRING, error_field STRING"))
    t_env.execute_sql(_table("skipping", root, "skip", ""))
    sinks = {
        "with_errors": "id STRING, model STRING, created STRING, prompt_tokens INT, total_tokens BIGINT, "
        "reasons ARRAY<STRING>, lang STRING, code_blocks BIGINT, error_reason STRING, error_field STRING",
        "skipping": "id STRING, total_tokens BIGINT",
    }
    for name, columns in sinks.items():
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE sink_{name} ({quoted(columns)}) WITH "
            f"('connector' = 'filesystem', 'path' = '{root / 'out' / name}', 'format' = 'json')"
        )
    statements = t_env.create_statement_set()
    statements.add_insert_sql("""
        INSERT INTO sink_with_errors SELECT id, model, CAST(created AS STRING), usage.prompt_tokens,
            usage.total_tokens, choice_finish_reasons, `language`, code_blocks, error_reason, error_field
        FROM with_errors""")
    statements.add_insert_sql("INSERT INTO sink_skipping SELECT id, usage.total_tokens FROM skipping")
    statements.execute().wait()
    return {name: read_json_dir(root / "out" / name) for name in sinks}


def test_every_body_is_the_row_or_the_error_row_python_gives(job, bodies):
    expected = parse_batch(bodies, "coder", backend="cpu", columns=COLUMNS, inline_errors=True).table.to_pylist()
    got = sorted(job["with_errors"], key=lambda r: (r["id"] or "", r["error_reason"] or ""))
    want = sorted(expected, key=lambda r: (r["id"] or "", r["error_reason"] or ""))
    assert len(got) == len(bodies)
    for row, e in zip(got, want, strict=True):
        assert (row["error_reason"], row["error_field"]) == (e["error_reason"], e["error_field"])
        assert (row["id"], row["model"], row["prompt_tokens"], row["total_tokens"]) == (
            e["id"],
            e["model"],
            e["prompt_tokens"],
            e["total_tokens"],
        )
        assert row["reasons"] == e["choice_finish_reasons"]
        assert (row["lang"], row["code_blocks"]) == (e["language"], e["code_blocks"])
        if e["created"] is not None:
            assert row["created"].startswith(e["created"].strftime("%Y-%m-%d %H:%M:%S"))
    assert sum(r["error_reason"] is not None for r in got) == len(BAD)
    assert {r["lang"] for r in got} == {"python", None}  # the content's JSON, read in the JVM


def test_skip_gives_the_good_bodies_only(job):
    assert sorted(r["id"] for r in job["skipping"]) == sorted(f"cmpl-{i}" for i in range(25))
    assert all(r["total_tokens"] is not None for r in job["skipping"])


def test_fail_fails_the_job_with_the_reason(root):
    from connector.flink import local_environment

    env, t_env = local_environment()
    t_env.execute_sql(_table("failing", root, "fail", ""))
    # PyFlink raises its Py4J error; the text is checked.
    with pytest.raises(Exception) as caught, t_env.execute_sql("SELECT id FROM failing").collect() as rows:  # noqa: PT011
        for _ in rows:
            pass
    assert "a rejected body ('dspark-vllm.on-error' = 'fail')" in str(caught.value)


def test_a_misspelt_format_option_is_refused_when_planned(root):
    """Every 'dspark-vllm.*' key reaches the planner: 'dspark-vllm.on-eror' = 'fail' was ignored (the default
    'column' kept, the user never told) and 'dspark-vllm.foo' accepted."""
    from connector.flink import local_environment

    env, t_env = local_environment()
    t_env.execute_sql(f"""
        CREATE TEMPORARY TABLE misspelt (id STRING, error_reason STRING) WITH (
            'connector' = 'filesystem', 'path' = '{root / "in"}', 'format' = 'dspark-vllm',
            'dspark-vllm.on-eror' = 'fail', 'dspark-vllm.foo' = '1'
        )""")
    with pytest.raises(Exception) as caught:  # noqa: PT011 - PyFlink raises its Py4J error; the text is checked
        t_env.sql_query("SELECT id FROM misspelt").explain()
    assert "'format' = 'dspark-vllm' has no option 'dspark-vllm.foo', 'dspark-vllm.on-eror'" in str(caught.value)
