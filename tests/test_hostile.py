"""Hostile input: one JSON rule set on every backend, in bodies and in content; no body costs
more than its own row; extraction in linear time."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from connector.errors import ProfileError
from connector.parse import parse_batch
from connector.profiles import load_profile
from connector.strict import DEPTH_LIMIT, MAX_BODY_BYTES
from tests.bodies import chat, choice, encode
from tests.decode_support import PROFILES, assert_matches_reference, parse
from tests.oracle.quoting import quoted

GOOD = [encode(chat(id=f"g{i}")) for i in range(3)]
DEEP_MESSAGE = f"nested too deeply: more than {DEPTH_LIMIT} levels of arrays and objects"


def rejected_alone(bad: bytes, backend: str, profile: str = "openai") -> dict[str, Any]:
    """`bad` between good bodies: its error row (checked against the exact path); the others intact."""
    bodies = [*GOOD[:2], bad, GOOD[2]]
    result = assert_matches_reference(bodies, profile, backend)
    assert result.table.column("id").to_pylist() == ["g0", "g1", "g2"]
    (error,) = result.errors.to_pylist()
    assert error["line"] == 3 and error["body"] == bad
    return error


def nested(depth: int) -> str:
    return "[" * (depth - 1) + "{}" + "]" * (depth - 1)


# -- 1. a lone surrogate in an error response or in vl content: one error, never a crash of the batch -------

SURROGATE_ERRORS = [
    (b'{"error":{"message":"bad \\ud800 escape","code":500}}', "error.message"),
    (b'{"error":{"message":"m","type":"\\udc00","code":500}}', "error.type"),
    (b'{"error":{"message":"m","code":"\\ud800"}}', "error.code"),
    (b'{"object":"error","message":"bad \\ud800 escape","code":500}', "message"),
]


@pytest.mark.parametrize("bad,field", SURROGATE_ERRORS)
def test_lone_surrogate_in_an_error_response_is_one_error_row(backend: str, bad: bytes, field: str):
    error = rejected_alone(bad, backend)
    assert (error["reason"], error["field"]) == ("invalid string: unpaired surrogate escape", field)


def test_lone_surrogate_in_vl_boxes_is_a_content_error(backend: str):
    contents = [
        json.dumps({"caption": "c", "labels": ["a"], "boxes": [["\\ud800"]]}).replace("\\\\", "\\"),
        'A cat. <|ref|>cat<|/ref|><|det|>[["\\ud800"]]<|/det|>',
    ]
    bodies = [encode(chat(choices=[choice(c)])) for c in contents]
    result = assert_matches_reference(bodies, "vl", backend)
    rows = result.table.to_pylist()
    assert [r["boxes"] for r in rows] == [None, None]
    assert rows[0]["content_error"] == "property 'boxes[0][0]': invalid string: unpaired surrogate escape"
    assert rows[1]["content_error"] == "property 'boxes': not JSON: '[[\"\\\\ud800\"]]'"
    assert rows[1]["labels"] == ["cat"]


# -- 2. records joined for a reader cannot end inside one another --------------------------------------------

SPLICED = [b'{"id":"B","x":[{"id":"inner"}', b'{"id":"C"}]}', b'{"id":"D1"},{"id":"D2"}']


def test_bodies_that_continue_one_another_are_each_rejected(backend: str):
    result = assert_matches_reference([GOOD[0], *SPLICED, GOOD[1]], "openai", backend)
    assert result.table.column("id").to_pylist() == ["g0", "g1"]
    assert [e["reason"].split(":")[0] for e in result.errors.to_pylist()] == [
        "truncated JSON",
        "trailing data after the JSON value at char 10",
        "trailing data after the JSON value at char 11",
    ]


def test_contents_that_continue_one_another_get_content_errors(backend: str):
    """coder has no JSON-text property, so its JSON contents are read by the batch reader."""
    contents = ['{"language":"B","x":[{"code":"1"}', '{"code":"2"}]}', '{"language":"D1"},{"language":"D2"}']
    bodies = [encode(chat(choices=[choice(c)])) for c in ['{"language":"ok"}', *contents]]
    result = assert_matches_reference(bodies, "coder", backend)
    rows = result.table.to_pylist()
    assert [r["language"] for r in rows] == ["ok", None, None, None]
    assert [r["code"] for r in rows] == [None, None, None, None]
    assert [(r["content_error"] or "").split(":")[0] for r in rows] == [
        "",
        "truncated JSON",
        "trailing data after the JSON value at char 12",
        "trailing data after the JSON value at char 17",
    ]


# -- 3, 5, 6. what the contract rejects anywhere in a body, read by a column or not --------------------------

NOT_I_JSON = [
    (b'{"id":"a","x":"\xff"}', "invalid UTF-8: byte 0xff at offset 15"),
    (b'{"e\xc0\x80rror":{"message":"m"}}', "invalid UTF-8: byte 0xc0 at offset 3"),
    (b'{"id":"a","metrics":{"tokens_per_second":-Inf}}', "not JSON: Expecting value at char 41"),
    (b'{"id":"a","metrics":{"tokens_per_second":Infinity}}', "not JSON: Infinity (JSON has no NaN or Infinity)"),
    (b'{"id":"a","x":NaN}', "not JSON: NaN (JSON has no NaN or Infinity)"),
    (b'{"id":"a","x":[-Infinity]}', "not JSON: -Infinity (JSON has no NaN or Infinity)"),
    (b'{"id":"a","x":-NaN}', "not JSON: Expecting value at char 14"),
    (b'{"id":"a","x":"\\ud800"}', "invalid string: unpaired surrogate escape"),
    (b'{"id":"a","\\udfff":1}', "invalid string: unpaired surrogate escape"),
    (b'{"id":"a","metrics":{"tokens_per_second":' + b"9" * 400 + b"}}", "number out of range for a double: 9999"),
    (b'{"id":"a","x":' + b"1" * 400 + b"}", "number out of range for a double: 1111"),
    (b'{"id":"a","x":1e400}', "number out of range for a double: 1e400"),
    (b'{"id":"a","metrics":{"mean_itl_ms":-1.5e999}}', "number out of range for a double: -1.5e999"),
    (b'\xc2\xa0{"id":"a"}', "not JSON: Expecting value at char 0"),
    (b'{"id":"a"}\xe3\x80\x80', "trailing data after the JSON value at char 10"),
    (b'\x0c{"id":"a"}', "not JSON: Expecting value at char 0"),
    (b'{"id":"a"}\x0c', "trailing data after the JSON value at char 10"),
    (b'{"id":"a",\x0c"x":1}', "not JSON: Expecting property name enclosed in double quotes at char 10"),
    (b'\xef\xbb\xbf{"id":"a"}', "not JSON: a byte order mark (U+FEFF) at char 0"),
    (('{"id":"a","x":' + nested(DEPTH_LIMIT) + "}").encode(), DEEP_MESSAGE),
    (('{"id":"a","x":' + nested(990) + "}").encode(), DEEP_MESSAGE),
    (b'{"id":"a","x":' + b"[" * 100_000, DEEP_MESSAGE),
]


@pytest.mark.parametrize("bad,reason", NOT_I_JSON, ids=[r[1][:48] for r in NOT_I_JSON])
def test_rejected_wherever_it_is(backend: str, bad: bytes, reason: str):
    error = rejected_alone(bad, backend)
    assert error["reason"].startswith(reason), error["reason"]


ALLOWED = [
    b' \t\r\n{"id":"a"} \r\n\t ',
    ('{"id":"a","x":' + nested(DEPTH_LIMIT - 1) + "}").encode(),
    b'{"id":"a","x":"\\ud83d\\ude00 \\u00e9\\/","\\u00e9":[1e308,-1e-400,123456789012345678901234567890]}',
    b'{"id":"a","id":"b","x":{"k":1,"k":2}}',
    b'{"id":"a","x":"NaN Infinity -Inf \\\\ud800 [[[[[[[[[[[[[[[[[[[[[[[["}',
    b'{"id":"a","metrics":{"tokens_per_second":1.5E+2,"mean_itl_ms":-0.0}}',
]


@pytest.mark.parametrize("body", ALLOWED, ids=range(len(ALLOWED)))
def test_json_the_contract_allows_is_a_row(backend: str, body: bytes):
    result = assert_matches_reference([GOOD[0], body], "openai", backend)
    assert result.errors.num_rows == 0
    assert result.table.column("id").to_pylist() == ["g0", json.loads(body)["id"]]


def test_duplicate_names_last_one_wins(backend: str):
    result = parse([b'{"id":"a","id":"b","usage":{"prompt_tokens":1,"prompt_tokens":2}}'], "openai", backend)
    assert result.table.select(["id", "prompt_tokens"]).to_pylist() == [{"id": "b", "prompt_tokens": 2}]


@pytest.mark.parametrize("depth", [DEPTH_LIMIT - 1, 600])
def test_the_depth_limit_does_not_move_with_the_callers_stack(backend: str, depth: int):
    bodies = [('{"id":"a","x":' + nested(depth) + "}").encode(), GOOD[0]]

    def at_depth(frames: int) -> Any:
        return at_depth(frames - 1) if frames else parse_batch(bodies, "openai", backend)

    shallow = parse_batch(bodies, "openai", backend)
    deep = at_depth(sys.getrecursionlimit() - 150)
    assert deep.table.equals(shallow.table) and deep.errors.equals(shallow.errors)
    assert shallow.table.num_rows == (2 if depth < DEPTH_LIMIT else 1)


@pytest.mark.parametrize(
    "content,error",
    [
        ('{"score": Inf}', "not JSON: Expecting value at char 10"),
        ('{"score": NaN}', "not JSON: NaN (JSON has no NaN or Infinity)"),
        ('{"score": 1e999}', "number out of range for a double: 1e999"),
        ('{"risk_level": "\\ud800"}', "property 'risk_level': invalid string: unpaired surrogate escape"),
        ('{"detail": ' + nested(DEPTH_LIMIT) + "}", DEEP_MESSAGE),
        ('\u3000{"score": 1}', "not JSON: Expecting value at char 0"),
        ('{"score": 1}\x0c', "trailing data after the JSON value at char 12"),
        ('{"score": tr', "truncated JSON: input ends at char 12 (Expecting value)"),
        ('{"score": -', "truncated JSON: input ends at char 11 (Expecting value)"),
        ('{"score": 1.', "truncated JSON: input ends at char 12 (Expecting ',' delimiter)"),
    ],
)
def test_content_keeps_the_same_rules(backend: str, content: str, error: str):
    bodies = [encode(chat(choices=[choice(c)])) for c in [content, '{"score": 3}']]
    rows = assert_matches_reference(bodies, str(PROFILES / "risk.yaml"), backend).table.to_pylist()
    assert (rows[0]["score"], rows[0]["content_error"]) == (None, error)
    assert (rows[1]["score"], rows[1]["content_error"]) == (3, None)


@pytest.mark.parametrize(
    "content,error",
    [
        ('{"language": "go", "x": -Inf}', "not JSON: Expecting value at char 24"),
        ('{"language": "go", "x": NaN}', "not JSON: NaN (JSON has no NaN or Infinity)"),
        ('{"language": "go", "x": 1e400}', "number out of range for a double: 1e400"),
        ('{"language": "go", "x": ' + "5" * 400 + "}", "number out of range for a double: 5555"),
        ('{"language": "go", "x": "\\udc00"}', "property 'x': invalid string: unpaired surrogate escape"),
        ('{"language": "go", "x": ' + nested(200) + "}", DEEP_MESSAGE),
    ],
    ids=["-Inf", "NaN", "1e400", "400 digits", "surrogate", "200 deep"],
)
def test_content_the_batch_reader_would_take_keeps_the_rules(backend: str, content: str, error: str):
    """coder's JSON contents go to the batch reader (no JSON-text property): the rules hold there too."""
    bodies = [encode(chat(choices=[choice(c)])) for c in [content, '{"language": "go"}']]
    rows = assert_matches_reference(bodies, "coder", backend).table.to_pylist()
    assert rows[0]["language"] is None and rows[0]["content_error"].startswith(error), rows[0]["content_error"]
    assert (rows[1]["language"], rows[1]["content_error"]) == ("go", None)


def test_content_nested_to_the_limit_is_read(backend: str):
    content = '{"score": 1, "detail": {"d": ' + nested(DEPTH_LIMIT - 2) + "}}"
    rows = assert_matches_reference([encode(chat(choices=[choice(content)]))], str(PROFILES / "risk.yaml"), backend)
    row = rows.table.to_pylist()[0]
    assert (row["score"], row["content_error"]) == (1, None)
    assert row["detail"] == '{"d":' + nested(DEPTH_LIMIT - 2).replace(" ", "") + "}"


# -- a body cut inside a literal is truncated ----------------------------------------------


@pytest.mark.parametrize("cut", [b"tr", b"nu", b"fals", b"-", b"12.", b"1e", b"1E+", b'"\\u12'])
def test_cut_inside_a_literal_is_truncated_json(backend: str, cut: bytes):
    bad = b'{"id":"a","x":' + cut
    error = rejected_alone(bad, backend)
    assert error["reason"].startswith(f"truncated JSON: input ends at char {len(bad)} ("), error["reason"]


# -- 7. anything that is not a body is one error row ---------------------------------------------------------


def test_a_none_or_non_bytes_body_is_one_error_row(backend: str):
    result = parse([b'{"id":"a"}', None, 5, bytearray(b'{"id":"b"}'), '{"id":"c"}'], "openai", backend)  # type: ignore[list-item]
    assert result.table.select(["line", "id"]).to_pylist() == [
        {"line": 1, "id": "a"},
        {"line": 4, "id": "b"},
        {"line": 5, "id": "c"},
    ]
    assert result.errors.to_pylist() == [
        {"line": 2, "reason": "not a body: got NoneType (give bytes or str)", "field": None, "body": None},
        {"line": 3, "reason": "not a body: got int (give bytes or str)", "field": None, "body": None},
    ]


def test_a_body_over_the_size_limit_is_one_error_row_unread(backend: str):
    """docs/json.md: a body over MAX_BODY_BYTES is refused from its length; its error row carries no body."""
    over = b'{"id":"' + b"x" * (MAX_BODY_BYTES - 8) + b'"}'
    assert len(over) == MAX_BODY_BYTES + 1
    result = parse([GOOD[0], over, GOOD[1]], "openai", backend)
    assert result.table.column("id").to_pylist() == ["g0", "g1"]
    reason = f"body too large: over {MAX_BODY_BYTES} bytes"
    assert result.errors.to_pylist() == [{"line": 2, "reason": reason, "field": None, "body": None}]


# -- an integer beyond Python's int-string limit where a column reads it -------------------------------------


@pytest.mark.parametrize("where", ["created", "usage"])
def test_huge_integers_in_read_columns_are_error_rows(backend: str, where: str):
    digits = "7" * 5000
    body = encode(chat()).replace(b'"prompt_tokens": 21', b'"prompt_tokens": ' + digits.encode())
    if where == "created":
        body = encode(chat()).replace(b'"created": 1732950000', b'"created": ' + digits.encode())
    error = rejected_alone(body, backend)
    assert error["reason"] == "number out of range for a double: 77777777777777777777... (5000 characters)"


# -- 8. extraction: RE2, linear in the content --------------------------------------------------------------


def test_degenerate_model_output_is_extracted(backend: str):
    texts = {
        "coder": ["`" * 32_768, "```python\n" + "`" * 20_000],
        "vl": ["<|ref|>" * 4_500, "<|det|>" * 4_500 + "<|/det|>"],
    }
    coder = assert_matches_reference([encode(chat(choices=[choice(t)])) for t in texts["coder"]], "coder", backend)
    assert coder.table.select(["language", "code", "explanation", "code_blocks"]).to_pylist() == [
        {"language": None, "code": None, "explanation": "``", "code_blocks": 0},
        {"language": "python", "code": "", "explanation": "```python", "code_blocks": 1},
    ]
    vl = assert_matches_reference([encode(chat(choices=[choice(t)])) for t in texts["vl"]], "vl", backend)
    rows = vl.table.select(["caption", "labels", "boxes", "objects", "content_error"]).to_pylist()
    assert rows[0] == {"caption": None, "labels": [], "boxes": "[]", "objects": 0, "content_error": None}
    assert rows[1]["objects"] == 4_500 and rows[1]["boxes"] is None
    assert rows[1]["content_error"] == f"property 'boxes': not JSON: {('<|det|>' * 6)[:40]!r}"


def _profile(tmp_path: Path, pattern: str, extra: str = "") -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            name: p
            content:
              type: object
              properties:
                value:
                  type: string
                  x-extract: {{pattern: {json.dumps(pattern)}{extra}}}
            """
        )
    )
    return path


def test_a_catastrophic_user_pattern_stays_linear(tmp_path: Path):
    """`(a*)*b` backtracks 2^n times in Python's `re`: this subprocess would never finish before RE2 (the
    timeout only turns that hang into a failure; nothing here measures speed)."""
    profile = _profile(tmp_path, "(a*)*b")
    code = (
        "import sys; from connector.parse import parse_batch; from tests.bodies import chat, choice, encode\n"
        f"r = parse_batch([encode(chat(choices=[choice('a' * 64 + 'c')]))], {str(profile)!r}, 'cpu')\n"
        "print(r.table.column('value').to_pylist())"
    )
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root)
    assert done.stdout.strip() == "[None]", done.stderr


@pytest.mark.parametrize(
    "pattern,message",
    [
        ("(?<=x)y", "invalid perl operator: (?<="),
        (r"(a)\1", "invalid escape sequence: \\1"),
        ("(?=x)", "invalid perl operator: (?="),
    ],
)
def test_patterns_outside_re2_are_refused_at_load(tmp_path: Path, pattern: str, message: str):
    profile = _profile(tmp_path, pattern)
    with pytest.raises(ProfileError) as raised:
        load_profile(profile)
    text = str(raised.value)
    assert text.startswith(f"{profile}: key 'content.properties.value.x-extract.pattern': {pattern!r} is not an RE2")
    assert message in text


@pytest.mark.parametrize(
    "pattern",
    [
        r"id=(\d+)",
        r"(?:x|y)=(\w+)",
        r"\((?P<inner>[a-z]+)\)",
        r"[(](\w+)[)]",
        r"\Q(\E(\w+)",
        r"[]()](\w+)",
        r"(k)?v=(\w+)",
        r"v=\w+",
    ],
)
def test_first_match_over_the_column_is_the_first_match_of_re2(tmp_path: Path, backend: str, pattern: str):
    import re2

    texts = ["id=42 v=a (word) [x]", "nothing", "(k) y=zz id=7 v=b", "(unclosed v=c]d"]
    profile = str(_profile(tmp_path, pattern))
    result = parse([encode(chat(choices=[choice(t)])) for t in texts], profile, backend)
    compiled = re2.compile("(?s)" + pattern)
    expected = []
    for text in texts:
        found = compiled.search(text)
        expected.append(None if found is None else found.group(1 if compiled.groups else 0) or "")
    assert load_profile(profile).content_properties[0].extract.arrow_pattern is not None
    assert result.table.column("value").to_pylist() == expected


# -- 9. a user's text quoted in a reason: Python 3.11's repr() on every backend and every Python ------------

# Code points that Python 3.12 (Unicode 15.0) prints as they are and 3.11 (Unicode 14.0), the reference, escapes.
NEW_IN_UNICODE_15 = ["\U0001fae8", "\U00031350", "\U000323af"]


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="Python 3.11's repr() is the reference")
def test_quoted_is_the_repr_of_python_3_11():
    for start in range(0, 0x110000, 200):  # every code point, surrogates included
        text = "".join(map(chr, range(start, min(start + 200, 0x110000))))
        assert quoted(text) == repr(text), hex(start)
    for text in ["", "a", "it's", 'say "x"', 'it\'s "x"', "é'", 'é"', "é'\"", "\\é\x7f\x00\t\n\r\x85\xa0\u2028"]:
        assert quoted(text) == repr(text)


@pytest.mark.parametrize("char", NEW_IN_UNICODE_15)
def test_quoted_escapes_what_python_3_11_escapes_on_every_python(char: str):
    escape = f"\\U{ord(char):08x}"
    assert quoted(f"a{char}") == f"'a{escape}'"
    assert quoted(f"it's{char}") == f'"it\'s{escape}"'


@pytest.mark.parametrize("ensure_ascii", [False, True])
def test_an_iso_timestamp_reason_is_the_same_on_every_python(backend: str, ensure_ascii: bool):
    good = encode(chat(created="2024-11-30T07:00:00Z"))
    bad = encode(chat(created="2024-01-01\U0001fae8"), ensure_ascii=ensure_ascii)
    result = assert_matches_reference([good, bad], str(PROFILES / "gateway_iso.yaml"), backend)
    assert result.table.num_rows == 1
    assert [(e["reason"], e["field"]) for e in result.errors.to_pylist()] == [
        ("not an ISO-8601 timestamp: '2024-01-01\\U0001fae8'", "created")
    ]


def test_an_extracted_text_in_a_content_error_is_the_same_on_every_python(tmp_path: Path, backend: str):
    profile = tmp_path / "p.yaml"
    profile.write_text(
        textwrap.dedent(
            """\
            name: p
            content:
              type: object
              properties:
                value:
                  type: integer
                  x-extract: {pattern: "n=(\\\\S+)"}
            """
        )
    )
    result = assert_matches_reference([encode(chat(choices=[choice("n=7\U0001fae8")]))], str(profile), backend)
    assert result.table.column("content_error").to_pylist() == [
        "property 'value': wrong type: expected integer, got '7\\U0001fae8'"
    ]
    vl = assert_matches_reference([encode(chat(choices=[choice("<|det|>[\U00031350]<|/det|>")]))], "vl", backend)
    assert vl.table.column("content_error").to_pylist() == ["property 'boxes': not JSON: '[\\U00031350]'"]
