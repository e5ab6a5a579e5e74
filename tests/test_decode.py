"""The deserializer on every backend: golden bodies, malformed input, content, profiles of all units."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest

from connector.parse import parse_batch
from tests.bodies import CREATED, chat, choice, encode
from tests.decode_support import PROFILES, assert_matches_reference, parse

T0 = datetime.fromtimestamp(CREATED, UTC)


# -- golden corpus ------------------------------------------------------------------------------------------

GOLDEN: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "plain chat",
        chat(),
        {
            "id": "chatcmpl-0c1d2e3f",
            "object": "chat.completion",
            "created": T0,
            "model": "Qwen/Qwen2.5-Coder-7B-Instruct",
            "content": "Hello!",
            "finish_reason": "stop",
            "n_choices": 1,
            "choice_contents": ["Hello!"],
            "choice_finish_reasons": ["stop"],
            "tool_call_names": [],
            "prompt_tokens": 21,
            "completion_tokens": 12,
            "total_tokens": 33,
            "cached_tokens": 16,
            "reasoning_tokens": 0,
            "time_to_first_token_ms": None,
        },
    ),
    ("empty choices", chat(choices=[]), {"n_choices": 0, "content": None, "choice_contents": []}),
    (
        "n=3 with truncated choices",
        chat(
            choices=[
                choice('{"a": 1}'),
                choice('{"a": ', index=1, finish_reason="length"),
                choice(None, index=2, finish_reason="length"),
            ]
        ),
        {
            "n_choices": 3,
            "content": '{"a": 1}',
            "choice_contents": ['{"a": 1}', '{"a": ', None],
            "choice_finish_reasons": ["stop", "length", "length"],
        },
    ),
    ("reasoning (new name)", chat(choices=[choice(reasoning="think")]), {"reasoning": "think"}),
    ("reasoning_content (old name)", chat(choices=[choice(reasoning_content="old")]), {"reasoning": "old"}),
    ("int stop_reason", chat(choices=[choice(stop_reason=151643)]), {"stop_reason": "151643"}),
    ("str stop_reason", chat(choices=[choice(stop_reason="</s>")]), {"stop_reason": "</s>"}),
    (
        "unicode, escapes, surrogate pairs",
        chat(choices=[choice('héllo "wörld"\n\t\\ 😀 \u2028 \x00')]),
        {"content": 'héllo "wörld"\n\t\\ 😀 \u2028 \x00'},
    ),
    ("200 KB body", chat(choices=[choice("x" * 200_000)]), {"content": "x" * 200_000}),
    (
        "metrics present",
        chat(
            metrics={
                "time_to_first_token_ms": 12.5,
                "generation_time_ms": 300,
                "queue_time_ms": 1.25,
                "mean_itl_ms": 9.75,
                "tokens_per_second": 80.5,
            }
        ),
        {
            "time_to_first_token_ms": 12.5,
            "generation_time_ms": 300.0,
            "queue_time_ms": 1.25,
            "mean_itl_ms": 9.75,
            "tokens_per_second": 80.5,
        },
    ),
    (
        "gateway metadata",
        chat(metadata={"inference_time_ms": 41, "kv_cache_hit_rate": 0.5, "gpu_utilization_pct": 87.5}),
        {"inference_time_ms": 41.0, "kv_cache_hit_rate": 0.5, "gpu_utilization_pct": 87.5},
    ),
    (
        "completion",
        {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": CREATED,
            "model": "m",
            "choices": [{"index": 0, "text": "four", "logprobs": None, "finish_reason": "length", "stop_reason": None}],
            "usage": {"prompt_tokens": 3, "total_tokens": 4, "completion_tokens": 1},
        },
        {"object": "text_completion", "content": "four", "choice_contents": ["four"], "cached_tokens": None},
    ),
    (
        "tool calls",
        chat(
            choices=[
                choice(
                    None,
                    tool_calls=[
                        {"id": "t1", "type": "function", "function": {"name": "get", "arguments": '{"x":1}'}},
                        {"id": "t2", "type": "function", "function": {"name": "put", "arguments": "{}"}},
                    ],
                    finish_reason="tool_calls",
                )
            ]
        ),
        {"tool_call_names": ["get", "put"], "tool_call_arguments": ['{"x":1}', "{}"], "content": None},
    ),
    (
        "unknown extra fields",
        chat(trace_id="abc", extra={"deep": [1, {"x": None}]}, choices=[choice(new_field=[1, 2])]),
        {"content": "Hello!"},
    ),
    ("null usage details", chat(usage={"prompt_tokens": 1, "total_tokens": 1}), {"cached_tokens": None}),
    (
        "absent fields",
        {"id": "x", "created": CREATED},
        {"model": None, "n_choices": None, "choice_contents": None},
    ),
    ("system fingerprint", chat(system_fingerprint="fp_1"), {"system_fingerprint": "fp_1"}),
]


def test_golden_values(backend: str):
    bodies = [encode(body) for _, body, _ in GOLDEN]
    # Shuffled key order must not matter.
    bodies.append(encode(dict(reversed(list(chat().items())))))
    result = assert_matches_reference(bodies, "openai", backend)
    rows = result.table.to_pylist()
    assert result.errors.num_rows == 0
    for (name, _, expected), row in zip(GOLDEN, rows, strict=False):
        for key, value in expected.items():
            assert row[key] == value, f"{name}: {key}"
    assert rows[-1] == {**rows[0], "line": len(bodies)}
    # Every body is read by the backend (the int stop_reason one in a group of its own): none is left to the core.
    assert result.stats["core"] == 0
    assert result.backend == getattr(backend, "name", backend)


def test_bodies_as_str_and_first_line(backend: str):
    result = parse([encode(chat()).decode(), "{"], "openai", backend, first_line=41)
    assert result.table.column("line").to_pylist() == [41]
    assert result.errors.column("line").to_pylist() == [42]


def test_empty_batch(backend: str):
    result = parse([], "coder", backend)
    assert result.table.num_rows == 0 and result.errors.num_rows == 0


# -- malformed input: each rejected as documented, the rest of the batch intact --------------------------

MALFORMED: list[tuple[bytes, str, str | None]] = [
    (b"not json", "not JSON: Expecting value at char 0", None),
    (encode(chat())[:-40], "truncated JSON: input ends at char", None),
    (b'{"id": "x", "created": 1', "truncated JSON: input ends at char 24", None),
    (b"", "empty body", None),
    (b"   ", "empty body", None),
    (b'{"id": "\xff\xfe"}', "invalid UTF-8: byte 0xff at offset 8", None),
    (b"[1, 2]", "not a JSON object: got array", None),
    (b"null", "not a JSON object: got null", None),
    (b'"text"', "not a JSON object: got string", None),
    (encode(chat()) + b" trailing", "trailing data after the JSON value at char", None),
    (encode(chat()) + encode(chat()), "trailing data after the JSON value at char", None),
    (
        encode({"error": {"message": "model not found", "type": "NotFoundError", "param": None, "code": 404}}),
        "error response (type=NotFoundError, code=404): model not found",
        "error",
    ),
    (
        encode({"object": "error", "message": "too long", "type": "BadRequestError", "code": 400}),
        "error response (type=BadRequestError, code=400): too long",
        None,
    ),
    (encode(chat(created="yesterday")), "wrong type: expected integer, got string", "created"),
    (encode(chat(created=1.5)), "wrong type: expected integer, got number 1.5", "created"),
    (
        encode(chat(created=10**15)),
        "out of range: 1000000000000000 (seconds) is not within years 1..9999",
        "created",
    ),
    (encode(chat(choices={"0": 1})), "wrong type: expected array, got object", "choices"),
    (encode(chat(choices=[1])), "wrong type: expected object, got integer", "choices[0]"),
    (
        encode(chat(usage={"prompt_tokens": "12"})),
        "wrong type: expected integer, got string",
        "usage.prompt_tokens",
    ),
    (
        encode(chat(usage={"prompt_tokens": 2**64})),
        "out of range for a 64-bit integer",
        "usage.prompt_tokens",
    ),
    (encode(chat(model=5)), "wrong type: expected string, got integer", "model"),
    (
        encode(chat(choices=[choice(finish_reason=True)])),
        "wrong type: expected string, got boolean",
        "choices[0].finish_reason",
    ),
    (
        encode(chat(choices=[choice(stop_reason=1.5)])),
        "wrong type: expected integer or string, got number",
        "choices[0].stop_reason",
    ),
    (
        encode(chat(choices=[choice(stop_reason=2**64)])),
        "out of range for a 64-bit integer",
        "choices[0].stop_reason",
    ),
    (b'{"id": "\\ud800", "created": 1}', "invalid string: unpaired surrogate escape", "id"),
    (b'{"id": "a\tb"}', "not JSON: Invalid control character at char 9", None),
]


@pytest.mark.parametrize("bad,reason,field", MALFORMED, ids=[m[1][:40] for m in MALFORMED])
def test_malformed_rejected_rest_intact(backend: str, bad: bytes, reason: str, field: str | None):
    good = [encode(chat(id=f"c{i}", created=CREATED + i)) for i in range(6)]
    bodies = good[:3] + [bad] + good[3:]
    result = parse(bodies, "openai", backend)
    assert result.errors.num_rows == 1
    error = result.errors.to_pylist()[0]
    assert error["line"] == 4
    assert error["reason"].startswith(reason), error["reason"]
    assert error["field"] == field
    assert error["body"] == bad
    assert result.table.column("id").to_pylist() == [f"c{i}" for i in range(6)]
    assert result.table.column("line").to_pylist() == [1, 2, 3, 5, 6, 7]
    expected = parse(good, "openai", backend).table.drop_columns(["line"])
    assert result.table.drop_columns(["line"]).equals(expected)


def test_many_bad_bodies_scattered(backend: str):
    bodies = []
    for i in range(400):
        bodies.append(encode(chat(id=f"c{i}")) if i % 7 else MALFORMED[i % len(MALFORMED)][0])
    result = assert_matches_reference(bodies, "openai", backend)
    assert result.table.num_rows == sum(1 for i in range(400) if i % 7)
    assert result.errors.num_rows == 400 - result.table.num_rows


def test_empty_and_null_strings_stay_strings(backend: str):
    """ "" and "null" are strings, not nulls (libcudf's null literals are "" and "null": see retype.py)."""
    bodies = [
        encode(chat(id="", model="null", choices=[choice("", stop_reason="null")])),
        encode(chat(id="null", model="", choices=[choice("null", stop_reason="")])),
    ]
    result = assert_matches_reference(bodies, "openai", backend)
    columns = result.table.select(["id", "model", "content", "stop_reason"]).to_pylist()
    assert columns == [
        {"id": "", "model": "null", "content": "", "stop_reason": "null"},
        {"id": "null", "model": "", "content": "null", "stop_reason": ""},
    ]


def test_empty_batch_and_bodies_too_short_to_be_objects(backend: str):
    empty = parse([], "openai", backend)
    assert (empty.table.num_rows, empty.errors.num_rows, empty.stats["bytes"]) == (0, 0, 0.0)
    result = parse([b"", b"{", b"}", encode(chat(id="x"))], "openai", backend)
    assert result.table.column("id").to_pylist() == ["x"]
    assert [e["reason"].split(":")[0] for e in result.errors.to_pylist()] == [
        "empty body",
        "truncated JSON",
        "not JSON",
    ]


def test_pretty_printed_body(backend: str):
    result = assert_matches_reference([encode(chat(), indent=2), encode(chat())], "openai", backend)
    assert result.table.num_rows == 2


# -- created in other units ---------------------------------------------------------------------------------


def test_created_millis_and_extra_field(backend: str):
    profile = str(PROFILES / "gateway_ms.yaml")
    bodies = [
        encode(chat(created=CREATED * 1000 + 123, trace_id="t-1")),
        encode(chat(created=CREATED * 1000)),
    ]
    result = assert_matches_reference(bodies, profile, backend)
    assert result.table.column("created").to_pylist() == [
        datetime(2024, 11, 30, 7, 0, 0, 123000, tzinfo=UTC),
        T0,
    ]
    assert result.table.column("trace_id").to_pylist() == ["t-1", None]


def test_created_iso(backend: str):
    profile = str(PROFILES / "gateway_iso.yaml")
    bodies = [
        encode(chat(created="2024-11-30T07:00:00Z")),
        encode(chat(created="2024-11-30T08:00:00.123456+01:00")),
        encode(chat(created="2024-11-30 07:00:00")),
        encode(chat(created="not a time")),
        encode(chat(created=5)),
    ]
    result = assert_matches_reference(bodies, profile, backend)
    assert result.table.column("created").to_pylist() == [T0, T0.replace(microsecond=123000), T0]
    assert [e["reason"] for e in result.errors.to_pylist()] == [
        "not an ISO-8601 timestamp: 'not a time'",
        "wrong type: expected an ISO-8601 string, got integer",
    ]


# -- content ------------------------------------------------------------------------------------------------


def _contents(profile: str, contents: list[Any], backend: str, **choice_kw: Any):
    bodies = [encode(chat(choices=[choice(c, **choice_kw)])) for c in contents]
    return assert_matches_reference(bodies, profile, backend)


def test_json_content_columns(backend: str):
    profile = str(PROFILES / "risk.yaml")
    contents = [
        '{"risk_level": "high", "approved": false, "score": 7, "tags": ["a", "b"], "detail": {"k": [1, "é"]}}',
        '{\n  "risk_level": "low",\r\n\t"score": 2.0\n}',
        '```json\n{"risk_level": "mid", "score": 5}\n```',
        '{"risk_level": "high", "score": "7"}',
        '{"risk_level": "hi',
        "Sure! The risk is high.",
        "[1, 2]",
        None,
        "",
        '{"score": 1}{"score": 2}',
        '{"risk_level": "x", "risk_level": "y"}',
    ]
    result = _contents(profile, contents, backend)
    rows = result.table.to_pylist()
    assert [r["risk_level"] for r in rows] == [
        "high",
        "low",
        "mid",
        "high",
        None,
        None,
        None,
        None,
        None,
        None,
        "y",
    ]
    assert [r["score"] for r in rows] == [7, 2, 5, None, None, None, None, None, None, None, None]
    assert rows[0]["approved"] is False and rows[0]["tags"] == ["a", "b"]
    assert rows[0]["detail"] == '{"k":[1,"é"]}'
    assert [r["content_error"] for r in rows] == [
        None,
        None,
        None,
        "property 'score': wrong type: expected integer, got string",
        "truncated JSON: input ends at char 18 (Unterminated string starting)",
        "not JSON: Expecting value at char 0",
        "not a JSON object: got array",
        None,
        "empty content",
        "trailing data after the JSON value at char 12",
        None,
    ]


def test_json_content_fast_path(backend: str):
    """Contents that are plain JSON objects are read in one batch, not one by one."""
    contents = [json.dumps({"language": "py", "code": f"print({i})", "explanation": "e"}) for i in range(50)]
    result = _contents("coder", contents, backend)
    assert result.stats["content_core"] == 0
    assert result.table.column("code").to_pylist() == [f"print({i})" for i in range(50)]


CODER_TEXT = (
    "Here is a function that adds numbers.\n\n```python\ndef add(a, b):\n    return a + b\n```\n\n"
    "And a test:\n\n```python\nassert add(1, 2) == 3\n```\n"
)
MATH_TEXT = (
    "Step 1: Let x be the number.\nStep 2: Then 2x = 10.\n3. So x = 5.\n"
    "Hence \\boxed{x = \\frac{10}{2}} and finally \\boxed{5}.\nConfidence: 0.9"
)
VL_TEXT = (
    "A cat and a dog on a sofa. <|ref|>cat<|/ref|><|det|>[[12, 30, 200, 310]]<|/det|> "
    "<|ref|>dog<|/ref|><|det|>[[220,40,480,400],[500,40,600,90]]<|/det|>"
)


def test_text_extraction_coder(backend: str):
    rows = _contents("coder", [CODER_TEXT, "no code here"], backend).table.to_pylist()
    assert rows[0]["language"] == "python"
    assert rows[0]["code"] == "def add(a, b):\n    return a + b\n"
    assert rows[0]["explanation"] == "Here is a function that adds numbers."
    assert rows[0]["code_blocks"] == 2
    assert rows[0]["content_error"] is None
    assert (rows[1]["language"], rows[1]["code_blocks"], rows[1]["explanation"]) == (None, 0, None)


def test_text_extraction_math(backend: str):
    rows = _contents("math", [MATH_TEXT, '{"steps": ["a"], "answer": "5"}'], backend).table.to_pylist()
    assert rows[0]["steps"] == ["Let x be the number.", "Then 2x = 10.", "So x = 5."]
    assert rows[0]["answer"] == "5"
    assert rows[0]["confidence"] == 0.9
    assert (rows[1]["steps"], rows[1]["answer"], rows[1]["confidence"]) == (["a"], "5", None)


def test_text_extraction_vl(backend: str):
    json_content = '{"caption": "c", "labels": ["cat"], "boxes": [[[1, 2, 3, 4]]]}'
    rows = _contents("vl", [VL_TEXT, json_content, "<|det|>[[1,2<|/det|>"], backend).table.to_pylist()
    assert rows[0]["caption"] == "A cat and a dog on a sofa."
    assert rows[0]["labels"] == ["cat", "dog"]
    assert rows[0]["boxes"] == "[[[12,30,200,310]],[[220,40,480,400],[500,40,600,90]]]"
    assert rows[0]["objects"] == 2
    assert rows[1]["boxes"] == "[[[1,2,3,4]]]" and rows[1]["labels"] == ["cat"]
    assert rows[2]["boxes"] is None
    assert rows[2]["content_error"] == "property 'boxes': not JSON: '[[1,2'"


# -- backends ------------------------------------------------------------------------------------------------


def test_unknown_backend_is_a_usage_error():
    """A name that is no backend is a mistake in the call (OptionsError: exit 2 on the command line), not a
    backend missing here (it was BackendUnavailable)."""
    from connector.errors import BackendUnavailable, OptionsError

    with pytest.raises(OptionsError, match="unknown parse backend 'tpu': use one of auto, cpu, gpu"):
        parse_batch([], backend="tpu")
    assert not issubclass(OptionsError, BackendUnavailable)


def test_auto_without_gpu_says_why(caplog: pytest.LogCaptureFixture):
    pytest.importorskip("pyarrow")
    from connector.parse import backends

    backends._auto.cache_clear()  # the one WARNING is per process: this test is that process's first
    with caplog.at_level("WARNING"):
        result = parse_batch([encode(chat())], backend="auto")
        parse_batch([encode(chat())], backend="auto")
    if result.backend == "gpu":
        pytest.skip("a GPU is available: auto chose it")
    assert (
        result.fallback_reason
        and "('parse.backend' = 'cpu' in a table, --backend cpu on the command line)" in result.fallback_reason
    )
    warnings = [r.getMessage() for r in caplog.records if "parse backend 'auto' uses the CPU" in r.getMessage()]
    assert len(warnings) == 1
    # One short line, not the install advice (that is in fallback_reason).
    assert "\n" not in warnings[0] and len(warnings[0]) < 100 and "install" not in warnings[0], warnings[0]


def test_arrow_tables_equal_across_backends(gpu_backend: str):
    bodies = [encode(body) for _, body, _ in GOLDEN] + [m[0] for m in MALFORMED]
    for profile in ("openai", "coder", str(PROFILES / "risk.yaml")):
        cpu = parse(bodies, profile, "cpu")
        gpu = parse(bodies, profile, gpu_backend)
        assert gpu.table.equals(cpu.table)
        assert gpu.errors.equals(cpu.errors)


def test_large_batch_matches_reference(backend: str):
    bodies = []
    for i in range(3000):
        content = json.dumps({"risk_level": ["low", "high"][i % 2], "score": i}) if i % 5 else f"text {i}"
        bodies.append(encode(chat(id=f"c{i}", created=CREATED + i, choices=[choice(content)])))
    result = assert_matches_reference(bodies, str(PROFILES / "risk.yaml"), backend)
    # libcudf reads every body; on gpu a content is the core's (with its body) only for its content: risk's
    # `detail` is a JSON text of its own, which libcudf cannot give back as written.
    assert result.stats["core"] == result.stats["content_core"] == (3000 if result.backend == "gpu" else 0)
    assert pa.compute.sum(result.table.column("score")).as_py() == sum(i for i in range(3000) if i % 5)


def test_int_stop_reasons_are_read_in_their_own_group(backend: str):
    """Many bodies stopped by a token id (int stop_reason) do not each cost an isolation round."""
    bodies = []
    for i in range(300):
        stop: Any = 151643 if i % 3 == 0 else ("</s>" if i % 3 == 1 else None)
        bodies.append(encode(chat(id=f"c{i}", choices=[choice(stop_reason=stop)])))
    bodies.append(encode(chat(id="mixed", choices=[choice(stop_reason=7), choice(stop_reason="x", index=1)])))
    result = assert_matches_reference(bodies, "openai", backend)
    assert result.table.column("stop_reason").to_pylist() == [
        "151643" if i % 3 == 0 else ("</s>" if i % 3 == 1 else None) for i in range(300)
    ] + ["7"]
    # Both backends type such a leaf value by value (the native core per value on cpu, text leaves on gpu): not even
    # the body that mixes an int and a string stop_reason is left to the core.
    assert result.stats["core"] == 0
    assert result.stats["reads"] < 20


# -- what the cpu backend's structs decide by type, held to the exact path on every backend ----------------

TYPED_EDGES: list[tuple[str, bytes, str | None]] = [
    ("an escaped name", b'{"id":"a","mod\\u0065l":"m"}', None),
    ("a repeated name, the first of a wrong type", b'{"id":"a","created":"x","created":1}', None),
    ("a null choice", encode(chat(choices=[None])), None),
    ("a null choice after one", encode(chat(choices=[choice("x"), None])), None),
    ("two choices", encode(chat(choices=[choice("x"), choice("y", index=1, finish_reason="length")])), None),
    ("an integral float where an integer is read", encode(chat(usage={"prompt_tokens": 5.0})), None),
    ("an integer where a number is read", encode(chat(metrics={"tokens_per_second": 5})), None),
    ("-2**63 where an integer is read", encode(chat(usage={"prompt_tokens": -(2**63)})), None),
    ("2**64 in a field no column reads", b'{"id":"a","x":18446744073709551616}', None),
    ("error null", b'{"id":"a","error":null,"object":"chat.completion"}', None),
    ("2**63 where an integer is read", encode(chat(usage={"prompt_tokens": 2**63})), "out of range"),
    ("a stop_reason beyond 64 bits", encode(chat(choices=[choice(stop_reason=2**64)])), "out of range"),
    ("true where an integer is read", encode(chat(usage={"prompt_tokens": True})), "wrong type"),
    ("a choice that is a number", encode(chat(choices=[choice("x"), 5])), "wrong type"),
    ("a string where a list is walked", encode(chat(choices="x")), "wrong type"),
    ("an error object", b'{"error":{"message":"m","code":400}}', "error response"),
    ("an error string", b'{"error":"m"}', "error response"),
]


def test_typed_edges_match_the_exact_path(backend: str):
    bodies = [body for _, body, _ in TYPED_EDGES]
    result = assert_matches_reference(bodies, "openai", backend)
    errors = {e["line"]: e["reason"] for e in result.errors.to_pylist()}
    for line, (name, _, reason) in enumerate(TYPED_EDGES, start=1):
        if reason is None:
            assert line not in errors, name
        else:
            assert reason in errors[line], name
    rows = {r["line"]: r for r in result.table.to_pylist()}
    assert (rows[1]["model"], rows[2]["created"], rows[6]["prompt_tokens"]) == (
        "m",
        datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
        5,
    )
    assert (rows[3]["n_choices"], rows[3]["content"], rows[4]["choice_contents"]) == (1, None, ["x", None])
    assert rows[5]["choice_finish_reasons"] == ["stop", "length"]
    assert (rows[7]["tokens_per_second"], rows[8]["prompt_tokens"]) == (5.0, -(2**63))


def test_many_brackets_within_the_depth_stay_on_the_fast_path(backend: str):
    """Logprobs put hundreds of brackets in a body only a few levels deep: the depth check must not send such
    bodies (or such contents) to the core after libcudf."""
    logprobs = {"content": [{"token": "a", "logprob": -0.1, "top_logprobs": [{"token": "b"}]} for _ in range(80)]}
    content = json.dumps({"language": "py", "code_blocks": 1, "notes": [[i] for i in range(80)]})
    bodies = [encode(chat(id=f"c{i}", choices=[choice(content, logprobs=logprobs)])) for i in range(20)]
    result = assert_matches_reference(bodies, "coder", backend)
    assert result.table.column("code_blocks").to_pylist() == [1] * 20
    assert (result.stats["core"], result.stats["content_core"]) == (0, 0)


@pytest.mark.parametrize("list_type", [pa.list_, pa.large_list])
def test_list_offsets_rebuild_lists_with_nulls(list_type):
    """The helper the flatten and the GPU reader's re-typing rebuild lists with (also from large lists)."""
    from connector.parse.flatten import list_offsets

    lists = pa.array([[1, 2], None, [], [3]], list_type(pa.int64()))
    rebuilt = pa.ListArray.from_arrays(list_offsets(lists), lists.values.cast(pa.string()))
    assert rebuilt.to_pylist() == [["1", "2"], None, [], ["3"]]


@pytest.mark.parametrize("first_line", [-1, 2**63 - 1])
def test_lines_that_do_not_fit_an_int64_are_refused(first_line: int):
    """They wrapped around to negative numbers, silently (a hostile test)."""
    with pytest.raises(ValueError, match=rf"^first_line {first_line}: the lines of 2 bodies from it must fit"):
        parse_batch([b"{}", b"{}"], "openai", "cpu", first_line=first_line)
    last = parse_batch([b"{}", b"{}"], "openai", "cpu", first_line=2**63 - 2).table.column("line").to_pylist()
    assert last == [2**63 - 2, 2**63 - 1]
