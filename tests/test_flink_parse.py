"""The parse step end to end, one suite over its routes (one test per behaviour, not one copy
per route).

Routes, each a real Flink job on the mini-cluster over the same bodies (`mixed_bodies` and one body without
'created'), each held to what `parse_batch` gives on the CPU:
- 'cpu': a replay table with 'parse.backend' = 'cpu': the parse step inside the JVM;
- 'format': 'format' = 'dspark-vllm' in the filesystem connector's table, parsed in the JVM too;
- 'gpu': a replay table with 'parse.backend' = 'gpu': the planner sends the parse step to a Python worker
  (libcudf's API is Python). A PyFlink program on the mini-cluster runs its Python workers in its own process
  (loopback mode), so replacing libcudf's reader by `tests.libcudf_emulator` here reaches them: the job, the
  payload and the gpu backend's host code run as on a GPU machine.
The two JVM routes share one job whose 'python.executable' points at nothing (had any Python operator been in
it, it could not start) and which runs with object reuse; the gpu route needs a Python worker: a second job.
The model route (ML_PREDICT) parses bodies the simulator answers, not files: tests/test_flink_request.py.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import pytest

from connector.parse import parse_batch
from tests.flink_support import BAD, good_body, mixed_bodies, quoted, read_json_dir

pytest.importorskip("pyflink")

pytestmark = [pytest.mark.flink, pytest.mark.slow]

PROFILE = "coder"
# The profile's columns each route declares, as parse_batch names them.
COLUMNS = [
    "id", "model", "created", "finish_reason", "prompt_tokens", "total_tokens", "tokens_per_second",
    "choice_contents", "language", "code_blocks", "content_error",
]  # fmt: skip
DECLARED = (
    "id STRING, model STRING, created TIMESTAMP(3), finish_reason STRING, "
    "usage ROW<prompt_tokens BIGINT, total_tokens BIGINT>, metrics ROW<tokens_per_second DOUBLE>, "
    "choice_contents ARRAY<STRING>, `language` STRING, code_blocks BIGINT, content_error STRING"
)
REPLAY_METADATA = """,
    backend STRING METADATA FROM 'parse.backend' VIRTUAL, line BIGINT METADATA FROM 'source.line' VIRTUAL,
    reason STRING METADATA FROM 'error.reason' VIRTUAL, field STRING METADATA FROM 'error.field' VIRTUAL"""
SINK = (
    "id STRING, model STRING, created STRING, finish_reason STRING, prompt_tokens BIGINT, total_tokens BIGINT, "
    "tokens_per_second DOUBLE, choice_contents ARRAY<STRING>, lang STRING, code_blocks BIGINT, "
    "content_error STRING, backend STRING, line BIGINT, reason STRING, field STRING"
)
PROFILE_SELECT = (
    "id, model, CAST(created AS STRING), finish_reason, usage.prompt_tokens, usage.total_tokens, "
    "metrics.tokens_per_second, choice_contents, `language`, code_blocks, content_error"
)
ROUTES = ["cpu", "format", "gpu"]


@pytest.fixture(scope="module")
def bodies() -> list[bytes]:
    out = mixed_bodies(60)
    out.append(b'{"id": "no-time", "object": "chat.completion", "model": "m", "choices": []}')
    return out


@pytest.fixture(scope="module")
def root(tmp_path_factory, bodies: list[bytes]):
    root = tmp_path_factory.mktemp("parse")
    (root / "bodies").mkdir()
    (root / "bodies" / "a.jsonl").write_bytes(b"\n".join(bodies) + b"\n")
    return root


def _sink_ddl(name: str, columns: str, path, *, quote: bool = True) -> str:
    return (
        f"CREATE TEMPORARY TABLE {name} ({quoted(columns) if quote else columns}) WITH "
        f"('connector' = 'filesystem', 'path' = '{path}', 'format' = 'json')"
    )


def _sink(t_env, name: str, columns: str, path, *, quote: bool = True) -> None:
    t_env.execute_sql(_sink_ddl(name, columns, path, quote=quote))


def _replay_ddl(name: str, root, backend: str, batch_size: int) -> str:
    return f"""
        CREATE TEMPORARY TABLE {name} ({DECLARED}{REPLAY_METADATA}) WITH (
            'connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '{root / "bodies"}',
            'profile' = '{PROFILE}', 'parse.backend' = '{backend}', 'parse.batch-size' = '{batch_size}'
        )"""


def _replay(t_env, name: str, root, backend: str, batch_size: int) -> None:
    t_env.execute_sql(_replay_ddl(name, root, backend, batch_size))


def _format(t_env, name: str, root, on_error: str) -> None:
    errors = ", error_reason STRING, error_field STRING" if on_error == "column" else ""
    t_env.execute_sql(f"""
        CREATE TEMPORARY TABLE {name} ({DECLARED}{errors}) WITH (
            'connector' = 'filesystem', 'path' = '{root / "bodies"}', 'format' = 'dspark-vllm',
            'dspark-vllm.profile' = '{PROFILE}', 'dspark-vllm.on-error' = '{on_error}'
        )""")


@pytest.fixture(scope="module")
def jvm_job(root) -> dict[str, list[dict]]:
    """The 'cpu' and 'format' routes, and what only the JVM's parse step does, in one job without Python."""
    from connector.flink import local_environment

    env, t_env = local_environment()
    t_env.get_config().set("python.executable", str(root / "there-is-no-python-here"))
    # With object reuse Flink hands each operator the same row object again and again: the parse step, which
    # holds a batch of rows, must copy them (it did not: 4 distinct ids in 200 rows). test_flink_replay runs
    # without it.
    t_env.get_config().set("pipeline.object-reuse", "true")
    out = root / "jvm"
    _replay(t_env, "cpu_table", root, "cpu", 13)
    _format(t_env, "format_table", root, "column")
    _format(t_env, "format_skipping", root, "skip")
    _sink(t_env, "sink_cpu", SINK, out / "cpu")
    _sink(t_env, "sink_format", SINK, out / "format")
    _sink(t_env, "sink_skipping", "id STRING, total_tokens BIGINT", out / "skipping")
    # Declared types other than the profile's: the parse step casts them itself (Casts.java), held to Flink's own
    # CAST of the same flat columns in SQL (in a session time zone 5:30 from UTC: TIMESTAMP_LTZ does not move).
    t_env.get_config().set("table.local-time-zone", "Asia/Kolkata")
    (root / "casts").mkdir()
    (root / "casts" / "a.jsonl").write_bytes(b"\n".join(cast_corpus()) + b"\n")
    flat = dict(every_flat_column("coder"))
    for name, casts in CASTS.items():
        declared = ", ".join(f"`{column}` {sql}" for column, sql, *_ in casts)
        t_env.execute_sql(f"""
            CREATE TEMPORARY TABLE {name} ({declared}, line BIGINT METADATA FROM 'source.line' VIRTUAL)
            WITH ('connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '{root / "casts"}',
                  'profile' = 'coder', 'parse.backend' = 'cpu')""")
        t_env.execute_sql(f"""
            CREATE TEMPORARY TABLE {name}_flat (
                {", ".join(f"`{column}` {flat[column]}" for column, *_ in casts)},
                line BIGINT METADATA FROM 'source.line' VIRTUAL
            ) WITH ('connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '{root / "casts"}',
                    'profile' = 'coder', 'parse.backend' = 'cpu')""")
        # The format makes the same casts (the same RowShape), one body at a time.
        t_env.execute_sql(f"""
            CREATE TEMPORARY TABLE {name}_format ({declared}) WITH (
                'connector' = 'filesystem', 'path' = '{root / "casts"}', 'format' = 'dspark-vllm',
                'dspark-vllm.profile' = 'coder', 'dspark-vllm.on-error' = 'skip')""")
        _sink(t_env, f"sink_{name}_format", declared, out / f"{name}_format", quote=False)
        _sink(t_env, f"sink_{name}", declared + ", line BIGINT", out / name, quote=False)
        _sink(t_env, f"sink_{name}_flat", declared + ", line BIGINT", out / f"{name}_flat", quote=False)
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
    _sink(t_env, "sink_every", ", ".join(f"{n} {t}" for n, t in every) + ", line BIGINT, reason STRING", out / "every")
    statements = t_env.create_statement_set()
    statements.add_insert_sql(
        f"INSERT INTO sink_cpu SELECT {PROFILE_SELECT}, backend, line, reason, field FROM cpu_table"
    )
    statements.add_insert_sql(
        f"INSERT INTO sink_format SELECT {PROFILE_SELECT}, CAST(NULL AS STRING), CAST(NULL AS BIGINT), "
        "error_reason, error_field FROM format_table"
    )
    statements.add_insert_sql("INSERT INTO sink_skipping SELECT id, usage.total_tokens FROM format_skipping")
    for name, casts in CASTS.items():
        statements.add_insert_sql(f"INSERT INTO sink_{name} SELECT * FROM {name}")
        statements.add_insert_sql(f"INSERT INTO sink_{name}_format SELECT * FROM {name}_format")
        sql = ", ".join(ref[0] if ref else f"CAST(`{column}` AS {sql})" for column, sql, *ref in casts)
        statements.add_insert_sql(f"INSERT INTO sink_{name}_flat SELECT {sql}, line FROM {name}_flat")
    statements.add_insert_sql("INSERT INTO sink_every SELECT * FROM every_column")
    statements.execute().wait()
    casts = [n for name in CASTS for n in (name, f"{name}_flat", f"{name}_format")]
    return {name: read_json_dir(out / name) for name in ("cpu", "format", "skipping", "every", *casts)}


# Tables of the same bodies whose columns are declared as other types than the profile's (each a cast Flink's CAST
# makes of the flat column, and which cannot fail: connector.plan.layout._TABLE_CASTS); a column once per table.
CASTS = {
    "casts_a": [
        ("id", "VARCHAR(3)"),
        ("object", "CHAR(20)"),
        # `created` (epoch seconds) as TIMESTAMP_LTZ is that instant in any session zone (Flink's CAST reads the
        # UTC time as the session's: 5:30 off here).
        (
            "created",
            "TIMESTAMP_LTZ(3)",
            "TO_TIMESTAMP_LTZ(TIMESTAMPDIFF(SECOND, TIMESTAMP '1970-01-01 00:00:00', `created`), 0)",
        ),
        ("prompt_tokens", "TINYINT"),
        ("completion_tokens", "DECIMAL(5, 1)"),
        ("total_tokens", "STRING"),
        ("tokens_per_second", "DECIMAL(10, 2)"),
        ("generation_time_ms", "BIGINT"),
        ("mean_itl_ms", "CHAR(8)"),
        ("choice_contents", "STRING"),
        ("n_choices", "SMALLINT"),
        ("time_to_first_token_ms", "INT"),
        ("code_blocks", "FLOAT"),
    ],
    "casts_b": [
        # Before 1970, Flink's CAST to DATE gives the day after and to TIME a negative time that fails the job:
        # Casts.java gives the calendar's, held to the date and time Flink writes as text.
        ("id", "CHAR(3)"),
        ("created", "DATE", "CAST(DATE_FORMAT(`created`, 'yyyy-MM-dd') AS DATE)"),
        ("prompt_tokens", "DOUBLE"),
        ("total_tokens", "FLOAT"),
        ("tokens_per_second", "STRING"),
        ("choice_contents", "ARRAY<VARCHAR(2)>"),
        ("completion_tokens", "INT"),
        ("time_to_first_token_ms", "TINYINT"),
        ("generation_time_ms", "DECIMAL(38, 18)"),
        ("choice_finish_reasons", "VARCHAR(9)"),
        ("code_blocks", "DECIMAL(2, 1)"),
    ],
    "casts_c": [
        ("created", "TIME(0)", "CAST(DATE_FORMAT(`created`, 'HH:mm:ss') AS TIME(0))"),
        ("tokens_per_second", "SMALLINT"),
        ("prompt_tokens", "CHAR(3)"),
    ],
    "casts_d": [("created", "TIMESTAMP(0)"), ("completion_tokens", "VARCHAR(2)")],
    "casts_e": [("created", "STRING"), ("choice_contents", "CHAR(30)")],
}


GPU_CASTS = ("casts_a", "casts_b")


def cast_corpus() -> list[bytes]:
    """Coder bodies and what the casts are hardest on: numbers out of a TINYINT's range or a DECIMAL's, times
    before 1970, text beyond the BMP, NULLs in arrays; then mutated bodies."""
    import json

    from tests.flink_support import T0

    out = []
    edges = [
        (300, 1e300, -5.25, "ñandú😀x", T0 + 7, ["a😀b", None, ""]),
        (-129, 123456.789, 1e-7, "日本語のid", -86401, [None]),
        (9007199254740993, -0.0, 99.995, "x", 1.0, []),
        (127, 5e-324, 1.5e10, "", 0, ["0123456789" * 5]),
    ]
    for i, (tokens, tps, ttft, text, created, contents) in enumerate(edges):
        body = good_body(i)
        body.update(id=text, created=created)
        body["usage"] = {"prompt_tokens": tokens, "completion_tokens": -tokens, "total_tokens": tokens * 3}
        body["metrics"] = {"tokens_per_second": tps, "time_to_first_token_ms": ttft, "generation_time_ms": ttft}
        body["choices"] = [
            {"index": k, "message": {"role": "assistant", "content": c}, "finish_reason": "stop"}
            for k, c in enumerate(contents)
        ]
        out.append(json.dumps(body, ensure_ascii=False).encode())
    return out + mutated_corpus()[:300]


@pytest.fixture(scope="module")
def gpu_job(root) -> dict[str, list[dict]]:
    """The 'gpu' route: the gpu backend with libcudf's reader emulated (the same host code, no pylibcudf: the
    README's test command installs no gpu extra); and 'auto' in a job whose configuration declares GPU
    TaskManagers (Flink's external resource gpu), planned on this machine without a GPU."""
    from connector.flink import local_environment
    from connector.parse import backends
    from tests.libcudf_emulator import EmulatedLibcudfReader

    # 'auto' runs in this process (the local job's loopback worker) and caches what it decides: decided afresh
    # under the emulated GPU, and forgotten after it, so no later 'auto' here takes the emulated GPU.
    backends._auto.cache_clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backends, "_gpu", lambda: backends.GpuBackend(EmulatedLibcudfReader()))
        patch.setattr(backends, "_auto", functools.cache(backends._auto.__wrapped__))
        env, t_env = local_environment()
        t_env.get_config().set("external-resources", "gpu")
        t_env.get_config().set("external-resource.gpu.amount", "1")
        statements = t_env.create_statement_set()
        for backend in ("gpu", "auto"):
            _replay(t_env, f"{backend}_table", root, backend, 16)
            _sink(t_env, f"sink_{backend}", SINK, root / backend)
            statements.add_insert_sql(
                f"INSERT INTO sink_{backend} SELECT {PROFILE_SELECT}, backend, line, reason, field FROM {backend}_table"
            )
        # The casts of the Python parse step's flat columns (the same RowShape and Casts over its row).
        (root / "casts-gpu").mkdir()
        (root / "casts-gpu" / "a.jsonl").write_bytes(b"\n".join(cast_corpus()) + b"\n")
        for name in GPU_CASTS:
            declared = ", ".join(f"`{column}` {sql}" for column, sql, *_ in CASTS[name])
            t_env.execute_sql(f"""
                CREATE TEMPORARY TABLE {name}_gpu ({declared}, line BIGINT METADATA FROM 'source.line' VIRTUAL)
                WITH ('connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '{root / "casts-gpu"}',
                      'profile' = 'coder', 'parse.backend' = 'gpu')""")
            _sink(t_env, f"sink_{name}_gpu", declared + ", line BIGINT", root / f"{name}_gpu", quote=False)
            statements.add_insert_sql(f"INSERT INTO sink_{name}_gpu SELECT * FROM {name}_gpu")
        statements.execute().wait()
        return {
            "gpu": read_json_dir(root / "gpu"),
            "auto": read_json_dir(root / "auto"),
            **{n: read_json_dir(root / f"{n}_gpu") for n in GPU_CASTS},
        }


@pytest.fixture(scope="module")
def gpu_sql_job(root) -> list[dict]:
    """The 'gpu' route in a job with no Python program (`dspark-vllm sql`'s SQL runner, a plain JVM): the parse
    step's Python workers are processes of their own, which `tests/worker_site` (on their PYTHONPATH) gives the
    emulated libcudf; their parse step imports a module the job ships with 'python.files' (the job fails where it
    did not reach them)."""
    import os
    import subprocess
    import sys

    from connector.flink.sql_cli import java_command

    shipped = root / "shipped"
    shipped.mkdir()
    (shipped / "dspark_shipped_probe.py").write_text("SHIPPED = True\n")
    script = root / "gpu.sql"
    script.write_text(";\n".join([
        _replay_ddl("gpu_table", root, "gpu", 16),
        _sink_ddl("sink_gpu", SINK, root / "gpu-sql"),
        f"INSERT INTO sink_gpu SELECT {PROFILE_SELECT}, backend, line, reason, field FROM gpu_table",
    ]) + ";\n")  # fmt: skip
    tests = Path(__file__).resolve().parent
    # Not what PyFlink's loopback workers put into this process's environment when the other jobs ran here (its
    # PYTHON_LOOPBACK_SERVER_ADDRESS would send the runner's Python work to this process).
    leaked = {"PYTHON_LOOPBACK_SERVER_ADDRESS", "PYTHONPATH", "_PYTHON_WORKING_DIR"}
    env = {
        **{k: v for k, v in os.environ.items() if k not in leaked},
        "PYTHONPATH": os.pathsep.join([str(tests / "worker_site"), str(tests.parent)]),
        "DSPARK_TEST_EMULATE_LIBCUDF": "1",
        "DSPARK_TEST_WORKER_IMPORTS": "dspark_shipped_probe",
    }
    command = java_command(str(script), [f"python.files={shipped}"], str(root / "gpu-sql.log"))
    assert f"python.executable={sys.executable}" in command  # its workers are this Python
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{run.stdout[-2000:]}{run.stderr[-3000:]}"
    return read_json_dir(root / "gpu-sql")


@pytest.fixture(params=ROUTES)
def route(request) -> tuple[str, list[dict]]:
    """(route, the rows its job wrote): only the jobs of the routes selected run."""
    job = request.getfixturevalue("gpu_job" if request.param == "gpu" else "jvm_job")
    return request.param, job[request.param]


def test_the_gpu_route_through_the_sql_runner_gives_the_pyflink_programs_rows(gpu_job, gpu_sql_job):
    """The gpu parse step set up by the jar alone (the job's Python options and files, as Flink's planner sets them
    up) gives in Python workers of their own what it gives in a PyFlink program's."""
    assert len(gpu_sql_job) == len(gpu_job["gpu"])
    assert sorted(gpu_sql_job, key=repr) == sorted(gpu_job["gpu"], key=repr)


def test_auto_where_the_jobs_configuration_declares_gpu_task_managers_parses_on_their_gpu(gpu_job):
    """'auto' follows the job's configuration, not the machine that plans it (this one, without a GPU): with GPU
    TaskManagers declared, the parse step runs in Python and takes the GPU its worker has (libcudf emulated)."""
    assert gpu_job["auto"] and {r["backend"] for r in gpu_job["auto"]} == {"gpu"}
    assert sorted(gpu_job["auto"], key=repr) == sorted(gpu_job["gpu"], key=repr)


def test_the_gpu_route_without_flinks_python_jar_says_so_in_one_line(root):
    """A JVM without flink-python (a Flink distribution keeps it in opt/): the gpu route's planning says what to
    do in one line (Flink's planner said "The dependency of 'flink-python' is not present on the classpath")."""
    import subprocess

    from connector.flink.sql_cli import java_command

    script = root / "no-python-jar.sql"
    script.write_text(";\n".join([
        _replay_ddl("gpu_table", root, "gpu", 16),
        "CREATE TEMPORARY TABLE sink (id STRING) WITH ('connector' = 'blackhole')",
        "INSERT INTO sink SELECT id FROM gpu_table",
    ]) + ";\n")  # fmt: skip
    command = java_command(str(script), [], str(root / "no-python-jar.log"))
    classpath = command.index("-cp") + 1
    jars = command[classpath].split(":")
    assert any("flink-python" in jar for jar in jars)
    command[classpath] = ":".join(jar for jar in jars if "flink-python" not in jar)
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("SqlRunner: statement 3 (INSERT INTO sink SELECT id FROM gpu_table) failed: "), last
    assert "the parse step runs in a Python worker ('parse.backend' = 'gpu'" in last, last
    assert "needs Flink's flink-python jar on the classpath" in last and "Exception" not in last.split(": ", 1)[1]


def every_flat_column(profile: str) -> list[tuple[str, str]]:
    """Every column of `profile` (but `line`) with its Flink type, as a user declares them all."""
    from connector.profiles import load_profile
    from connector.types.columns import output_schema
    from connector.types.flink_types import arrow_to_flink_sql

    return [(f.name, arrow_to_flink_sql(f.type)) for f in output_schema(load_profile(profile)) if f.name != "line"]


def mutated_corpus() -> list[bytes]:
    """Coder bodies, a third of them mutated, then JSONTestSuite's files (where it is here) as contents, as
    whole bodies and in a field that is read: one body per line, so bodies with a line break are left out."""
    import random

    from connector.simulator.responses import make_corpus
    from tests.decode_support import FILES, as_content, in_read_field, mutate

    rng = random.Random("issue-18 every column")
    out = [mutate(body, rng) if rng.random() < 0.33 else body for body in make_corpus(400, "coder", seed=18)]
    for path in FILES:
        data = path.read_bytes()
        out += [as_content(data), data, in_read_field(data)]
    return [b for b in out if b"\n" not in b and b"\r" not in b and b.strip()]


def _comparable(row: dict) -> tuple:
    """A sink row as parse_batch's names, 'created' to the second (the table's TIMESTAMP(3) as text)."""
    return (
        row["reason"], row["field"], row["id"], row["model"], row["finish_reason"], row["prompt_tokens"],
        row["total_tokens"], row["tokens_per_second"], row["choice_contents"], row["lang"], row["code_blocks"],
        row["content_error"],
    )  # fmt: skip


def test_every_body_is_the_row_or_error_row_python_gives(route, bodies):
    name, rows = route
    expected = parse_batch(bodies, PROFILE, backend="cpu", columns=COLUMNS, inline_errors=True).table.to_pylist()
    assert len(rows) == len(bodies)
    want = [
        _comparable({**e, "reason": e["error_reason"], "field": e["error_field"], "lang": e["language"]})
        for e in expected
    ]
    if name == "format":  # the format has no 'source.line': the rows as a multiset
        assert sorted(map(_comparable, rows), key=repr) == sorted(want, key=repr)
    else:
        got = {r["line"]: r for r in rows}
        assert sorted(got) == list(range(1, len(bodies) + 1))
        for line, (w, e) in enumerate(zip(want, expected, strict=True), start=1):
            row = got[line]
            assert row["backend"] == name, line  # this route parsed it (for 'gpu', libcudf emulated)
            assert _comparable(row) == w, line
            if e["created"] is not None:
                assert row["created"].startswith(e["created"].strftime("%Y-%m-%d %H:%M:%S")), line
    assert sum(r["reason"] is not None for r in rows) == len(BAD)
    assert {r["lang"] for r in rows} == {"python", None}  # the content's JSON was read


def test_a_row_without_created_gets_the_newest_time_before_it(route):
    name, rows = route
    row = next(r for r in rows if r["id"] == "no-time")
    if name == "format":
        # Deliberate: the format reads one body at a time (NativeDeserializationSchema, in another connector's
        # source, which may read files or partitions in any order) and keeps no time between bodies.
        assert row["created"] is None
        return
    newest = max(r["created"] for r in rows if r["id"] not in (None, "no-time") and r["line"] < row["line"])
    assert row["created"] == newest
    assert newest.startswith("2023-")


def test_skip_gives_the_good_bodies_only(jvm_job):
    """'dspark-vllm.on-error' = 'skip' (the format's choice; a replay table always gives error rows)."""
    good = {json_id for json_id in (good_body(i)["id"] for i in range(60))} | {"no-time"}
    assert sorted(r["id"] for r in jvm_job["skipping"]) == sorted(good)


@pytest.mark.parametrize("table", sorted(CASTS))
def test_a_column_declared_as_another_type_is_what_flinks_cast_gives(jvm_job, table):
    """The parse step writes a column declared as another type than the profile's itself (Casts.java, no SQL
    after it): each row as Flink's CAST of the same flat column makes it."""
    got = {r["line"]: r for r in jvm_job[table]}
    want = {r["line"]: r for r in jvm_job[f"{table}_flat"]}
    assert sorted(got) == sorted(want) == list(range(1, len(cast_corpus()) + 1))
    for line, row in want.items():
        assert got[line] == row, line
    # The format: the same rows for the bodies it reads (it skips the rejected ones here).
    parsed = sorted(json.dumps({k: v for k, v in r.items() if k != "line"}) for r in want.values())
    by_format = sorted(json.dumps(r) for r in jvm_job[f"{table}_format"])
    assert set(by_format) <= set(parsed) and len(by_format) > len(parsed) // 2


@pytest.mark.parametrize("table", GPU_CASTS)
def test_the_gpu_route_makes_the_same_casts(jvm_job, gpu_job, table):
    """The gpu route's declared row is made of its Python parse step's flat row by the same RowShape and Casts."""
    got = {r["line"]: r for r in gpu_job[table]}
    want = {r["line"]: r for r in jvm_job[f"{table}_flat"]}
    assert sorted(got) == sorted(want)
    for line, row in want.items():
        assert got[line] == row, line


def test_every_column_of_a_profile_over_mutated_bodies_is_what_parse_batch_gives(jvm_job):
    """The declared rows the parse step writes in the JVM (RowShape), every column type of a profile: strings,
    BIGINT, DOUBLE, TIMESTAMP(3), arrays, content properties and content_error, over mutated bodies and
    JSONTestSuite's files."""
    bodies = mutated_corpus()
    names = [n for n, _ in every_flat_column("coder")]
    expected = parse_batch(bodies, "coder", backend="cpu", inline_errors=True).table.to_pylist()
    got = {r["line"]: r for r in jvm_job["every"]}
    assert sorted(got) == list(range(1, len(bodies) + 1))
    assert sum(r["reason"] is not None for r in jvm_job["every"]) > 50  # the mutations made error rows
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
