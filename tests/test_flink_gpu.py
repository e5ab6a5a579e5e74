"""The parse step in a Python worker ('parse.backend' = 'gpu'), end to end, with libcudf emulated.

The planner sends a 'gpu' table's parse step to a Python worker (libcudf's API is Python); the jar asks the
planner for the function's payload (a pickle made by Python) once it knows the columns the query reads. A
PyFlink program on the local mini-cluster runs its Python workers in its own process (PyFlink's loopback
mode), so replacing libcudf's reader by `tests.libcudf_emulator` here reaches them: everything else, the
Flink job, the payload, the gpu backend's host code, runs as on a GPU machine. Rows and error rows are those
`parse_batch` gives on the CPU.
"""

from __future__ import annotations

import pytest

from connector.decode import parse_batch
from tests.test_flink_replay import BAD, mixed_bodies, quoted, read_json_dir

pytest.importorskip("pyflink")

pytestmark = [pytest.mark.flink, pytest.mark.slow]

COLUMNS = ["id", "model", "created", "prompt_tokens", "language", "code_blocks", "content_error"]


@pytest.fixture(scope="module")
def bodies() -> list[bytes]:
    return mixed_bodies(40)


@pytest.fixture(scope="module")
def job(tmp_path_factory, bodies: list[bytes]) -> dict[str, list[dict]]:
    from connector.decode import backends
    from connector.flink import local_environment
    from tests.libcudf_emulator import EmulatedLibcudfReader

    # The gpu backend with libcudf's reader emulated: the same host code, and no pylibcudf needed (the
    # README's test command installs no gpu extra).
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backends, "_gpu", lambda: backends.GpuBackend(EmulatedLibcudfReader()))
        root = tmp_path_factory.mktemp("gpu")
        (root / "bodies").mkdir()
        (root / "bodies" / "a.jsonl").write_bytes(b"\n".join(bodies) + b"\n")
        env, t_env = local_environment()
        t_env.execute_sql(f"""
            CREATE TEMPORARY TABLE responses (
                id STRING, model STRING, created TIMESTAMP(3), usage ROW<prompt_tokens BIGINT>,
                `language` STRING, code_blocks BIGINT, content_error STRING,
                backend STRING METADATA FROM 'parse.backend' VIRTUAL,
                line BIGINT METADATA FROM 'source.line' VIRTUAL,
                reason STRING METADATA FROM 'error.reason' VIRTUAL
            ) WITH (
                'connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '{root / "bodies"}',
                'profile' = 'coder', 'parse.backend' = 'gpu', 'parse.batch-size' = '16'
            )""")
        sink = (
            "id STRING, model STRING, created STRING, prompt_tokens BIGINT, lang STRING, code_blocks BIGINT, "
            "content_error STRING, backend STRING, line BIGINT, reason STRING"
        )
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE sink ({quoted(sink)}) WITH "
            f"('connector' = 'filesystem', 'path' = '{root / 'out'}', 'format' = 'json')"
        )
        t_env.execute_sql("""
            INSERT INTO sink SELECT id, model, CAST(created AS STRING), usage.prompt_tokens, `language`, code_blocks,
                content_error, backend, line, reason
            FROM responses""").wait()
        return {"rows": read_json_dir(root / "out")}


def test_the_python_parse_step_gives_what_parse_batch_gives(job, bodies):
    expected = parse_batch(bodies, "coder", backend="cpu", columns=COLUMNS, inline_errors=True).table.to_pylist()
    got = {r["line"]: r for r in job["rows"]}
    assert sorted(got) == list(range(1, len(bodies) + 1))
    for line, want in enumerate(expected, start=1):
        row = got[line]
        assert row["backend"] == "gpu", line  # the gpu backend parsed it (libcudf emulated), not the CPU
        assert row["reason"] == want["error_reason"], line
        if want["error_reason"] is not None:
            continue
        assert (row["id"], row["model"], row["prompt_tokens"]) == (want["id"], want["model"], want["prompt_tokens"])
        assert (row["lang"], row["code_blocks"], row["content_error"]) == (
            want["language"],
            want["code_blocks"],
            want["content_error"],
        ), line
        assert row["created"].startswith(want["created"].strftime("%Y-%m-%d %H:%M:%S")), line
    assert sum(r["reason"] is not None for r in job["rows"]) == len(BAD)
