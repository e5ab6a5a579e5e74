"""The GPU reader's host-side typing (`connector.parse.retype`), on arrays shaped like libcudf's output."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pytest

from connector.parse.reading import ReadFailed
from connector.parse.retype import retype
from connector.types.columns import INT_OR_STRING


def _leaf(tokens: list[str | None]) -> tuple[pa.Array, pa.Array]:
    """(values, quoted) of JSON leaf tokens as libcudf gives them for a string dtype."""
    values = [None if t is None else (json.loads(t) if t.startswith('"') else t) for t in tokens]
    return pa.array(values, pa.large_string()), pa.array(tokens, pa.large_string())


@pytest.mark.parametrize(
    "tokens,target,expected",
    [
        (["12", "-0", "9223372036854775807", None], pa.int64(), [12, 0, 2**63 - 1, None]),
        (["true", "false", None], pa.bool_(), [True, False, None]),
        (['"a\\"b"', '""', None], pa.string(), ['a"b', "", None]),
    ],
)
def test_leaves_typed_like_the_cpu_reader(tokens, target, expected):
    values, quoted = _leaf(tokens)
    assert retype(values, quoted, pa.field("x", target)).to_pylist() == expected


@pytest.mark.parametrize(
    "token", ["0.1", "1e-7", "2.2250738585072011e-308", "1.7976931348623157e308", "123456789012345678901234567890"]
)
def test_doubles_are_correctly_rounded(token: str):
    values, quoted = _leaf([token])
    (value,) = retype(values, quoted, pa.field("x", pa.float64())).to_pylist()
    assert value == float(token) and math.isfinite(value)


@pytest.mark.parametrize(
    "tokens,target,message",
    [
        (["18446744073709551616"], pa.int64(), "'x': "),  # libcudf would wrap it
        (['"12"'], pa.int64(), "'x': expected a number, got another JSON type"),
        (["5"], pa.string(), "'x': expected a string, got another JSON type"),
        (['{"a":1}'], pa.string(), "'x': expected a string, got another JSON type"),
        (["1"], pa.bool_(), "'x': expected true or false"),
        (['"true"'], pa.bool_(), "'x': expected true or false, got another JSON type"),
        (["1.5"], pa.int64(), "'x': "),
    ],
)
def test_values_of_another_json_type_fail_the_read(tokens, target, message):
    values, quoted = _leaf(tokens)
    with pytest.raises(ReadFailed, match="^" + message.replace("(", r"\(")):
        retype(values, quoted, pa.field("x", target))


def test_int_or_string_leaf_keeps_strings_and_writes_integers_as_pyarrow_does():
    values, quoted = _leaf(['"</s>"', "151643", "-0", None])
    field = pa.field("stop_reason", pa.string(), metadata=INT_OR_STRING)
    assert retype(values, quoted, field).to_pylist() == ["</s>", "151643", "0", None]
    values, quoted = _leaf(["1.5"])
    with pytest.raises(ReadFailed):
        retype(values, quoted, field)


def test_structs_by_name_lists_from_large_lists_and_nulls_under_null_parents():
    # libcudf's order of fields, large lists, and a child value left under a null parent.
    text = pa.struct([("b", pa.large_string()), ("a", pa.large_list(pa.large_string()))])
    values = pa.StructArray.from_arrays(
        [pa.array(["1", "junk"], pa.large_string()), pa.array([["x"], None], pa.large_list(pa.large_string()))],
        fields=list(text),
        mask=pa.array([False, True]),
    )
    quoted = pa.StructArray.from_arrays(
        [pa.array(["1", "junk"], pa.large_string()), pa.array([['"x"'], None], pa.large_list(pa.large_string()))],
        fields=list(text),
        mask=pa.array([False, True]),
    )
    target = pa.struct([("a", pa.list_(pa.string())), ("b", pa.int64()), ("c", pa.float64())])
    out = retype(values, quoted, pa.field("s", target))
    assert out.type == target
    assert out.to_pylist() == [{"a": ["x"], "b": 1, "c": None}, None]


def test_a_column_libcudf_left_untyped_is_all_null():
    out = retype(pa.nulls(2), pa.nulls(2), pa.field("x", pa.list_(pa.int64())))
    assert out.type == pa.list_(pa.int64()) and out.to_pylist() == [None, None]


def test_a_string_libcudf_could_not_decode_fails_the_read():
    # libcudf leaves a string with an escape it cannot decode (`\-`, `\u12`) null; the quoted read has it.
    values = pa.array([None, "x"], pa.large_string())
    quoted = pa.array(['"bad \\- escape"', '"x"'], pa.large_string())
    with pytest.raises(ReadFailed, match="^'s': a string libcudf could not decode$"):
        retype(values, quoted, pa.field("s", pa.string()))
    assert retype(pa.array([None, "x"]), pa.array([None, '"x"']), pa.field("s", pa.string())).to_pylist() == [None, "x"]


def test_one_read_takes_string_values_from_the_quoted_text():
    # libcudf decodes escapes with quotes kept too: the value is the quoted text without its quotes.
    quoted = pa.array(['"a"b"', '"\\u00e9"', "12", None, '""'], pa.large_string())
    assert retype(quoted, quoted, pa.field("s", pa.string(), metadata=INT_OR_STRING), unquote=True).to_pylist() == [
        'a"b',
        "\\u00e9",
        "12",
        None,
        "",
    ]
    with pytest.raises(ReadFailed, match="expected a string"):
        retype(quoted, quoted, pa.field("s", pa.string()), unquote=True)
