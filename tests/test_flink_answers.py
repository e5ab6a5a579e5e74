"""Typed answers end to end: declared answer fields of every type form, read from answers that keep their schema
and from answers that do not, on every route that parses (a replay table on cpu, the format, a replay table on gpu
with libcudf emulated) and through ML_PREDICT against the simulator, which keeps to any schema it is sent.

Each body gives one row: typed, or an error row whose `error.reason` says why (cut by max_tokens, a refusal,
content that is no JSON object, a field missing, of another type, out of its type's range, too long, not one of
its values, too many items, a date that is none) with every answer field NULL. The routes give the same rows.
"""

from __future__ import annotations

import json

import pytest

from tests.flink_support import good_body, read_json_dir

pytest.importorskip("pyflink")

pytestmark = [pytest.mark.flink, pytest.mark.slow]

# Every type form of an answer field, as a table or a model declares it.
DECLARED = (
    "b BOOLEAN, t TINYINT, i INT, bi BIGINT, f FLOAT, amount DECIMAL(6, 2), c CHAR(3), v VARCHAR(5), s STRING, "
    "dt DATE, tm TIME(0), ts TIMESTAMP(3), ltz TIMESTAMP_LTZ(3), arr ARRAY<INT>, tags ARRAY<VARCHAR(4)>, "
    "m MAP<STRING, INT>, r ROW<x INT, y ARRAY<STRING>>, rs ARRAY<ROW<k STRING, n DOUBLE>>"
)
OPTIONS = {"answer.v.enum": "yes;no;maybe", "answer.tags.max-items": "2", "answer.nullable": "s"}
GOOD = {
    "b": True, "t": -128, "i": 2147483647, "bi": -(2**63), "f": 1.5, "amount": 1234.5, "c": "ab", "v": "maybe",
    "s": None, "dt": "2024-02-29", "tm": "23:59:59", "ts": "2026-12-07T01:02:03.456", "ltz": "1969-12-31T23:59:59Z",
    "arr": [1, -2], "tags": ["a😀", "bcde"], "m": {"k": 1, "ü": -1}, "r": {"x": 5, "y": ["p", "q"]},
    "rs": [{"k": "a", "n": 0.25}],
}  # fmt: skip
NAMES = list(GOOD)
# (what changes in the good answer, the reason's end, the field named)
BAD = [
    ({"t": 128}, "field 't' is 128, out of TINYINT's range", "t"),
    ({"i": 2**31}, "field 'i' is 2147483648, out of INT's range", "i"),
    ({"c": "abcd"}, "field 'c' is 4 characters long, longer than CHAR(3) holds", "c"),
    ({"v": "nope"}, "field 'v' is 'nope', not one of its values [yes, no, maybe]", "v"),
    ({"tags": ["a", "b", "c"]}, "field 'tags' has 3 items, not 0 to 2", "tags"),
    ({"tags": ["abcdef"]}, "field 'tags[0]' is 6 characters long, longer than VARCHAR(4) holds", "tags[0]"),
    ({"dt": "2023-02-29"}, "field 'dt' is '2023-02-29', not a date as YYYY-MM-DD", "dt"),
    ({"ltz": "2026-12-07T01:02:03"}, "field 'ltz' is '2026-12-07T01:02:03', not a UTC timestamp", "ltz"),
    ({"ts": "2026-12-07T01:02"}, "field 'ts' is '2026-12-07T01:02', not a timestamp as YYYY-MM-DDTHH:MM:SS", "ts"),
    ({"amount": 123456.0}, "field 'amount' is 123456.0, out of DECIMAL(6, 2)'s range", "amount"),
    ({"r": {"x": 5}}, "field 'r.y' is missing or null", "r.y"),
    ({"m": {"k": "one"}}, "field 'm['k']' is 'one', not an integer", "m['k']"),
    ({"rs": [{"k": "a", "n": "x"}]}, "field 'rs[0].n' is 'x', not a number", "rs[0].n"),
    ({"b": None}, "field 'b' is missing or null (the model must answer it", "b"),
    ({"i": "7"}, "property 'i': wrong type: expected integer, got string", "i"),
]


def body(i: int, content, *, finish: str = "stop", refusal: str | None = None) -> bytes:
    out = good_body(i)
    out["choices"] = [{"index": 0, "finish_reason": finish,
                       "message": {"role": "assistant", "content": content, "refusal": refusal}}]  # fmt: skip
    out["usage"] = {"prompt_tokens": 10, "completion_tokens": 48, "total_tokens": 58}
    return json.dumps(out, ensure_ascii=False).encode()


def corpus() -> tuple[list[bytes], list[tuple[str | None, str | None]]]:
    """The bodies, and for each the expected (reason's end, field): (None, None) for a typed row."""
    bodies = [body(0, json.dumps(GOOD, ensure_ascii=False)), body(1, json.dumps({**GOOD, "s": "free text"}))]
    expected: list[tuple[str | None, str | None]] = [(None, None), (None, None)]
    for k, (change, reason, field) in enumerate(BAD):
        bodies.append(body(10 + k, json.dumps({**GOOD, **change}, ensure_ascii=False)))
        expected.append((reason, field))
    bodies.append(body(40, json.dumps(GOOD)[:30], finish="length"))
    expected.append(("the answer was cut by the server's token limit (48 tokens) before it was whole", "finish_reason"))
    bodies.append(body(41, None, refusal="I cannot help with that."))
    expected.append(("the model refused to answer: I cannot help with that.", "refusal"))
    bodies.append(body(42, "Sure! Here is the JSON you wanted."))
    expected.append(("the answer does not keep its schema: ", None))
    missing = dict(GOOD)
    del missing["arr"]
    bodies.append(body(43, json.dumps(missing)))
    expected.append(("field 'arr' is missing or null", "arr"))
    return bodies, expected


SELECT = ", ".join(f"`{n}`" for n in NAMES) + ", reason, field, finish_reason, completion_tokens"
SINK_COLUMNS = (
    DECLARED.replace("ltz TIMESTAMP_LTZ(3)", "ltz STRING").replace("ts TIMESTAMP(3)", "ts STRING")
    + ", reason STRING, field STRING, finish_reason STRING, completion_tokens BIGINT"
)
with_options = ", ".join(f"'{k}' = '{v}'" for k, v in OPTIONS.items())


def _replay(t_env, name: str, folder, backend: str) -> None:
    t_env.execute_sql(f"""
        CREATE TEMPORARY TABLE {name} ({DECLARED}, finish_reason STRING, completion_tokens BIGINT,
            reason STRING METADATA FROM 'error.reason' VIRTUAL, field STRING METADATA FROM 'error.field' VIRTUAL)
        WITH ('connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '{folder}',
              'parse.backend' = '{backend}', 'parse.batch-size' = '4', {with_options})""")


def _sink(t_env, name: str, path) -> None:
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE {name} ({SINK_COLUMNS}) WITH ('connector' = 'filesystem', 'path' = '{path}', "
        "'format' = 'json')"
    )


def _insert(name: str, source: str) -> str:
    cast = SELECT.replace("`ts`", "CAST(`ts` AS STRING)").replace("`ltz`", "CAST(`ltz` AS STRING)")
    return f"INSERT INTO {name} SELECT {cast} FROM {source}"


@pytest.fixture(scope="module")
def routes(tmp_path_factory) -> dict[str, list[dict]]:
    """The corpus through the three routes: cpu and format in one job, gpu (emulated libcudf) in a second."""
    from connector.flink import local_environment
    from connector.parse import backends
    from tests.libcudf_emulator import EmulatedLibcudfReader

    root = tmp_path_factory.mktemp("answers")
    bodies, _ = corpus()
    (root / "bodies").mkdir()
    (root / "bodies" / "a.jsonl").write_bytes(b"\n".join(bodies) + b"\n")
    _, t_env = local_environment()
    t_env.get_config().set("table.local-time-zone", "Asia/Kolkata")  # TIMESTAMP_LTZ is the instant in any zone
    _replay(t_env, "cpu_table", root / "bodies", "cpu")
    fmt = ", ".join(f"'dspark-vllm.{k}' = '{v}'" for k, v in OPTIONS.items())
    t_env.execute_sql(f"""
        CREATE TEMPORARY TABLE format_table ({DECLARED}, finish_reason STRING, completion_tokens BIGINT,
            error_reason STRING, error_field STRING)
        WITH ('connector' = 'filesystem', 'path' = '{root / "bodies"}', 'format' = 'dspark-vllm', {fmt})""")
    statements = t_env.create_statement_set()
    for route in ("cpu", "format"):
        _sink(t_env, f"sink_{route}", root / route)
    statements.add_insert_sql(_insert("sink_cpu", "cpu_table"))
    statements.add_insert_sql(
        _insert("sink_format", "format_table").replace("reason, field,", "error_reason, error_field,")
    )
    statements.execute().wait()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backends, "_gpu", lambda: backends.GpuBackend(EmulatedLibcudfReader()))
        _, g_env = local_environment()
        g_env.get_config().set("table.local-time-zone", "Asia/Kolkata")
        _replay(g_env, "gpu_table", root / "bodies", "gpu")
        _sink(g_env, "sink_gpu", root / "gpu")
        g_env.execute_sql(_insert("sink_gpu", "gpu_table")).wait()
    return {route: read_json_dir(root / route) for route in ("cpu", "format", "gpu")}


@pytest.mark.parametrize("route", ["cpu", "format", "gpu"])
def test_every_answer_is_typed_or_an_error_row_that_says_why(routes, route):
    _, expected = corpus()
    rows = routes[route]
    assert len(rows) == len(expected)
    by_tokens = sorted(rows, key=lambda r: (r["reason"] is not None, r["reason"] or "", r["s"] or ""))
    typed = [r for r in by_tokens if r["reason"] is None]
    assert len(typed) == 2
    for row in typed:
        assert row["b"] is True and row["t"] == -128 and row["i"] == 2147483647 and row["bi"] == -(2**63)
        assert row["f"] == 1.5 and row["amount"] == 1234.5 and row["c"] == "ab " and row["v"] == "maybe"
        assert row["dt"] == "2024-02-29" and row["tm"] == "23:59:59" and row["ts"] == "2026-12-07 01:02:03.456"
        assert row["ltz"] == "1970-01-01 05:29:59.000"  # 1969-12-31T23:59:59Z in Asia/Kolkata
        assert row["arr"] == [1, -2] and row["tags"] == ["a😀", "bcde"] and row["m"] == {"k": 1, "ü": -1}
        assert row["r"] == {"x": 5, "y": ["p", "q"]} and row["rs"] == [{"k": "a", "n": 0.25}]
    assert sorted(r["s"] for r in typed if r["s"]) == ["free text"]  # 'answer.nullable': s may be null
    errors = [r for r in rows if r["reason"] is not None]
    wanted = sorted((reason, field) for reason, field in expected if reason is not None)
    got = sorted((r["reason"], r["field"]) for r in errors)
    assert len(got) == len(wanted)
    for reason, field in wanted:
        match = [g for g in got if reason in g[0] and g[1] == field]
        assert match, (reason, field, got)
    for row in errors:  # never a half-typed row: every answer field NULL, the body's own columns kept
        assert all(row[n] is None for n in NAMES), row
        assert row["completion_tokens"] == 48


def test_the_routes_give_the_same_rows(routes):
    def key(rows):
        return sorted(json.dumps(r, sort_keys=True) for r in rows)

    assert key(routes["cpu"]) == key(routes["format"]) == key(routes["gpu"])


def expected_value(name: str, value):
    """What a field of the model's JSON is as the json sink writes the declared column (UTC session zone)."""
    if value is None:
        return None
    if name == "c":
        return value.ljust(3)
    if name in ("ts", "ltz"):
        text = value.rstrip("Z").replace("T", " ")
        head, _, fraction = text.partition(".")
        return f"{head}.{(fraction + '000')[:3]}"
    if name == "f":
        return pytest.approx(value, rel=1e-6)
    if name == "amount":
        return pytest.approx(round(value, 2))
    if name == "rs":
        return [{"k": r["k"], "n": pytest.approx(r["n"])} for r in value]
    return value


@pytest.fixture(scope="module")
def round_trip(tmp_path_factory) -> dict[str, list[dict]]:
    """30 prompts through the simulator, which keeps to the schema each request carries: ML_PREDICT (the model's
    parse step in the JVM), a request-mode table on cpu and one on gpu (libcudf emulated), in one job."""
    from connector.flink import local_environment
    from connector.parse import backends
    from connector.simulator import testing
    from tests.libcudf_emulator import EmulatedLibcudfReader

    root = tmp_path_factory.mktemp("round-trip")
    (root / "prompts.txt").write_text("".join(f"Classify review {i}.\n" for i in range(30)))
    columns = (
        f"{DECLARED}, body BYTES METADATA FROM 'raw.body' VIRTUAL, reason STRING METADATA FROM 'error.reason' VIRTUAL"
    )
    with (
        testing.serve_simulator(mode="process", profiles=("openai",), seed=11) as sim,
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setattr(backends, "_gpu", lambda: backends.GpuBackend(EmulatedLibcudfReader()))
        model = json.load(__import__("urllib.request").request.urlopen(sim.url + "/v1/models"))["data"][0]["id"]
        _, t_env = local_environment()
        t_env.get_config().set("table.local-time-zone", "UTC")
        common = f"'endpoint' = '{sim.url}', 'model' = '{model}', 'request.max-tokens' = '4000', {with_options}"
        for backend in ("cpu", "gpu"):
            t_env.execute_sql(f"""
                CREATE TEMPORARY TABLE asked_{backend} ({columns}) WITH ('connector' = 'dspark-vllm',
                    'prompts.path' = '{root / "prompts.txt"}', 'parse.backend' = '{backend}', {common})""")
        t_env.execute_sql(
            "CREATE TEMPORARY VIEW prompts AS SELECT * FROM (VALUES "
            + ", ".join(f"('Classify review {i}.')" for i in range(30))
            + ") AS p(prompt)"
        )
        t_env.execute_sql(f"""
            CREATE TEMPORARY MODEL judge INPUT (prompt STRING)
            OUTPUT ({DECLARED}, `raw.body` BYTES, `error.reason` STRING) WITH ('provider' = 'dspark-vllm', {common})""")
        sink = SINK_COLUMNS.replace(", finish_reason STRING, completion_tokens BIGINT", "").replace(
            "reason STRING, field STRING", "body STRING, reason STRING"
        )
        statements = t_env.create_statement_set()
        names = (
            ", ".join(f"`{n}`" for n in NAMES)
            .replace("`ts`", "CAST(`ts` AS STRING)")
            .replace("`ltz`", "CAST(`ltz` AS STRING)")
        )
        for route, source, raw, reason in (
            ("table_cpu", "asked_cpu", "body", "reason"),
            ("table_gpu", "asked_gpu", "body", "reason"),
            ("model", "ML_PREDICT(TABLE prompts, MODEL judge, DESCRIPTOR(prompt))", "`raw.body`", "`error.reason`"),
        ):
            t_env.execute_sql(
                f"CREATE TEMPORARY TABLE out_{route} ({sink}) WITH ('connector' = 'filesystem', "
                f"'path' = '{root / route}', 'format' = 'json')"
            )
            statements.add_insert_sql(
                f"INSERT INTO out_{route} SELECT {names}, CAST({raw} AS STRING), {reason} FROM {source}"
            )
        statements.execute().wait()
    return {route: read_json_dir(root / route) for route in ("table_cpu", "table_gpu", "model")}


@pytest.mark.parametrize("route", ["model", "table_cpu", "table_gpu"])
def test_every_type_form_round_trips_through_the_simulator(round_trip, route):
    rows = round_trip[route]
    assert len(rows) == 30
    for row in rows:
        assert row["reason"] is None, row["reason"]
        content = json.loads(json.loads(row["body"])["choices"][0]["message"]["content"])
        for name in NAMES:
            assert row[name] == expected_value(name, content[name]), (name, row[name], content[name])


def test_answer_schema_prints_what_a_model_sends_and_refuses_a_type_without_json(tmp_path):
    """`dspark-vllm answer-schema FILE.sql`: the schema the model's requests carry, before anything runs; a type
    with no JSON form is one line and exit 1."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    cli = shutil.which("dspark-vllm", path=str(Path(sys.executable).parent))
    assert cli
    model = """CREATE TEMPORARY MODEL reviewer INPUT (review STRING)
        OUTPUT (sentiment VARCHAR(8) COMMENT 'how the reviewer feels', tags ARRAY<VARCHAR(6)>, `error.reason` STRING)
        WITH ('provider' = 'dspark-vllm', 'endpoint' = 'http://127.0.0.1:9', 'model' = 'm',
              'answer.sentiment.enum' = 'positive;negative', 'answer.tags.max-items' = '3'{more});
        SELECT * FROM ML_PREDICT(TABLE nowhere, MODEL reviewer, DESCRIPTOR(review));"""
    (tmp_path / "good.sql").write_text(model.format(more=""))
    run = subprocess.run(
        [cli, "answer-schema", str(tmp_path / "good.sql")], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    head, _, schema = run.stdout.partition("\n")
    assert head == "-- model reviewer: sent as response_format json_schema (strict); every answer is checked against it"
    assert json.loads(schema) == {
        "type": "object",
        "properties": {
            "sentiment": {"type": "string", "enum": ["positive", "negative"], "description": "how the reviewer feels"},
            "tags": {
                "type": "array",
                "items": {"type": "string", "pattern": "^[^\\u0000-\\u001f]{0,6}$"},
                "maxItems": 3,
            },
        },
        "required": ["sentiment", "tags"],
        "additionalProperties": False,
    }
    bad = model.format(more="").replace("ARRAY<VARCHAR(6)>", "BYTES").replace(", 'answer.tags.max-items' = '3'", "")
    (tmp_path / "bad.sql").write_text(bad)
    run = subprocess.run([cli, "answer-schema", str(tmp_path / "bad.sql")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1
    assert run.stderr.strip().count("\n") == 0, run.stderr
    assert "Column 'tags' is BYTES, which has no JSON form for the model to write: declare one of BOOLEAN" in run.stderr
