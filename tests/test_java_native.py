"""The native core inside the JVM (io.dspark.vllm.parse.NativeParser through JNI) gives what the Python backends
give: every column of every body, and the same reason and field for every body that is no row. One JVM runs
every case (java/src/test/java/.../NativeCheck.java prints what it read); the Python side is `parse_batch` on
the cpu backend, which the suites over backends hold to the exact path."""

from __future__ import annotations

import base64
import json
import random
from datetime import UTC, datetime
from typing import Any

import pytest

from connector.parse import parse_batch
from connector.plan.parse import native_read
from connector.plan.records import to_json
from connector.profiles import load_profile
from connector.simulator.responses import make_corpus
from connector.types.columns import body_columns
from tests.bodies import chat, choice, encode
from tests.decode_support import FILES, PROFILES, in_read_field, mutate
from tests.java import NEEDS_JDK, build_jar

pytestmark = [pytest.mark.slow, NEEDS_JDK]

BATCH = 97  # bodies per JNI call: several calls per case, a partial last one


_SMALL_LIMIT_CASE = "openai, a body over the plan's max_body_bytes"
_SMALL_LIMIT = 4096


def _cases() -> dict[str, tuple[str, list[str], list[bytes]]]:
    rng = random.Random("issue-18 jvm")
    openai = make_corpus(300, "openai", seed=18, json_share=0.6)
    coder = make_corpus(200, "coder", seed=19, json_share=0.8)
    every = [c.name for c in body_columns(load_profile("openai"))]
    cases = {
        "openai, every column, mutated": (
            "openai",
            every,
            [mutate(b, rng) if rng.random() < 0.7 else b for b in openai],
        ),
        "coder, three columns": ("coder", ["model", "created", "completion_tokens"], coder),
        "openai, no column": ("openai", [], openai[:50] + [b"nope", b""]),
        "coder, content properties (JSON and free text), mutated": (
            "coder",
            ["id", "language", "code", "explanation", "code_blocks", "content_error"],
            [mutate(b, rng) if rng.random() < 0.3 else b for b in make_corpus(300, "coder", seed=20, json_share=0.5)],
        ),
        "vl, array and json properties": (
            "vl",
            ["caption", "labels", "boxes", "objects", "content_error", "content"],
            make_corpus(200, "vl", seed=21, json_share=0.5),
        ),
    }
    # Content properties named like the columns the core adds (verdict, reason, field): read as any other.
    # Before: the JVM took the core's columns by name, so "reason" held the error's reason (null for a row) and
    # "verdict" the core's int8 verdicts (found by native/fuzz/fuzz_plan.cpp).
    named = ["verdict", "reason", "field", "content_verdict"]
    good = json.dumps({n: f"{n}!" for n in named})
    cases["content properties named like the core's columns"] = (
        str(PROFILES / "core_names.yaml"),
        [*named, "content_error"],
        [encode(chat(choices=[choice(c)])) for c in (good, '{"verdict": 1}', "free text", "```json\n" + good + "```")]
        + [b"not json", b'{"error": {"message": "x"}}'],
    )
    # The plan's size limit holds in the JVM too (here a small one: the 256 MiB of a real plan are tested in
    # tests/test_native.py): the body over it is an error row with the core's reason, the others rows.
    cases[_SMALL_LIMIT_CASE] = ("openai", ["id", "model"], openai[:20] + [b'{"id": "' + b"x" * 5000 + b'"}'])
    if FILES:
        suite = [p.read_bytes() for p in FILES]
        cases["JSONTestSuite, whole"] = ("openai", every, suite)
        cases["JSONTestSuite, in a read field"] = ("openai", ["id", "model"], [in_read_field(d) for d in suite])
    return cases


CASES = _cases()


def _python(profile: str, columns: list[str], bodies: list[bytes]) -> list[dict[str, Any]]:
    table = parse_batch(bodies, profile, backend="cpu", columns=columns, inline_errors=True).table
    out = []
    for row in table.to_pylist():
        values = {c: row[c] for c in columns}
        for name, value in values.items():
            if isinstance(value, datetime):
                values[name] = int((value - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() * 1000)
        values["error_reason"], values["error_field"] = row["error_reason"], row["error_field"]
        out.append(values)
    return out


@pytest.fixture(scope="module")
def jvm(tmp_path_factory) -> dict[str, list[dict[str, Any]]]:
    folder = tmp_path_factory.mktemp("jvm")
    args = [str(BATCH)]
    for i, (name, (profile, columns, bodies)) in enumerate(CASES.items()):
        loaded = load_profile(profile)
        plan = folder / f"plan-{i}.json"
        limit = {"max_body_bytes": _SMALL_LIMIT} if name == _SMALL_LIMIT_CASE else {}
        plan.write_text(json.dumps(to_json(native_read(loaded, columns, **limit))))
        lines = folder / f"bodies-{i}.txt"
        lines.write_text("".join(base64.b64encode(b).decode() + "\n" for b in bodies))
        args += [str(plan), ",".join(columns), str(lines)]
    result = build_jar().java_tests(*args, main="io.dspark.vllm.parse.NativeCheck")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "unavailable" not in result.stdout[:200], result.stdout[:400]
    parts = result.stdout.split("---\n")[:-1]
    assert len(parts) == len(CASES)
    return {name: [json.loads(line) for line in part.splitlines()] for name, part in zip(CASES, parts, strict=True)}


@pytest.mark.parametrize("case", list(CASES))
def test_the_jvm_reads_what_python_reads(jvm, case: str):
    profile, columns, bodies = CASES[case]
    expected = _python(profile, columns, bodies)
    if case == _SMALL_LIMIT_CASE:
        too_large = [i for i, b in enumerate(bodies) if len(b) > _SMALL_LIMIT]
        assert too_large == [len(bodies) - 1]
        expected[-1] = {
            **dict.fromkeys(columns),
            "error_reason": f"body too large: over {_SMALL_LIMIT} bytes",
            "error_field": None,
        }
    got = jvm[case]
    assert len(got) == len(bodies)
    wrong = [(i, g, e) for i, (g, e) in enumerate(zip(got, expected, strict=True)) if g != e]
    assert not wrong, f"{len(wrong)} of {len(bodies)} differ; first: {wrong[0]}"
    assert any(e["error_reason"] is None for e in expected) or case == "JSONTestSuite, whole"


def test_the_cases_hold_rows_and_error_rows():
    """A test that cannot fail is a defect: the corpora must have both kinds."""
    profile, columns, bodies = CASES["openai, every column, mutated"]
    reasons = [e["error_reason"] for e in _python(profile, columns, bodies)]
    assert any(r is None for r in reasons) and any(r is not None for r in reasons)


def test_the_jar_loads_its_core_and_leaves_no_copy_behind(tmp_path):
    """A TaskManager copies the core and the shim out of the jar, loads them, and deletes the copies at once
    (what is loaded stays mapped): 43 empty folders had piled up in /tmp on this machine in one session,
    the files deleted at exit but not their folder, and a killed JVM would have left the files too."""
    import subprocess

    from connector.flink.env import connector_jar

    done = subprocess.run(
        [
            build_jar().java(),
            f"-Djava.io.tmpdir={tmp_path}",
            "-cp",
            str(connector_jar()),
            "io.dspark.vllm.parse.NativeCore",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("dspark-vllm: the native parser core loads here (libdspark-"), done.stdout
    assert list(tmp_path.iterdir()) == []


# --- from a hostile test of the parse step in the JVM


def test_the_core_loads_in_every_classloader_with_a_native_dir():
    """With `dspark.native.dir` (docs/flink.md), the second job on a TaskManager (its own classloader) failed:
    "Native Library .../libdspark-jni.so already loaded in another classloader"."""
    result = build_jar().java_tests("3", main="io.dspark.vllm.parse.LoaderCheck")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [f"loader {i}: null" for i in range(3)], result.stdout


def test_a_body_the_core_cannot_read_costs_only_its_own_row(tmp_path):
    """A call the core cannot finish (here a column over the plan's max_column_bytes, in production a
    std::bad_alloc of the slow path or columns over what one Java array holds) threw out of NativeParser.parse
    for the whole batch: the parse step made every body of the batch an "internal error" row and the format
    failed the job. Now the batch is read in halves down to the one body, which alone is an error row."""
    profile = load_profile("openai")
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            to_json(native_read(profile, ["id", "n_choices", "choice_contents", "created"], max_column_bytes=1000))
        )
    )
    bodies = [b'{"id":"a"}', b'{"id":"' + b"x" * 5000 + b'"}', b'{"id":"b"}', b'{"id":"c"}']
    lines = tmp_path / "bodies.txt"
    lines.write_text("".join(base64.b64encode(b).decode() + "\n" for b in bodies))
    result = build_jar().java_tests(
        "4", str(plan), "id,n_choices,choice_contents,created", str(lines), main="io.dspark.vllm.parse.NativeCheck"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in result.stdout.split("---\n")[0].splitlines()]
    assert [r["id"] for r in rows] == ["a", None, "b", "c"]
    assert [r["error_reason"] is None for r in rows] == [True, False, True, True]
    assert rows[1]["error_reason"].startswith("internal error (the native core could not read this body: ")
    assert rows[1]["choice_contents"] is None and rows[1]["n_choices"] is None


def test_the_format_says_of_a_null_message_what_parse_batch_says(tmp_path):
    """A record without a value (a Kafka tombstone) reached the format's deserializer as null and was read as
    an empty body ("empty body"); parse_batch (and the table's parse step, for a NULL body) says it is not a
    body."""

    profile = load_profile("openai")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(to_json(native_read(profile, ["id"]))))
    expected = parse_batch([None, b""], "openai", columns=["id"], inline_errors=True).table.column("error_reason")
    result = build_jar().java_tests(str(plan), "column", main="io.dspark.vllm.engine.FormatNullCheck")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == expected.to_pylist()
