"""The native parser core through its C ABI (connector/decode/native.py), and parse_batch's options that it
serves: `columns` (only those built) and `inline_errors` (rows and error rows in one table, input order)."""

from __future__ import annotations

import json
import mmap
import resource

import numpy as np
import pyarrow as pa
import pytest

from connector.decode import native, parse_batch
from connector.decode.backends import NativeBackend, select_backend
from connector.decode.batch import INLINE_ERROR_FIELDS, plan_for
from connector.profiles import load_profile
from connector.schema.columns import output_schema
from tests.bodies import chat, choice, encode
from tests.test_decode import assert_matches_reference


def _read(plan: native.NativePlan, bodies: list[bytes]) -> pa.StructArray:
    offsets = np.zeros(len(bodies) + 1, np.int64)
    np.cumsum([len(b) for b in bodies], out=offsets[1:])
    return native.read(plan, b"".join(bodies), offsets)


def test_the_core_is_the_cpu_backend():
    backend, reason = select_backend("cpu")
    assert isinstance(backend, NativeBackend) and backend.name == "cpu" and reason is None
    assert native.library_path().is_file()


def test_a_struct_of_the_plan_columns_and_a_verdict_per_body():
    plan = plan_for(load_profile("openai"), ["model", "n_choices", "choice_contents"]).native
    out = _read(plan, [encode(chat(choices=[choice("a"), choice(None, index=1)])), b"[1]", b"{", b""])
    assert [f.name for f in out.type] == ["model", "n_choices", "choice_contents", "verdict"]
    assert out.field("verdict").to_pylist() == [0, 2, 1, 1]
    assert out.field("choice_contents").to_pylist() == [["a", None], None, None, None]
    out.validate(full=True)


@pytest.mark.parametrize(
    "body,verdict",
    [
        (b'\xef\xbb\xbf{"model":"m"}', 4),
        (b"[" * 64 + b"]" * 64, 2),
        (b'{"a":' + b"[" * 64 + b"]" * 64 + b"}", 3),
        (b'{"model":5}', 5),
        (b'{"error":{"message":"x"}}', 6),
        (b'{"object":"error"}', 6),
        (b'{"created":99999999999999}', 7),
        (b'{"model":"a","model":"b"}', 8),
        (b'{"created":1.0}', 10),
        (b'{"model":"m"} x', 1),
        (b'{"model":"\\ud800"}', 1),
        (b'{"x":1e400}', 1),
    ],
)
def test_verdicts(body: bytes, verdict: int):
    plan = plan_for(load_profile("openai"), ["model", "created"]).native
    assert _read(plan, [body]).field("verdict").to_pylist() == [verdict]


def test_a_2_gib_body_is_refused_by_size_before_it_is_read():
    """The core says DSPARK_TOO_LARGE from the offsets alone: the pages of the body are never touched."""
    size = 2 << 30
    with mmap.mmap(-1, size + 1, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as region:
        buffer = pa.foreign_buffer(np.frombuffer(region, np.uint8).ctypes.data, size + 1, region)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        plan = plan_for(load_profile("openai"), ["model"]).native
        out = native.read(plan, buffer, np.array([0, size, size + 1], np.int64))
        grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert out.field("verdict").to_pylist() == [9, 1]  # too large; one NUL byte is not JSON
        del buffer, out
    assert grown_kib < 64 * 1024  # not the 2 GiB that reading it would map in


def test_a_plan_of_another_version_is_refused():
    plan = native.NativePlan(json.dumps({"version": 99, "created_unit": "seconds", "columns": []}).encode(), None)
    with pytest.raises(RuntimeError, match="the plan's version is not 1"):
        _read(plan, [b"{}"])


def test_offsets_outside_the_data_are_refused():
    plan = plan_for(load_profile("openai"), ["model"]).native
    with pytest.raises(RuntimeError, match="offsets must increase and stay within the data"):
        native.read(plan, b"{}", np.array([0, 3], np.int64))


def test_bodies_with_less_than_the_padding_after_them_are_read_from_a_copy():
    """The last bodies of a buffer have fewer than simdjson's 64 bytes of padding after them."""
    plan = plan_for(load_profile("openai"), ["id"]).native
    bodies = [encode(chat(id="x" * k)) for k in range(70)]
    assert _read(plan, bodies).field("id").to_pylist() == ["x" * k for k in range(70)]


# -- columns=[...] --------------------------------------------------------------------------------------------


def test_only_the_columns_asked_for_are_built():
    bodies = [encode(chat(choices=[choice('{"language": "py", "code": "x"}')])), b"{", encode(chat(model=5))]
    result = parse_batch(bodies, "coder", "cpu", columns=["language", "model", "created"])
    assert result.table.column_names == ["line", "language", "model", "created"]
    assert result.table.schema == pa.schema(
        [output_schema(load_profile("coder")).field(n) for n in result.table.column_names]
    )
    assert result.table.column("language").to_pylist() == ["py"]
    # A body is held to the types of the columns read: `model` is read, so `"model": 5` is an error row.
    assert result.errors.column("reason").to_pylist()[1] == "wrong type: expected string, got integer"


def test_a_wrong_type_in_a_column_not_read_does_not_reject():
    body = encode(chat(model=5))
    result = parse_batch([body], "openai", "cpu", columns=["id"])
    assert result.table.column("id").to_pylist() == ["chatcmpl-0c1d2e3f"] and result.errors.num_rows == 0


def test_columns_are_checked():
    with pytest.raises(ValueError, match="give each once"):
        parse_batch([], "openai", "cpu", columns=["model", "nope"])
    with pytest.raises(ValueError, match="give each once"):
        parse_batch([], "openai", "cpu", columns=["model", "model"])


def test_content_columns_alone_read_the_content_without_giving_it():
    contents = ['{"language": "py", "code": 3}', "```python\nprint(1)\n```", None]
    bodies = [encode(chat(choices=[choice(c)])) for c in contents]
    subset = parse_batch(bodies, "coder", "cpu", columns=["code", "content_error"]).table
    whole = parse_batch(bodies, "coder", "cpu").table
    assert subset.column_names == ["line", "code", "content_error"]
    assert subset.column("code").equals(whole.column("code"))
    assert subset.column("content_error").equals(whole.column("content_error"))


# -- inline_errors ----------------------------------------------------------------------------------------------


def test_inline_errors_give_every_body_in_input_order():
    bodies = [encode(chat(id="a")), b"nope", encode(chat(id="c")), None, encode(chat(model=1))]
    result = parse_batch(bodies, "openai", "cpu", columns=["id"], inline_errors=True, first_line=10)  # type: ignore[arg-type]
    table = result.table
    assert table.schema.names == ["line", "id", *(f.name for f in INLINE_ERROR_FIELDS)]
    assert table.column("line").to_pylist() == [10, 11, 12, 13, 14]
    assert table.column("id").to_pylist() == ["a", None, "c", None, "chatcmpl-0c1d2e3f"]
    reasons = table.column("error_reason").to_pylist()
    assert reasons[0] is None and reasons[2] is None and reasons[4] is None
    assert reasons[1] == "not JSON: Expecting value at char 0"
    assert reasons[3] == "not a body: got NoneType (give bytes or str)"
    assert result.errors.num_rows == 2


# -- the native core against the exact path on what it reads itself --------------------------------------------


CONTENTS = [
    '{"language": "py", "code": "x", "explanation": "e", "code_blocks": 2}',
    '```json\n{"language": "go"}\n```',
    '```json\r\n{"language": "go"}\r\n```  \n',
    "```\n{}\n```",
    '  {"code_blocks": 1.5}',
    '{"code_blocks": 12345678901234567890}',
    '{"language": "a", "language": "b"}',
    '[{"language": "py"}]',
    '{"language": "\\ud83d\\ude00 \\u00e9"}',
    "",
    "```python\nprint(1)\n```",
    '{"language": "py"} trailing',
    # JSON-kind properties (vl's boxes) as Python's json.dumps writes them
    '{"caption": "c", "labels": ["a", null], "boxes": [[1, 2, 3, 4], [[-0, 1.0, 1e16, 1e15]]]}',
    '{"boxes": [[0.1, 2.5e-7, -0.0, 123456789.125, 1e-5, 0.0001, 1.7976931348623157e308, 5e-324]]}',
    '{"boxes": {"b": "x\\"\\\\\\n\\t\\u0001\\u001f\\u007f é 😀 \\u2028", "a": [true, false, null]}}',
    '{"boxes": {"a": 1, "a": 2}}',
    '{"boxes": [18446744073709551615, -9223372036854775808, 12345678901234567890123]}',
    '{"boxes": null, "labels": []}',
    '{"boxes": "text", "labels": "not a list"}',
]


@pytest.mark.parametrize("profile", ["coder", "math", "vl"])
def test_contents_equal_the_exact_path(profile: str):
    bodies = [encode(chat(choices=[choice(c)])) for c in CONTENTS]
    assert_matches_reference(bodies, profile, "cpu")


@pytest.mark.parametrize(
    "created",
    [
        "2024-11-30T07:00:00Z",
        "2024-11-30T07:00:00.1+05:30",
        "2024-11-30 07:00",
        "2024-11-30",
        "2024-02-29T23:59:59.999999-00:30",
        "0001-01-01T00:00:00+00:01",
        "9999-12-31T23:59:59-01:00",
        "1969-12-31T23:59:59.9995Z",
        "2023-02-29T00:00:00",
        "2024-11-30T24:00:00",
        "2024-11-30T07:00:00.1234567",
        "20241130T070000",
        "2024-11-30t07:00:00",
    ],
)
def test_iso_created_equals_the_exact_path(created: str):
    from tests.test_decode import PROFILES

    body = json.dumps({"id": "x", "created": created, "model": "m", "choices": []}).encode()
    assert_matches_reference([body], str(PROFILES / "gateway_iso.yaml"), "cpu")


def test_a_build_without_a_compiler_says_so_in_one_line(tmp_path):
    """native/build_native.py (run by the build backend) when no C++ compiler is there: one line, no traceback."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "native" / "build_native.py"
    env = {"PATH": str(tmp_path), "CXX": "no-such-compiler"}
    done = subprocess.run([sys.executable, str(script), "--force"], env=env, capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "dspark-vllm: no C++ compiler found to build the native parser core; install one (e.g. apt-get install g++) "
        "or set CXX"
    ]


def test_a_batch_whose_columns_outgrow_arrow_offsets_is_read_in_parts():
    """DSPARK_OUTPUT_TOO_LARGE (a string column past 2 GiB; here past a small limit) -> halves, same result."""
    from connector.decode.batch import plan_for as plan_of

    plan = plan_of(load_profile("openai"), ["id", "choice_contents"])
    small = native.NativePlan.of(plan.columns, "seconds", max_column_bytes=100)
    bodies = [encode(chat(id=f"{i:040d}", choices=[choice("x" * 30), choice("y", index=1)])) for i in range(9)]
    whole, parts = _read(plan.native, bodies), _read(small, bodies)
    assert parts.equals(whole) and len(parts) == 9
    with pytest.raises(RuntimeError, match="give fewer bodies at a time"):
        _read(native.NativePlan.of(plan.columns, "seconds", max_column_bytes=10), bodies[:1])


def test_a_length_column_through_a_star_is_walked_as_the_exact_path_walks_it():
    """`reduce: length` on a path with `*`: the exact path takes `*` as a name there; so does the core (it
    refused the plan before)."""
    from connector.decode.exact import Rejected, decode_body
    from connector.schema.columns import Column

    column = Column("n", (("choices", "*", "message", "tool_calls"),), "length", False)
    bodies = [
        encode(chat()),
        json.dumps({"choices": {"*": {"message": {"tool_calls": [1, 2]}}}}).encode(),
        json.dumps({"choices": {"*": {"message": {"tool_calls": None}}}}).encode(),
    ]
    out = _read(native.NativePlan.of([column], "seconds"), bodies)
    # `choices` an array is the wrong type on that walk: left to the exact path, which rejects it.
    assert out.field("verdict").to_pylist() == [5, 0, 0]
    with pytest.raises(Rejected, match="wrong type: expected object, got array"):
        decode_body(bodies[0], [column], "seconds")
    assert out.field("n").to_pylist()[1:] == [decode_body(b, [column], "seconds")["n"] for b in bodies[1:]] == [2, None]


def test_a_batch_the_core_cannot_read_takes_the_exact_path(caplog: pytest.LogCaptureFixture):
    """A defect of ours (here: a plan the core refuses) costs speed, not the batch."""
    import dataclasses

    from connector.decode.backends import NativeBackend
    from connector.decode.batch import _bodies

    plan = plan_for(load_profile("openai"), ["model"])
    broken = dataclasses.replace(plan, native=native.NativePlan(b"{}", None))
    backend = NativeBackend()
    with caplog.at_level("ERROR"):
        read = backend.read_bodies(_bodies([b"{}"]), broken)
    assert len(read.positions) == 0 and "take the exact path" in caplog.text


def test_columns_on_every_backend_are_those_of_the_whole_table(backend):
    from connector.simulator.responses import make_corpus

    bodies = make_corpus(60, "coder", seed=17, json_share=0.6) + [b"{", encode(chat(choices=[choice(stop_reason=7)]))]
    names = ["language", "created", "choice_contents", "stop_reason", "content_error"]
    subset = parse_batch(bodies, "coder", backend, columns=names)
    whole = parse_batch(bodies, "coder", backend)
    assert subset.table.equals(whole.table.select(["line", *names]))
    assert subset.errors.column("line").to_pylist() == whole.errors.column("line").to_pylist()


def test_auto_falls_back_once_whatever_stops_the_gpu_backend(monkeypatch, caplog):
    """The one place 'auto' falls back (the Flink parse function kept a second one for errors other than
    BackendUnavailable): a GPU backend that fails to start is a reason too, said in one WARNING."""
    from connector.decode import backends

    def broken() -> None:
        raise RuntimeError("cudaErrorDevicesUnavailable")

    monkeypatch.setattr(backends, "_gpu", broken)
    backends._auto.cache_clear()
    try:
        with caplog.at_level("WARNING", logger=backends.log.name):
            chosen, reason = select_backend("auto")
            again, _ = select_backend("auto")
        assert isinstance(chosen, NativeBackend) and again is chosen
        assert reason == "the GPU backend failed to start (RuntimeError('cudaErrorDevicesUnavailable'))"
        assert [r.getMessage() for r in caplog.records] == [f"parse backend 'auto' uses the CPU: {reason}"]
    finally:
        backends._auto.cache_clear()
