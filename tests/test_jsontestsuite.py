"""JSONTestSuite's `test_parsing` files (github.com/nst/JSONTestSuite, MIT) against the JSON rule set of
`connector.strict`: as whole bodies, as `content`, and spliced as a value into a valid vLLM body.

y_ files are JSON and must be accepted, n_ files are not and must be rejected, i_ files (implementation
defined) are decided by our I-JSON rules, written down in `I_VERDICTS`. Every backend gives the same rows
and the same error rows (reason included). The files are read where the project's shared data is
(`DSPARK_JSONTESTSUITE`, else `shared/data/JSONTestSuite` beside the checkout or one of its parents).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.decode_support import FILES, PROFILES, SUITE, WAYS, parse

pytestmark = pytest.mark.skipif(
    not FILES, reason="JSONTestSuite not found: set DSPARK_JSONTESTSUITE to its folder (with test_parsing/)"
)

# Our decisions on the implementation-defined files (README "Every body accounted for").
I_VERDICTS = {
    "i_number_double_huge_neg_exp.json": "accept",  # 123.456e-789 rounds to 0
    "i_number_huge_exp.json": "reject",  # beyond a double
    "i_number_neg_int_huge_exp.json": "reject",
    "i_number_pos_double_huge_exp.json": "reject",
    "i_number_real_neg_overflow.json": "reject",
    "i_number_real_pos_overflow.json": "reject",
    "i_number_real_underflow.json": "accept",
    "i_number_too_big_neg_int.json": "accept",  # within a double's range (precision is a double's)
    "i_number_too_big_pos_int.json": "accept",
    "i_number_very_big_negative_int.json": "accept",
    "i_object_key_lone_2nd_surrogate.json": "reject",  # unpaired surrogate
    "i_string_1st_surrogate_but_2nd_missing.json": "reject",
    "i_string_1st_valid_surrogate_2nd_invalid.json": "reject",
    "i_string_UTF-16LE_with_BOM.json": "reject",  # not UTF-8
    "i_string_UTF-8_invalid_sequence.json": "reject",
    "i_string_UTF8_surrogate_U+D800.json": "reject",
    "i_string_incomplete_surrogate_and_escape_valid.json": "reject",
    "i_string_incomplete_surrogate_pair.json": "reject",
    "i_string_incomplete_surrogates_escape_valid.json": "reject",
    "i_string_invalid_lonely_surrogate.json": "reject",
    "i_string_invalid_surrogate.json": "reject",
    "i_string_invalid_utf-8.json": "reject",
    "i_string_inverted_surrogates_U+1D11E.json": "reject",
    "i_string_iso_latin_1.json": "reject",
    "i_string_lone_second_surrogate.json": "reject",
    "i_string_lone_utf8_continuation_byte.json": "reject",
    "i_string_not_in_unicode_range.json": "reject",
    "i_string_overlong_sequence_2_bytes.json": "reject",
    "i_string_overlong_sequence_6_bytes.json": "reject",
    "i_string_overlong_sequence_6_bytes_null.json": "reject",
    "i_string_truncated-utf-8.json": "reject",
    "i_string_utf16BE_no_BOM.json": "reject",
    "i_string_utf16LE_no_BOM.json": "reject",
    "i_structure_500_nested_arrays.json": "reject",  # deeper than 64
    "i_structure_UTF-8_BOM_empty_object.json": "reject",  # no byte order mark
}
# Reasons that say the text is not JSON under the rules (anything else is about a value: its type or range).
JSON_REASONS = (
    "not JSON",
    "truncated JSON",
    "trailing data",
    "empty",
    "invalid UTF-8",
    "invalid string",
    "number out of range for a double",
    "nested too deeply",
)


def expected(path: Path) -> str:
    if path.name.startswith("i_"):
        return I_VERDICTS[path.name]
    return "accept" if path.name.startswith("y_") else "reject"


def verdict(reason: str | None) -> str:
    if reason is None:
        return "accept"
    if reason.startswith("property '"):
        reason = reason.split("': ", 1)[1]
    return "reject" if reason.startswith(JSON_REASONS) else "accept"


def results(way: str, profile: str, backend: str) -> tuple[Any, dict[str, str]]:
    bodies = [WAYS[way](path.read_bytes()) for path in FILES]
    result = parse(bodies, profile, backend)  # asserts rows + errors == bodies, each once
    verdicts: dict[str, str] = {}
    rows = {r["line"]: r for r in result.table.to_pylist()}
    errors = {e["line"]: e for e in result.errors.to_pylist()}
    for line, path in enumerate(FILES, start=1):
        if line in errors:
            error = errors[line]
            verdicts[path.name] = verdict(error["reason"])
        elif way == "content":
            verdicts[path.name] = verdict(rows[line]["content_error"])
        else:
            verdicts[path.name] = "accept"
    return result, verdicts


CASES = [("whole", "openai"), ("content", str(PROFILES / "risk.yaml")), ("content", str(PROFILES / "flat.yaml"))]
CASES += [("unread field", "openai"), ("read field", "openai")]


@pytest.mark.parametrize("way,profile", CASES, ids=[f"{w}-{Path(p).stem}" for w, p in CASES])
def test_verdicts_follow_the_contract(backend: str, way: str, profile: str):
    _, verdicts = results(way, profile, backend)
    wrong = {name: got for name, got in verdicts.items() if got != expected(SUITE / "test_parsing" / name)}
    assert wrong == {}
    assert len(verdicts) == len(FILES) == 318


@pytest.mark.parametrize("way,profile", CASES, ids=[f"{w}-{Path(p).stem}" for w, p in CASES])
def test_every_backend_gives_the_same_rows_and_reasons(gpu_backend: str, way: str, profile: str):
    cpu, _ = results(way, profile, "cpu")
    gpu, _ = results(way, profile, gpu_backend)
    assert gpu.table.equals(cpu.table)
    assert gpu.errors.equals(cpu.errors)


def test_every_i_file_is_decided():
    assert sorted(p.name for p in FILES if p.name.startswith("i_")) == sorted(I_VERDICTS)


def test_reasons_are_json_text():
    """Reasons are Arrow strings: what a file held that is not UTF-8 never reaches them, and a body that is
    not UTF-8 is said to be so at its first bad byte."""
    result, _ = results("whole", "openai", "cpu")
    reasons = result.errors.column("reason")
    reasons.validate(full=True)
    texts = reasons.to_pylist()
    for text in texts:
        text.encode("utf-8")  # strict: no surrogate smuggled in from the bytes of a file
    assert json.loads(json.dumps(texts, ensure_ascii=False)) == texts
    not_utf8 = 0
    for row in result.errors.to_pylist():
        try:
            row["body"].decode("utf-8")
        except UnicodeDecodeError as exc:
            not_utf8 += 1
            assert row["reason"] == f"invalid UTF-8: byte 0x{row['body'][exc.start]:02x} at offset {exc.start}"
    assert not_utf8 >= 10  # the suite's files in Latin-1, UTF-16, overlong or cut sequences
