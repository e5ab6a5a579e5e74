"""The native parser core through its C ABI (connector/parse/native.py), and parse_batch's options that it
serves: `columns` (only those built) and `inline_errors` (rows and error rows in one table, input order)."""

from __future__ import annotations

import dataclasses
import glob
import json
import mmap
import random
import resource
import shutil
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from connector.parse import native, parse_batch
from connector.parse.backends import NativeBackend, select_backend
from connector.parse.batch import INLINE_ERROR_FIELDS
from connector.parse.plan import plan_for
from connector.profiles import load_profile
from connector.types.columns import output_schema
from tests.bodies import chat, choice, encode
from tests.decode_support import FILES as SUITE_FILES
from tests.decode_support import PROFILES, assert_matches_reference, mutate
from tests.decode_support import WAYS as SUITE_WAYS
from tests.oracle.content import content_values
from tests.oracle.exact import Rejected, decode_body


def _read(plan: native.NativePlan, bodies: list[bytes]) -> pa.StructArray:
    offsets = np.zeros(len(bodies) + 1, np.int64)
    np.cumsum([len(b) for b in bodies], out=offsets[1:])
    return native.read(plan, b"".join(bodies), offsets)


def test_the_core_is_the_cpu_backend():
    backend, reason = select_backend("cpu")
    assert isinstance(backend, NativeBackend) and backend.name == "cpu" and reason is None
    assert native.library_path().is_file()


def test_a_struct_of_the_plan_columns_and_a_verdict_per_body():
    columns = plan_for(load_profile("openai"), ["model", "n_choices", "choice_contents"]).columns
    plan = native.NativePlan.of(columns, "seconds", explain=False)
    out = _read(plan, [encode(chat(choices=[choice("a"), choice(None, index=1)])), b"[1]", b"{", b""])
    assert [f.name for f in out.type] == ["model", "n_choices", "choice_contents", "verdict"]
    assert out.field("verdict").to_pylist() == [0, 2, 1, 1]
    assert out.field("choice_contents").to_pylist() == [["a", None], None, None, None]
    out.validate(full=True)


def test_explained_a_struct_with_the_reason_and_field_of_every_error():
    plan = plan_for(load_profile("coder"), ["model", "n_choices", "language", "content_error"]).native
    bodies = [encode(chat(choices=[choice('{"language": 5}')])), b"[1]", b"{", b"", encode(chat(model=5))]
    out = _read(plan, bodies)
    assert [f.name for f in out.type] == [
        "model", "content", "n_choices", "language", "code", "explanation", "code_blocks",
        "verdict", "reason", "field", "content_verdict", "content_error",
    ]  # fmt: skip
    assert out.field("verdict").to_pylist() == [0, 2, 1, 1, 5]
    assert out.field("reason").to_pylist() == [
        None,
        "not a JSON object: got array",
        "truncated JSON: input ends at char 1 (Expecting property name enclosed in double quotes)",
        "empty body",
        "wrong type: expected string, got integer",
    ]
    assert out.field("field").to_pylist() == [None, None, None, None, "model"]
    assert out.field("content_verdict").to_pylist() == [0, 1, 1, 1, 1]  # an error row has no content
    assert out.field("content_error").to_pylist() == [
        "property 'language': wrong type: expected string, got integer", None, None, None, None,
    ]  # fmt: skip
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
    """The fast pass's verdicts (a plan without "explain")."""
    columns = plan_for(load_profile("openai"), ["model", "created"]).columns
    plan = native.NativePlan.of(columns, "seconds", explain=False)
    assert _read(plan, [body]).field("verdict").to_pylist() == [verdict]


@pytest.mark.parametrize(
    "body,verdict",
    [
        (b'\xef\xbb\xbf{"model":"m"}', 4),
        (b"[" * 64 + b"]" * 64, 2),
        (b'{"a":' + b"[" * 64 + b"]" * 64 + b"}", 3),
        (b'{"model":5}', 5),
        (b'{"error":{"message":"x"}}', 6),
        (b'{"created":99999999999999}', 7),
        (b'{"model":"a","model":"b"}', 0),  # the last one wins
        (b'{"created":1.0}', 0),
        (b'{"created":1.5}', 5),
        (b'{"model":"\\ud800"}', 1),
        (b'{"x":1e400}', 1),
    ],
)
def test_explained_verdicts_are_rows_or_the_category_of_the_reason(body: bytes, verdict: int):
    plan = plan_for(load_profile("openai"), ["model", "created"]).native
    out = _read(plan, [body])
    assert out.field("verdict").to_pylist() == [verdict]
    assert (out.field("reason")[0].as_py() is None) == (verdict == native.OK)


def test_only_what_is_not_a_body_is_decided_outside_the_core():
    bodies = [encode(chat()), b"{", None, encode(chat(model=5)), b'{"created":1.0}', encode(chat(model="a"))]
    result = parse_batch(bodies, "openai", "cpu")  # type: ignore[arg-type]
    assert result.stats["core"] == 0  # (on cpu the core reads every body in its one call: none is "left")
    assert result.errors.column("line").to_pylist() == [2, 3, 4]
    assert result.errors.column("reason").to_pylist()[1] == "not a body: got NoneType (give bytes or str)"
    assert result.errors.column("field").to_pylist() == [None, None, "model"]
    assert result.errors.column("body").to_pylist() == [b"{", None, encode(chat(model=5))]
    assert_matches_reference([b for b in bodies if b is not None], "openai", "cpu")


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
        assert out.field("reason").to_pylist()[0] == "body too large: over 268435456 bytes"
        del buffer, out
    assert grown_kib < 64 * 1024  # not the 2 GiB that reading it would map in


def test_the_size_limit_is_the_exact_paths_in_the_core(monkeypatch):
    """At the limit a body is read, one byte over it refused with the exact path's reason (here a limit of 100)."""
    from tests.oracle import exact

    at = b'{"id":"' + b"x" * 91 + b'"}'
    bodies = [at, at[:-2] + b'x"}']
    assert [len(b) for b in bodies] == [100, 101]
    columns = plan_for(load_profile("openai"), ["id"]).columns
    out = _read(native.NativePlan.of(columns, "seconds", max_body_bytes=100), bodies)
    assert out.field("verdict").to_pylist() == [0, 9]
    assert out.field("reason").to_pylist() == [None, "body too large: over 100 bytes"]
    monkeypatch.setattr(exact, "MAX_BODY_BYTES", 100)
    assert exact.decode_body(at, columns, "seconds")["id"] == "x" * 91
    with pytest.raises(exact.Rejected, match=r"^body too large: over 100 bytes$"):
        exact.decode_body(bodies[1], columns, "seconds")


def test_a_plan_of_another_version_is_refused():
    plan = native.NativePlan(json.dumps({"version": 99, "created_unit": "seconds", "columns": []}).encode(), None)
    with pytest.raises(RuntimeError, match="the plan's version is not 2"):
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
    """A column the profile does not have is named as unknown, with the nearest ones (it was "columns ['nope']:
    give each once", as for a repeated one)."""
    with pytest.raises(ValueError, match="^unknown column 'nope' in profile 'openai' ") as info:
        parse_batch([], "openai", "cpu", columns=["model", "nope"])
    assert "model, " in str(info.value)
    with pytest.raises(ValueError, match="unknown column 'langauge' in profile 'coder'; did you mean 'language'"):
        parse_batch([], "coder", "cpu", columns=["langauge"])
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
    body = json.dumps({"id": "x", "created": created, "model": "m", "choices": []}).encode()
    assert_matches_reference([body], str(PROFILES / "gateway_iso.yaml"), "cpu")


def test_content_properties_named_like_the_cores_own_columns(tmp_path):
    """Found by the plan fuzz target: a content property named like a column the core adds (verdict, reason,
    field, content_verdict) is read as any other. Before: KeyError 'verdict' out of parse_batch
    (the cpu backend looked the core's columns up by name; now by position, as dspark_core.h orders them)."""
    names = ("verdict", "reason", "field", "content_verdict")  # (content_error: the profile refuses it)
    profile = tmp_path / "why.yaml"
    profile.write_text(
        "name: why\nextends: openai\ncontent:\n  type: object\n  properties:\n"
        + "".join(f"    {n}: {{type: string}}\n" for n in names)
    )
    good = json.dumps({n: f"{n}!" for n in names})
    wrong = json.dumps({"verdict": 1, "reason": "r"})
    bodies = [encode(chat(choices=[choice(c)])) for c in (good, wrong, "free text", "```json\n" + good + "\n```")]
    bodies += [b"not json", b'{"error": {"message": "x"}}']
    assert_matches_reference(bodies, str(profile), "cpu")
    result = parse_batch(bodies, load_profile(str(profile)), backend="cpu")
    assert result.table.column("reason").to_pylist()[:2] == ["reason!", "r"]
    assert len(result.errors) == 2


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


def _re2_fetch(tmp_path, registry: str):
    """native/build_native.py --re2-dir with an empty cache in tmp_path and `registry` as the npm registry."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "native" / "build_native.py"
    env = dict(os.environ, DSPARK_VLLM_CACHE=str(tmp_path / "cache"), DSPARK_VLLM_NPM_REGISTRY=registry)
    return subprocess.run([sys.executable, str(script), "--re2-dir"], env=env, capture_output=True, text=True)


@pytest.fixture
def npm_registry():
    """A registry on 127.0.0.1 serving one file for RE2's tarball: yields (url, set the bytes served)."""
    import http.server
    import threading

    served = {"body": b""}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = served["body"]
            self.send_response(200 if self.path == "/re2/-/re2-1.19.0.tgz" else 404)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", lambda body: served.update(body=body)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_an_editable_install_builds_the_core_this_cpu_loads():
    """`pip install -e .` compiled the core twice (every variant) before the jar; it builds the one variant this
    machine loads, chosen as the loader chooses it (native/build_native.py cannot import the package to ask)."""
    import inspect

    from connector.parse.native import library_path
    from tests.java import build_script

    root = Path(__file__).resolve().parents[1]
    build_native = build_script(root / "native" / "build_native.py")
    assert build_native.this_cpus_variant() == library_path().name
    backend = (root / "java" / "backend.py").read_text()
    editable = backend[backend.index("def build_editable") :]
    assert "_compile(only_this_cpu=True)" in editable.split("\ndef ")[0]
    assert "only_this_cpu" in inspect.signature(build_native.build).parameters


def test_re2_that_cannot_be_fetched_is_one_line(tmp_path, npm_registry):
    """RE2 comes from the npm registry when the core is built: unreachable, or not the pinned bytes, is one line
    saying where to put the file, and nothing half-fetched is left in the cache."""
    import socket

    from tests.java import build_script

    build_native = build_script(Path(__file__).resolve().parents[1] / "native" / "build_native.py")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    done = _re2_fetch(tmp_path, closed)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line == (
        f"dspark-vllm: RE2 2023-03-01 could not be fetched from {closed}/re2/-/re2-1.19.0.tgz ([Errno 111] Connection "
        f"refused); put that file (sha256 {build_native.RE2_SHA256}) into {tmp_path / 'cache'} or set "
        "DSPARK_VLLM_CACHE to a folder that has it"
    )
    url, serve = npm_registry
    serve(b"not the tarball")
    done = _re2_fetch(tmp_path, url)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert (
        "(its sha256 is 22ef63b24d68f7b83395814f738f168eaa55129cdaf62183c7e07d14748881e8, " in line
        and f"not the pinned {build_native.RE2_SHA256}); put that file" in line
    )
    assert list((tmp_path / "cache").iterdir()) == []


def test_re2_is_fetched_once_then_built_from_the_cache(tmp_path, npm_registry):
    """The pinned tarball, served by a registry: fetched and unpacked into the cache; then, with no registry, the
    cache alone gives RE2's sources (a rebuild, or an image build without a network)."""
    from tests.java import build_script

    build_native = build_script(Path(__file__).resolve().parents[1] / "native" / "build_native.py")
    try:
        archive = build_native.re2_archive()  # the one this checkout's build fetched
    except SystemExit as exc:
        pytest.skip(f"the RE2 tarball is not at hand: {exc}")
    url, serve = npm_registry
    serve(archive.read_bytes())
    done = _re2_fetch(tmp_path, url)
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip())
    assert folder.parent == tmp_path / "cache"
    assert all((folder / f).is_file() for f in build_native.RE2_FILES)
    assert (folder / "re2" / "re2.h").is_file() and (folder / "LICENSE").read_text().startswith("// Copyright")
    assert not (folder / "re2" / "testing").exists() and not (folder / "util" / "pcre.cc").exists()
    serve(b"")  # the registry gone: the cache is enough
    assert _re2_fetch(tmp_path, "http://127.0.0.1:9").stdout == done.stdout


def test_a_batch_whose_columns_outgrow_arrow_offsets_is_read_in_parts():
    """DSPARK_OUTPUT_TOO_LARGE (a string column past 2 GiB; here past a small limit) -> halves, same result."""
    from connector.parse.plan import plan_for as plan_of

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
    from connector.types.columns import Column
    from tests.oracle.exact import Rejected, decode_body

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


@pytest.mark.parametrize("on", ["cpu", "gpu-emulated"])
def test_a_batch_the_core_cannot_read_is_error_rows_not_a_failed_batch(
    on: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    """A defect of ours (here: a plan the core refuses) costs the bodies the core was given, each an error row
    saying why (as the JVM's parse step writes it), not the batch: there is no Python parser to fall back on."""
    import dataclasses

    import connector.parse.batch as batch
    from connector.parse.backends import GpuBackend
    from tests.libcudf_emulator import EmulatedLibcudfReader

    def broken(profile, columns=None):
        return dataclasses.replace(plan_for(profile, columns), native=native.NativePlan(b"{}", None))

    monkeypatch.setattr(batch, "plan_for", broken)
    backend = "cpu" if on == "cpu" else GpuBackend(EmulatedLibcudfReader())
    bodies = [encode(chat()), b"{", None, encode(chat(model=5))]
    with caplog.at_level("ERROR"):
        result = parse_batch(bodies, "openai", backend, columns=["model"])  # type: ignore[arg-type]
    assert "the native core could not read" in caplog.text and "Traceback" not in caplog.text
    # On gpu libcudf read body 1; the core was given bodies 2 (not JSON) and 4 (a number for a string).
    failed = [2, 4] if on != "cpu" else [1, 2, 4]
    assert result.table.column("line").to_pylist() == ([1] if on != "cpu" else [])
    assert result.errors.column("line").to_pylist() == sorted([*failed, 3])
    reasons = dict(
        zip(result.errors.column("line").to_pylist(), result.errors.column("reason").to_pylist(), strict=True)
    )
    assert reasons[3] == "not a body: got NoneType (give bytes or str)"
    for line in failed:
        assert reasons[line].startswith(
            "internal error (the native core could not read this body: native parser core: "
        )
        assert reasons[line].endswith("); please report it with this body")


@pytest.mark.parametrize("on", ["cpu", "gpu-emulated"])
def test_a_body_the_core_cannot_read_even_alone_costs_only_its_own_row(on: str, monkeypatch: pytest.MonkeyPatch):
    """A call the core cannot finish for its output or memory (here a column over the plan's max_column_bytes;
    in production a std::bad_alloc of the slow path) is made again in halves down to the one body, which alone
    is an error row, in the JVM parse step's words (tests/test_java_native.py). Before, the whole batch took
    the Python exact path, which no longer runs. On gpu the bodies' free-text contents send them to the core."""
    import dataclasses

    import connector.parse.batch as batch
    from connector.parse.backends import GpuBackend
    from tests.libcudf_emulator import EmulatedLibcudfReader

    def small(profile, columns=None):
        plan = plan_for(profile, columns)
        limited = native.NativePlan.of(plan.columns, plan.created_unit, plan.properties, max_column_bytes=1000)
        return dataclasses.replace(plan, native=limited)

    monkeypatch.setattr(batch, "plan_for", small)
    backend = "cpu" if on == "cpu" else GpuBackend(EmulatedLibcudfReader())
    bodies = [encode(chat(id=i, choices=[choice("free text")])) for i in ("a", "x" * 5000, "b", "c")]
    result = parse_batch(bodies, "coder", backend, columns=["id", "content_error"])
    assert result.table.column("id").to_pylist() == ["a", "b", "c"]
    assert result.errors.column("line").to_pylist() == [2]
    reason = result.errors.column("reason")[0].as_py()
    assert reason.startswith("internal error (the native core could not read this body: native parser core: ")
    assert reason.endswith("); please report it with this body")


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
    from connector.parse import backends

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
        # One short line: the reason's first clause (the whole reason is `fallback_reason`).
        assert [r.getMessage() for r in caplog.records] == [
            "parse backend 'auto' uses the CPU: the GPU backend failed to start"
        ]
    finally:
        backends._auto.cache_clear()


# -- explain: the core alone against the exact path, every body ---------------------------------------------------


def core_vs_exact(bodies: list[bytes], profile: str) -> list[tuple[int, Any, Any]]:
    """(index, exact path, core) for every body where the core with "explain" differs from the exact path: the
    row's values or the error's reason and field, then the content's values and content_error (as the exact
    path gives them when no x-extract pattern reads free text)."""
    plan = plan_for(load_profile(profile))
    # The profile's properties without their x-extract patterns: the core then writes free text's errors too.
    properties = [dataclasses.replace(p, extract=None) for p in plan.properties]
    out = _read(native.NativePlan.of(plan.columns, plan.created_unit, properties), bodies)
    out.validate(full=True)
    arrays = [out.field(i) for i in range(out.type.num_fields)]
    arrays = [a.cast(pa.int64()) if pa.types.is_timestamp(a.type) else a for a in arrays]
    rows = pa.StructArray.from_arrays(arrays, [f.name for f in out.type]).to_pylist()
    wrong: list[tuple[int, Any, Any]] = []
    for i, (body, row) in enumerate(zip(bodies, rows, strict=True)):
        try:
            values = decode_body(body, plan.columns, plan.created_unit)
            expected: tuple[Any, ...] = ("row", values)
        except Rejected as exc:
            expected = ("error", exc.reason, exc.field)
        got = ("row", {c.name: row[c.name] for c in plan.columns}) if row["verdict"] == native.OK else None
        got = got or ("error", row["reason"], row["field"])
        if got != expected:
            wrong.append((i, expected, got))
        elif got[0] == "row" and properties:
            assert row["content_verdict"] in (native.CONTENT_JSON, native.CONTENT_NULL, native.CONTENT_TEXT)
            content = content_values(values["content"], properties)
            core = ({p.name: row[p.name] for p in properties}, row["content_error"])
            if core != content:
                wrong.append((i, content, core))
    return wrong


WAYS_AND_PROFILES = [("whole", "openai"), ("unread field", "openai"), ("read field", "openai")]
WAYS_AND_PROFILES += [("content", p) for p in ("coder", "vl", str(PROFILES / "risk.yaml"), str(PROFILES / "flat.yaml"))]


@pytest.mark.skipif(not SUITE_FILES, reason="JSONTestSuite not found: set DSPARK_JSONTESTSUITE")
@pytest.mark.parametrize("way,profile", WAYS_AND_PROFILES, ids=[f"{w}-{Path(p).stem}" for w, p in WAYS_AND_PROFILES])
def test_explained_jsontestsuite_equals_the_exact_path(way: str, profile: str):
    bodies = [SUITE_WAYS[way](path.read_bytes()) for path in SUITE_FILES]
    assert core_vs_exact(bodies, profile) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "profile",
    ["coder", "vl", "math", *(str(PROFILES / f) for f in ("flat.yaml", "gateway_iso.yaml", "gateway_ms.yaml"))],
)
def test_explained_mutated_bodies_equal_the_exact_path(profile: str):
    """tests/test_fuzz.py's seeded mutations of real vLLM bodies."""
    from connector.simulator.responses import make_corpus

    rng = random.Random(f"issue-12 {profile}")
    corpus = make_corpus(300, profile if profile in ("coder", "vl", "math") else "openai", seed=12, json_share=0.6)
    for _ in range(10):
        bodies = [mutate(b, rng) if rng.random() < 0.7 else b for b in corpus]
        assert core_vs_exact(bodies, profile) == []


# Each reason the exact path writes, as it writes it (None: a row); the core must give the same.
REASONS = [
    (b'{"a" 1}', "not JSON: Expecting ':' delimiter at char 5", None),
    (b'{"a":1 "b":2}', "not JSON: Expecting ',' delimiter at char 7", None),
    (b"{1:1}", "not JSON: Expecting property name enclosed in double quotes at char 1", None),
    (b'{"a":1,}', "not JSON: Expecting property name enclosed in double quotes at char 7", None),
    (b"[1,]", "not JSON: Expecting value at char 3", None),
    (b'{"a":[1 2]}', "not JSON: Expecting ',' delimiter at char 8", None),
    (b'{"a":"\\x"}', "not JSON: Invalid \\escape at char 6", None),
    (b'{"a":"\\u12G4"}', "not JSON: Invalid \\uXXXX escape at char 7", None),
    (b'{"a":"\\ud800\\u12G4"}', "not JSON: Invalid \\uXXXX escape at char 13", None),
    (b'{"a":"b\x01"}', "not JSON: Invalid control character at char 7", None),
    (b'{"a":"b', "truncated JSON: input ends at char 7 (Unterminated string starting)", None),
    (b'{"a":"b\\', "truncated JSON: input ends at char 8 (Unterminated string starting)", None),
    (b'{"a":"\\u12', "truncated JSON: input ends at char 10 (Invalid \\uXXXX escape)", None),
    (b'{"a":"\\u', "truncated JSON: input ends at char 8 (Invalid \\uXXXX escape)", None),
    (b'{"a":tru', "truncated JSON: input ends at char 8 (Expecting value)", None),
    (b'{"a":nul', "truncated JSON: input ends at char 8 (Expecting value)", None),
    (b'{"a":-', "truncated JSON: input ends at char 6 (Expecting value)", None),
    (b'{"a":1.', "truncated JSON: input ends at char 7 (Expecting ',' delimiter)", None),
    (b'{"a":1e+', "truncated JSON: input ends at char 8 (Expecting ',' delimiter)", None),
    (b'{"a":-x}', "not JSON: Expecting value at char 5", None),
    (b'{"a":.5}', "not JSON: Expecting value at char 5", None),
    (b'{"a":01}', "not JSON: Expecting ',' delimiter at char 6", None),
    (b'{"a":1}x', "trailing data after the JSON value at char 7", None),
    (b'{"a":1} {}', "trailing data after the JSON value at char 8", None),
    (b'{"a":1}  \n', None, None),
    (b"", "empty body", None),
    (b" \t\r\n", "empty body", None),
    (b"x", "not JSON: Expecting value at char 0", None),
    (b"{", "truncated JSON: input ends at char 1 (Expecting property name enclosed in double quotes)", None),
    (b"[", "truncated JSON: input ends at char 1 (Expecting value)", None),
    (b'{"a":', "truncated JSON: input ends at char 5 (Expecting value)", None),
    (b'{"a"', "truncated JSON: input ends at char 4 (Expecting ':' delimiter)", None),
    (b'{"a":[', "truncated JSON: input ends at char 6 (Expecting value)", None),
    (b'{"a":1,', "truncated JSON: input ends at char 7 (Expecting property name enclosed in double quotes)", None),
    (b'{"\xc3\xa9":"\xe2\x82\xac" x}', "not JSON: Expecting ',' delimiter at char 9", None),
    (b'{"\xc3\xa9":"\xe2\x82\xac",}', "not JSON: Expecting property name enclosed in double quotes at char 9", None),
    (b'{"a":NaN}', "not JSON: NaN (JSON has no NaN or Infinity)", None),
    (b'{"a":Infinity}', "not JSON: Infinity (JSON has no NaN or Infinity)", None),
    (b'{"a":-Infinity}', "not JSON: -Infinity (JSON has no NaN or Infinity)", None),
    (b'{"a":-Inf}', "not JSON: Expecting value at char 5", None),
    (b'{"a":[NaN', "not JSON: NaN (JSON has no NaN or Infinity)", None),
    (b'{"a":1e400}', "number out of range for a double: 1e400", None),
    (b'{"a":-1e400}', "number out of range for a double: -1e400", None),
    (b'{"a":1e-400}', None, None),
    (b'{"a":[1e400, NaN]}', "number out of range for a double: 1e400", None),
    (b'{"a":[NaN, 1e400]}', "not JSON: NaN (JSON has no NaN or Infinity)", None),
    (
        b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
        "nested too deeply: more than 64 levels of arrays and objects",
        None,
    ),
    (b'{"a":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}', None, None),
    (
        b'{"a":"\\[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[',
        "not JSON: Invalid \\escape at char 6",
        None,
    ),
    (b"\xef\xbb\xbf{}", "not JSON: a byte order mark (U+FEFF) at char 0", None),
    (
        b"\xef\xbb\xbf[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
        "nested too deeply: more than 64 levels of arrays and objects",
        None,
    ),
    (b'{"a":"\xff"}', "invalid UTF-8: byte 0xff at offset 6", None),
    (b'{"a":"\xc3"}', "invalid UTF-8: byte 0xc3 at offset 6", None),
    (b'{"\xe2\x82":1}', "invalid UTF-8: byte 0xe2 at offset 2", None),
    (b'{"a":"\xed\xa0\x80"}', "invalid UTF-8: byte 0xed at offset 6", None),
    (b'{"a":"\xf4\x90\x80\x80"}', "invalid UTF-8: byte 0xf4 at offset 6", None),
    (b'{"a":"\xc0\x80"}', "invalid UTF-8: byte 0xc0 at offset 6", None),
    (b'{"\xc3\xa9\xc3\xa9":"\xe2\x82\xac\xf0\x9f\x98"}', "invalid UTF-8: byte 0xf0 at offset 12", None),
    (b'{"a":"\\ud800"}', "invalid string: unpaired surrogate escape", "a"),
    (b'{"a":{"b":["x","\\udc00"]}}', "invalid string: unpaired surrogate escape", "a.b[1]"),
    (b'{"\\ud800":1}', "invalid string: unpaired surrogate escape", None),
    (b'{"a":{"\\udfff":1}}', "invalid string: unpaired surrogate escape", "a"),
    (b'{"a":"\\ud83d\\ude00"}', None, None),
    (b'{"a":"\\ud800","a":1}', None, None),
    (b'{"b":"\\ud800","a":"\\udc00"}', "invalid string: unpaired surrogate escape", "b"),
    (b'{"a":["\\ud800"], "b":1} x', "trailing data after the JSON value at char 24", None),
    (b'{"a":"\\ud83d\\u0041"}', "invalid string: unpaired surrogate escape", "a"),
    (b"[1]", "not a JSON object: got array", None),
    (b'"s"', "not a JSON object: got string", None),
    (b"5", "not a JSON object: got integer", None),
    (b"5.5", "not a JSON object: got number", None),
    (b"true", "not a JSON object: got boolean", None),
    (b"null", "not a JSON object: got null", None),
    (b'{"model":5}', "wrong type: expected string, got integer", "model"),
    (b'{"choices":{}}', "wrong type: expected array, got object", "choices"),
    (b'{"choices":[5]}', "wrong type: expected object, got integer", "choices[0]"),
    (b'{"choices":[{"message":5}]}', "wrong type: expected object, got integer", "choices[0].message"),
    (
        b'{"choices":[{"message":{"content":5}}]}',
        "wrong type: expected string, got integer",
        "choices[0].message.content",
    ),
    (
        b'{"choices":[{"message":{"content":"a"}},{"message":{"content":7}}]}',
        "wrong type: expected string, got integer",
        "choices[*].message.content",
    ),
    (
        b'{"choices":[{"message":{"content":"a"}},{"message":[]}]}',
        "wrong type: expected object, got array",
        "choices.1.message",
    ),
    (b'{"choices":[{"text":5}]}', "wrong type: expected string, got integer", "choices[0].text"),
    (
        b'{"choices":[{"message":{"content":"a"}, "text":5}]}',
        "wrong type: expected string, got integer",
        "choices[0].text",
    ),
    (
        b'{"choices":[{"message":{"tool_calls":[{"function":{"name":1}}]}}]}',
        "wrong type: expected string, got integer",
        "choices[0].message.tool_calls[*].function.name",
    ),
    (
        b'{"choices":[{"message":{"tool_calls":{}}}]}',
        "wrong type: expected array, got object",
        "choices[0].message.tool_calls",
    ),
    (
        b'{"choices":[{"stop_reason":true}]}',
        "wrong type: expected integer or string, got boolean",
        "choices[0].stop_reason",
    ),
    (
        b'{"choices":[{"stop_reason":1.5}]}',
        "wrong type: expected integer or string, got number",
        "choices[0].stop_reason",
    ),
    (
        b'{"choices":[{"stop_reason":99999999999999999999}]}',
        "out of range for a 64-bit integer",
        "choices[0].stop_reason",
    ),
    (b'{"choices":[{"stop_reason":-7}]}', None, None),
    (b'{"usage":{"prompt_tokens":"1"}}', "wrong type: expected integer, got string", "usage.prompt_tokens"),
    (b'{"usage":{"prompt_tokens":5.0}}', None, None),
    (b'{"usage":{"prompt_tokens":5.5}}', "wrong type: expected integer, got number 5.5", "usage.prompt_tokens"),
    (b'{"usage":{"prompt_tokens":1e20}}', "out of range for a 64-bit integer", "usage.prompt_tokens"),
    (b'{"usage":{"prompt_tokens":-9223372036854775809}}', "out of range for a 64-bit integer", "usage.prompt_tokens"),
    (b'{"usage":{"prompt_tokens":9223372036854775807}}', None, None),
    (b'{"usage":{"prompt_tokens":-0}}', None, None),
    (b'{"usage":{"prompt_tokens":1.5e300}}', "out of range for a 64-bit integer", "usage.prompt_tokens"),
    (b'{"usage":5}', "wrong type: expected object, got integer", "usage"),
    (
        b'{"usage":{"prompt_tokens_details":[]}}',
        "wrong type: expected object, got array",
        "usage.prompt_tokens_details",
    ),
    (
        b'{"metrics":{"time_to_first_token_ms":"x"}}',
        "wrong type: expected number, got string",
        "metrics.time_to_first_token_ms",
    ),
    (b'{"metrics":{"time_to_first_token_ms":123456789012345678901234}}', None, None),
    (
        b'{"metrics":{"time_to_first_token_ms":true}}',
        "wrong type: expected number, got boolean",
        "metrics.time_to_first_token_ms",
    ),
    (b'{"model":"a","model":"b"}', None, None),
    (b'{"model":5,"model":"b"}', None, None),
    (b'{"model":"b","model":5}', "wrong type: expected string, got integer", "model"),
    (b'{"choices":[],"choices":[{"text":"t"}]}', None, None),
    (b'{"choices":[{"index":0}], "choices":null}', None, None),
    (b'{"created":1.0}', None, None),
    (b'{"created":1732950000.0}', None, None),
    (b'{"created":1e20}', "out of range for a 64-bit integer", "created"),
    (b'{"created":-62135596801}', "out of range: -62135596801 (seconds) is not within years 1..9999", "created"),
    (b'{"created":253402300799}', None, None),
    (b'{"created":253402300800}', "out of range: 253402300800 (seconds) is not within years 1..9999", "created"),
    (b'{"created":"now"}', "wrong type: expected integer, got string", "created"),
    (b'{"created":true}', "wrong type: expected integer, got boolean", "created"),
    (b'{"created":99999999999999999999}', "out of range for a 64-bit integer", "created"),
    (b'{"created":1.5}', "wrong type: expected integer, got number 1.5", "created"),
    (b'{"error":{"message":"boom","type":"E","code":500}}', "error response (type=E, code=500): boom", "error"),
    (b'{"error":"plain"}', "error response: plain", "error"),
    (b'{"error":{"message":"","code":0}}', "error response (code=0)", "error"),
    (b'{"object":"error","message":"m","type":"t"}', "error response (type=t): m", None),
    (
        b'{"error":{"type":{"a":[1,2.5,"\xc3\xa9"]},"code":true,"message":["x"]}}',
        'error response (type={"a":[1,2.5,"é"]}, code=true): ["x"]',
        "error",
    ),
    (b'{"error":{"code":1.5e300}}', "error response (code=1.5e+300)", "error"),
    (b'{"error":null,"object":"error"}', "error response", None),
    (b'{"error":false}', "error response", "error"),
    (b'{"error":0}', "error response", "error"),
    (b'{"error":[]}', "error response", "error"),
    (b'{"error":{}}', "error response", "error"),
    (b'{"error":{"message":{"k":null}}}', 'error response: {"k":null}', "error"),
    (b'{"error":{"message":0.0}}', "error response", "error"),
    (b'{"error":{"message":-0.0}}', "error response", "error"),
    (b'{"error":{"code":12345678901234567890123}}', "error response (code=12345678901234567890123)", "error"),
    (b'{"object":"error","error":null}', "error response", None),
    (b'{"object":"Error"}', None, None),
    (b'{"error":1,"model":5}', "error response: 1", "error"),
    (b'{"model":5,"error":1}', "error response: 1", "error"),
]
REASONS += [
    (b'{"a":' + b"9" * 400 + b"}", "number out of range for a double: 99999999999999999999... (400 characters)", None),
    (b'{"a":' + b"9" * 309 + b"}", "number out of range for a double: 99999999999999999999... (309 characters)", None),
    (b'{"a":' + b"9" * 308 + b"}", None, None),
    (b'{"a":' + b"[" * 64 + b"]" * 64 + b"}", "nested too deeply: more than 64 levels of arrays and objects", None),
    (b'{"a":' + b"[" * 63 + b"]" * 63 + b"}", None, None),
    (b"[" * 70, "nested too deeply: more than 64 levels of arrays and objects", None),
    (b"[" * 64 + b"]" * 65, "trailing data after the JSON value at char 128", None),
    (b'{"a":"' + b"[" * 70 + b'"}', None, None),
    (b'{"a":"\\' + b"[" * 70, "not JSON: Invalid \\escape at char 6", None),
    (b'{"a":"' + b"[" * 70 + b"\\", "nested too deeply: more than 64 levels of arrays and objects", None),
    (b"\xef\xbb\xbf" + b"[" * 70, "nested too deeply: more than 64 levels of arrays and objects", None),
    (b'{"a":' + b"]" * 70 + b"[" * 64, "not JSON: Expecting value at char 5", None),
    # more names at one object than the fast pass follows, a repeated one among them
    (
        b"{" + b",".join(b'"k%d":%d' % (i, i) for i in range(40)) + b',"k3":"x","model":"m","model":5}',
        "wrong type: expected string, got integer",
        "model",
    ),
    (b'{"choices":[' + b",".join([b'{"message":{"content":"c"}}'] * 40) + b"]}", None, None),
]


@pytest.mark.parametrize("body,reason,field", REASONS)
def test_explained_reasons_equal_the_exact_path(body: bytes, reason: str | None, field: str | None):
    columns = plan_for(load_profile("openai")).columns
    try:
        decode_body(body, columns, "seconds")
        assert reason is None
    except Rejected as exc:
        assert (exc.reason, exc.field) == (reason, field)
    assert core_vs_exact([b"{}", body], "openai") == []


def test_an_error_response_prints_a_detail_that_is_not_a_string_or_an_integer_as_json():
    body = b'{"error":{"type":{"a":[1,2.5,"\xc3\xa9"]},"code":true,"message":{"k":null}}}'
    with pytest.raises(Rejected) as caught:
        decode_body(body, [], "seconds")
    assert caught.value.reason == 'error response (type={"a":[1,2.5,"é"]}, code=true): {"k":null}'
    assert core_vs_exact([body], "openai") == []


EXPLAINED_CONTENTS = CONTENTS + [
    "Hello!",
    '"just a string"',
    "5",
    "nul",
    "   ",
    "```json\n```",
    '```json\n{"language": 5}\n```',
    "```json\n[1, 2\n```",
    '```\n{"language": "py"} x\n```',
    "```json\n\n```",
    '{"language": "\\ud800"}',
    '{"a": {"b": ["\\udc00"]}, "language": "x"}',
    '{"language": "py", "code_blocks": 5.0, "objects": 2.5}',
    '{"code_blocks": "3", "language": 7, "code": "c"}',
    '{"labels": ["a", 5, "b"], "caption": "c"}',
    '{"labels": ["a", null], "objects": 99999999999999999999}',
    '{"labels": {}, "boxes": [1e400]}',
    '{"boxes": [NaN]}',
    '{"boxes": {"x": [1.5, -0.0, 1e22, 123456789012345678901234567890, "\\u00e9\\n"], "x": 1}}',
    '{"answer": 1, "steps": ["a", 1], "final": true}',
    "[" * 70,
    '{"language": "' + "[" * 70 + '"}',
    '\ufeff{"language": "py"}',
    '{"language": "py"}\n\n',
    '{"language": "py",}',
]


@pytest.mark.parametrize("profile", ["coder", "math", "vl", str(PROFILES / "risk.yaml"), str(PROFILES / "flat.yaml")])
def test_explained_contents_equal_the_exact_path(profile: str):
    bodies = [encode(chat(choices=[choice(c)])) for c in EXPLAINED_CONTENTS]
    assert core_vs_exact(bodies, profile) == []


def test_free_text_errors_are_left_out_when_patterns_read_free_text():
    """coder's properties have x-extract patterns: the core does not write free text's content_error then."""
    plan = plan_for(load_profile("coder"))
    out = _read(plan.native, [encode(chat(choices=[choice(c)])) for c in ["Hello!", "{", '{"language": 5}']])
    assert out.field("content_verdict").to_pylist() == [native.CONTENT_TEXT, native.CONTENT_JSON, native.CONTENT_JSON]
    assert out.field("content_error").to_pylist() == [
        None,
        "truncated JSON: input ends at char 1 (Expecting property name enclosed in double quotes)",
        "property 'language': wrong type: expected string, got integer",
    ]
    plain = [dataclasses.replace(p, extract=None) for p in plan.properties]
    out = _read(native.NativePlan.of(plan.columns, "seconds", plain), [encode(chat(choices=[choice("Hello!")]))])
    assert out.field("content_error").to_pylist() == ["not JSON: Expecting value at char 0"]


def _iso_cases() -> list[str]:
    """ISO-8601 strings, valid and not, and seeded mutations of them (datetime.fromisoformat's edge cases)."""
    rng = random.Random("issue-19 iso")
    valid = [
        "2024-11-30T07:00:00Z", "2024-11-30T07:00:00.123456+05:30", "2024-11-30 07:00", "2024-11-30", "20241130",
        "2024-W48-6", "2024W486", "2024-W48", "2024W48", "2024-11-30T07", "2024-11-30T0700", "2024-11-30T070000",
        "2024-11-30T07:00:00,5", "2024-11-30T07:00:00.1234567", "2024-11-30T07:00:00+0530", "2024-11-30T07:00:00-05",
        "2024-11-30T07:00:00+05:30:15.123", "2020-W53-7", "2021-W53-1", "9999-12-31T23:59:59", "0001-01-01T00:00:00",
        "2024-11-30T07:00:00.", "2024-11-30T07:00:00:12", "2024-11-30T07.5", "2024-11-30T24:00:00",
        "2024-11-30T07:00x+05:00", "2024-11-30é07:00", "2024-11-30T07:00:00Zx", "2024-11-30T07:00:00+24:00",
        "2024-11-30T07:00:00-23:59:59.9999999", "2024-02-30", "2023-02-29", "2024-W54-1", "9999-W52-6",
        "0001-W01-1", "2024-11-30T7:00", "2024-1130", "2024-11-30\x0007:00", "1969-12-31T23:59:59.9995Z",
        "0001-01-01T00:00:00+00:01", "9999-12-31T23:59:59-01:00", "2024-11-30T07:00:00.😀", "😀😀😀😀😀😀😀😀",
        "2024-11-30T07:00:00 \u2028\x7f\x85\u00a0'\"", "x" * 50,
    ]  # fmt: skip
    alphabet = "0123456789" * 3 + "-:TW Z+.,xé\x00"
    cases = list(valid)
    for _ in range(1500):
        text = list(rng.choice(valid))
        for _ in range(rng.choice([1, 1, 2, 3])):
            at, kind = rng.randrange(len(text) + 1), rng.randrange(4)
            if kind == 0 and text:
                text[min(at, len(text) - 1)] = rng.choice(alphabet)
            elif kind == 1:
                del text[at : at + rng.randrange(1, 3)]
            elif kind == 2:
                text[at:at] = [rng.choice(alphabet)]
            else:
                del text[at:]
        cases.append("".join(text))
    return cases


def test_explained_iso_timestamps_equal_the_exact_path():
    bodies = [json.dumps({"id": "x", "created": c, "model": "m", "choices": []}).encode() for c in _iso_cases()]
    assert core_vs_exact(bodies, str(PROFILES / "gateway_iso.yaml")) == []


def _python_3_12() -> str | None:
    candidates = [
        shutil.which("python3.12"),
        *sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.12*/bin/python3.12"))),
    ]
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    return None


PYTHON_3_12 = _python_3_12()


@pytest.mark.skipif(PYTHON_3_12 is None, reason="no python3.12 to compare datetime.fromisoformat with")
def test_python_3_12_reads_the_iso_cases_as_this_python_does():
    """The core follows CPython 3.11's and 3.12's fromisoformat; they agree on every case tested."""
    script = (
        "import json, sys\nfrom datetime import datetime\nout = []\n"
        "for s in json.load(sys.stdin):\n"
        "    try:\n        out.append(datetime.fromisoformat(s).isoformat())\n"
        "    except ValueError:\n        out.append(None)\n"
        "print(json.dumps(out))\n"
    )
    cases = _iso_cases()
    done = subprocess.run(
        [str(PYTHON_3_12), "-c", script], input=json.dumps(cases), capture_output=True, text=True, check=True
    )
    here = []
    for c in cases:
        try:
            here.append(datetime.fromisoformat(c).isoformat())
        except ValueError:
            here.append(None)
    assert json.loads(done.stdout) == here


def test_free_text_is_read_by_the_core_alone():
    """The core reads free-text contents with the x-extract patterns itself; parse_batch ran Python's
    `extract` over the same contents again and threw the result away (a tenth of the batch's time). There is
    no Python reader left to run (tests/test_layers.py keeps the package from importing the reference)."""
    from connector.simulator.responses import make_corpus

    bodies = make_corpus(200, "coder", seed=5, json_share=0.0)
    result = parse_batch(bodies, "coder", backend="cpu")
    assert result.table.num_rows > 150 and result.table.column("code").null_count < result.table.num_rows


@pytest.mark.parametrize("bodies", [[b""], [None], [b"", b""], [b"", None, b""], ["", None, b""]])
def test_a_batch_of_empty_bodies_is_decided_by_the_core(bodies: list[Any], caplog: pytest.LogCaptureFixture):
    """The joined bodies of such a batch are 0 bytes: the core was given a NULL pointer for them, refused it
    ("no bodies given"), and the batch took the exact path with an ERROR and a traceback."""
    with caplog.at_level("ERROR"):
        result = parse_batch(bodies, "openai", "cpu")
    assert [r for r in caplog.records if r.levelname == "ERROR"] == []
    expected = []
    for i, body in enumerate(bodies):
        if body is None:
            expected.append({"line": i + 1, "reason": "not a body: got NoneType (give bytes or str)", "field": None})
            continue
        with pytest.raises(Rejected) as rejected:
            decode_body(
                body if isinstance(body, bytes) else body.encode(), plan_for(load_profile("openai")).columns, "seconds"
            )
        expected.append({"line": i + 1, "reason": rejected.value.reason, "field": rejected.value.field})
    assert result.errors.drop_columns(["body"]).to_pylist() == expected
    assert result.table.num_rows == 0
    # The core decided the empty ones; what is not a body has its error row from parse_batch.
    assert result.errors.column("reason").to_pylist().count("not a body: got NoneType (give bytes or str)") == sum(
        b is None for b in bodies
    )
    assert result.stats["rejected"] == len(bodies)
    out = _read(plan_for(load_profile("openai"), ["model"]).native, [b""] * 3)
    assert out.field("reason").to_pylist() == ["empty body"] * 3


def _part_bodies() -> list[Any]:
    from connector.simulator.responses import make_corpus

    bodies: list[Any] = list(make_corpus(30, "coder", seed=11, json_share=0.6))
    bodies[3:3] = [b"", None, b"{", encode(chat(choices=[choice(stop_reason=7)]))]
    bodies[20:20] = [bodies[0].decode(), b"[1]", b"", b"", 5]
    bodies.append(b"x" * 3000)  # over the part size alone
    return bodies


@pytest.mark.parametrize("inline_errors", [False, True])
def test_a_batch_over_the_part_size_is_parsed_in_parts(backend, monkeypatch, inline_errors: bool):
    """A batch whose bodies hold more than PART_BYTES (1 GiB; here 2,000 bytes) is parsed in parts: one batch
    of 2.25 GiB of contents failed whole (Arrow's offsets overflowed joining the core's halves). The result
    is that of parsing each body alone."""
    import connector.parse.batch as batch

    bodies = _part_bodies()
    whole = parse_batch(bodies, "coder", backend, first_line=7, inline_errors=inline_errors)
    assert whole.table.column("line").num_chunks == 1
    monkeypatch.setattr(batch, "PART_BYTES", 2000)
    monkeypatch.setattr(batch, "PART_BODY_BYTES", 10)
    parts = parse_batch(bodies, "coder", backend, first_line=7, inline_errors=inline_errors)
    # Parts of several bodies, and of one.
    assert 10 < parts.table.column("line").num_chunks < len(bodies)
    alone = [
        parse_batch([b], "coder", backend, first_line=7 + i, inline_errors=inline_errors) for i, b in enumerate(bodies)
    ]
    assert parts.table.to_pylist() == whole.table.to_pylist() == [r for a in alone for r in a.table.to_pylist()]
    assert parts.errors.to_pylist() == whole.errors.to_pylist() == [r for a in alone for r in a.errors.to_pylist()]
    assert parts.table.schema == whole.table.schema and parts.errors.schema == whole.errors.schema
    assert parts.backend == whole.backend and parts.fallback_reason == whole.fallback_reason
    for key in ("bodies", "bytes", "rows", "rejected", "core", "content_core"):
        assert parts.stats[key] == whole.stats[key] == sum(a.stats[key] for a in alone), key
    assert parts.stats["bodies"] == len(bodies) and parts.stats["seconds"] >= parts.stats["read_s"]
    # One part: the whole batch under the size in bodies (the size counts PART_BODY_BYTES a body too).
    monkeypatch.setattr(batch, "PART_BYTES", int(whole.stats["bytes"]) + 10 * len(bodies))
    assert parse_batch(bodies, "coder", backend, first_line=7).table.column("line").num_chunks == 1
    monkeypatch.setattr(batch, "PART_BYTES", int(whole.stats["bytes"]) + 10 * len(bodies) - 1)
    assert parse_batch(bodies, "coder", backend, first_line=7).table.column("line").num_chunks == 2


_RETAINED = """
import gc, sys
from connector.parse import parse_batch

def rss_mb():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS")) >> 10

parse_batch([b'{"id":"a"}'], "openai", "cpu")
before = rss_mb()
for body in (b'{"id":"a","x":[' + b"1," * (32 << 20) + b'1]}', b'{"id":"a","id":"b","x":[' + b"1," * (16 << 20) + b'1]}'):
    parse_batch([body], "openai", "cpu")  # a row (the fast pass), then the slow path's (a repeated name)
    del body
    gc.collect()
parse_batch([b'{"id":"b"}'], "openai", "cpu")
print(rss_mb() - before)
"""


def test_a_large_body_leaves_no_memory_held_by_the_thread():
    """The core keeps a thread's parsers between calls; after a 64 MiB body they held 320 MB (simdjson's index
    and string buffer), and the slow path's freed tree of a 32 MiB body 160 MB more, for the thread's lifetime
    (a TaskManager's task thread: 2 GB after one 256 MiB body). Both are let go when the call ends."""
    import sys

    done = subprocess.run([sys.executable, "-c", _RETAINED], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) < 64, f"{done.stdout.strip()} MB held after the large bodies"


def test_the_slow_path_reads_a_large_body_in_bounded_memory():
    """benchmarks/bench_slow_path.py (docs/benchmarks.md quotes it) on an 8 MiB body of small values that only
    the slow path decides: its tree took 110 MB a MiB (a hostile 256 MiB body: 28 GB), now about 20."""
    import sys

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_slow_path.py"
    done = subprocess.run([sys.executable, str(script), "--mib", "8"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    header, row = done.stdout.splitlines()
    assert header.split()[0] == "body" and row.split()[:2] == ["8", "MiB"], done.stdout
    per_mib = float(row.split()[4])
    assert per_mib < 40, f"{per_mib} MB a MiB"
