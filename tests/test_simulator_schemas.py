"""The simulator keeps to every answer schema the planner sends, and its answer faults break it on purpose.

Random nested schemas of the forms a model's OUTPUT columns become (one per Flink type: integers in their
type's range, DECIMAL(p, s) bounds, strings bounded by a pattern, date and time patterns, arrays, maps, rows,
nullable fields, descriptions) are answered by `make_body` and by a running simulator over HTTP, and every
answer is checked with jsonschema (Draft 2020-12, formats and patterns), read with the project's strict JSON
rules, and held to what the pattern cannot say (real calendar dates, a DECIMAL's fraction digits).
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from decimal import Decimal
from http.client import HTTPConnection
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.simulator import cli as sim_cli
from connector.simulator.answers import BREAK_WAYS, break_answer, pattern_string, value_for
from connector.simulator.responses import CHARS_PER_TOKEN, BodyOptions, make_body, request_rng
from connector.simulator.testing import RunningSimulator, serve_simulator
from connector.strict import loads as strict_loads

# --- the forms (as the planner writes them) ---

INT_RANGES = {
    "TINYINT": (-128, 127),
    "SMALLINT": (-32768, 32767),
    "INT": (-(2**31), 2**31 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
}
DATE = "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
CLOCK = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"


def fraction(p: int) -> str:
    return f"(\\.[0-9]{{1,{p}}})?" if p else ""


def decimal_schema(p: int, s: int) -> dict[str, Any]:
    bound = Decimal(10) ** (p - s) - Decimal(10) ** -s
    x: int | float = int(bound) if s == 0 else float(bound)
    return {"type": "number", "minimum": -x, "maximum": x, "x-decimal": [p, s]}


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
leaves = st.one_of(
    st.just({"type": "boolean"}),
    st.sampled_from(sorted(INT_RANGES.values())).map(lambda r: {"type": "integer", "minimum": r[0], "maximum": r[1]}),
    st.just({"type": "number"}),
    st.integers(1, 38).flatmap(lambda p: st.integers(0, p).map(lambda s: decimal_schema(p, s))),
    st.integers(1, 40).map(lambda n: {"type": "string", "pattern": f"^[^\\u0000-\\u001f]{{0,{n}}}$"}),
    st.just({"type": "string", "pattern": "^[^\\u0000-\\u001f]*$"}),
    st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=5, unique=True).map(
        lambda values: {"type": "string", "enum": values}
    ),
    st.just({"type": "string", "pattern": f"^{DATE}$"}),
    st.integers(0, 9).map(lambda p: {"type": "string", "pattern": f"^{CLOCK}{fraction(p)}$"}),
    st.integers(0, 9).map(lambda p: {"type": "string", "pattern": f"^{DATE}T{CLOCK}{fraction(p)}$"}),
    st.integers(0, 9).map(lambda p: {"type": "string", "pattern": f"^{DATE}T{CLOCK}{fraction(p)}Z$"}),
)


def _array(items: dict[str, Any], bounds: tuple[int | None, int | None]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array", "items": items}
    lo, hi = bounds
    if lo is not None:
        schema["minItems"] = lo
    if hi is not None:
        schema["maxItems"] = max(hi, lo or 0)
    return schema


def _row(fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": fields, "required": list(fields), "additionalProperties": False}


def _wrapped(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    bounds = st.tuples(st.none() | st.integers(0, 3), st.none() | st.integers(0, 4))
    return st.one_of(
        st.tuples(children, bounds).map(lambda t: _array(*t)),
        children.map(lambda c: {"type": "object", "additionalProperties": c}),
        st.dictionaries(names, children, min_size=1, max_size=4).map(_row),
        children.map(lambda c: {"anyOf": [c, {"type": "null"}]}),
        st.tuples(children, st.text(max_size=20)).map(lambda t: {**t[0], "description": t[1]}),
    )


fields = st.recursive(leaves, _wrapped, max_leaves=10)
answer_schemas = st.dictionaries(names, fields, min_size=1, max_size=6).map(_row)


# --- checks ---


def _validator(schema: Mapping[str, Any]) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def _hold_to_types(schema: Mapping[str, Any], value: Any) -> None:
    """What a pattern or a bound cannot say: dates are real, a DECIMAL(p, s) number has at most s fraction
    digits and fits it exactly, integers are exact (read as Decimal, never through a float)."""
    if value is None:
        return
    if "anyOf" in schema:
        branch = next(b for b in schema["anyOf"] if b.get("type") != "null")
        _hold_to_types(branch, value)
        return
    kind = schema.get("type")
    if kind == "object":
        for name, item in value.items():
            sub = schema.get("properties", {}).get(name, schema.get("additionalProperties"))
            _hold_to_types(sub, item)
    elif kind == "array":
        for item in value:
            _hold_to_types(schema["items"], item)
    elif kind == "string" and "pattern" in schema and re.match(r"\^\[0-9\]\{4\}", schema["pattern"]):
        datetime.date.fromisoformat(value[:10])  # a real calendar date
        if "T" in value:
            datetime.datetime.fromisoformat(value[:19])
    elif "x-decimal" in schema:
        p, s = schema["x-decimal"]
        assert isinstance(value, Decimal | int), value
        digits = Decimal(value).as_tuple()
        assert -int(digits.exponent) <= s, (value, p, s)
        assert abs(Decimal(value)) <= Decimal(10) ** (p - s) - Decimal(10) ** -s, (value, p, s)


def check_answer(schema: Mapping[str, Any], content: str) -> Any:
    strict_loads(content)  # the project's JSON rules (no raw control characters, no NaN, valid escapes)
    value = json.loads(content)
    _validator(schema).validate(value)
    _hold_to_types(schema, json.loads(content, parse_float=Decimal))
    return value


def chat(schema: Mapping[str, Any], form: str = "response_format", **extra: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"messages": [{"role": "user", "content": "classify this review"}], **extra}
    if form == "response_format":
        request["response_format"] = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    elif form == "structured_outputs":
        request["structured_outputs"] = {"json": schema}
    else:
        request["structured_outputs"] = {"json": json.dumps(schema), "disable_any_whitespace": True}
    return request


# --- generation ---


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    schema=answer_schemas,
    seed=st.integers(0, 2**32),
    form=st.sampled_from(["response_format", "structured_outputs", "json-text"]),
)
def test_every_form_is_kept(schema: dict[str, Any], seed: int, form: str) -> None:
    body = make_body(random.Random(seed), "openai", chat(schema, form, n=3))
    for choice in body["choices"]:
        assert choice["finish_reason"] == "stop"
        check_answer(schema, choice["message"]["content"])


@settings(max_examples=200, deadline=None)
@given(schema=answer_schemas, seed=st.integers(0, 2**32))
def test_an_ignored_schema_is_broken(schema: dict[str, Any], seed: int) -> None:
    rng = random.Random(seed)
    way, broken = break_answer(rng, schema, value_for(rng, schema))
    assert way in BREAK_WAYS
    assert not _validator(schema).is_valid(json.loads(json.dumps(broken)))


def test_the_forms_hit_their_edges() -> None:
    # Over many draws, integers reach their type's bounds, bounded strings their length, nullable fields null.
    rng = random.Random(5)
    bigint = {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1}
    ints = {value_for(rng, bigint) for _ in range(300)}
    assert {-(2**63), 2**63 - 1} <= ints
    assert any(2**53 < abs(i) < 2**63 - 1 for i in ints)  # beyond a double's exact integers
    varchar = {"type": "string", "pattern": "^[^\\u0000-\\u001f]{0,8}$"}
    assert {len(value_for(rng, varchar)) for _ in range(300)} == set(range(9))
    nullable = {"anyOf": [{"type": "boolean"}, {"type": "null"}]}
    assert {value_for(rng, nullable) for _ in range(100)} == {True, False, None}
    decimal = decimal_schema(5, 2)
    assert {999.99, -999.99} <= {value_for(rng, decimal) for _ in range(300)}


@pytest.mark.parametrize(
    "pattern",
    [
        "^[a-z]{2,3}-[0-9]+$",
        "^(?:red|green|blue)$",
        "^\\d{3}-\\d{4}$",
        "^[A-Z][a-z]*( [A-Z][a-z]*)?$",
        '^[^\\u0000-\\u001f"\\\\]{1,5}$',
        "^[\\w.]+@[a-z]+\\.(com|org)$",
        "^x?y*z+$",
        "ab[cd]",
        "^\\u00e9{2}.$",
        f"^{DATE}$",
    ],
)
def test_patterns_give_matching_strings(pattern: str) -> None:
    rng = random.Random(1)
    for _ in range(50):
        text = pattern_string(rng, pattern)
        assert text is not None and re.search(pattern, text), (pattern, text)


def test_dates_are_real_calendar_dates() -> None:
    rng = random.Random(2)
    days = set()
    for p in (f"^{DATE}$", f"^{DATE}T{CLOCK}{fraction(3)}Z$", "^[0-9]{4}-02-(2[89]|30)$"):
        for _ in range(400):
            text = pattern_string(rng, p)
            assert text is not None
            days.add(datetime.date.fromisoformat(text[:10]))
    assert any(d.month == 2 and d.day == 29 for d in days)


def test_a_pattern_it_cannot_write_for_gives_none() -> None:
    assert pattern_string(random.Random(0), "^(?=a)a$") is None
    assert pattern_string(random.Random(0), "^(a)\\1$") is None


@settings(max_examples=60, deadline=None)
@given(schema=answer_schemas, seed=st.integers(0, 2**32), max_tokens=st.integers(1, 12))
def test_max_tokens_cuts_a_schema_answer(schema: dict[str, Any], seed: int, max_tokens: int) -> None:
    whole = make_body(random.Random(seed), "openai", chat(schema))["choices"][0]["message"]["content"]
    body = make_body(random.Random(seed), "openai", chat(schema, max_tokens=max_tokens))
    choice = body["choices"][0]
    limit = max_tokens * CHARS_PER_TOKEN
    assert choice["message"]["content"] == whole[:limit]
    if len(whole) > limit:
        assert choice["finish_reason"] == "length"
        assert body["usage"]["completion_tokens"] == max_tokens
    else:
        assert choice["finish_reason"] == "stop"


# --- what vLLM 0.32 reads ---

REVIEW = {
    "type": "object",
    "properties": {
        "sentiment": {"type": "string", "pattern": "^[^\\u0000-\\u001f]{0,8}$", "description": "positive or not"},
        "score": {"type": "integer", "minimum": -2147483648, "maximum": 2147483647},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "pattern": "^[^\\u0000-\\u001f]{0,6}$"}, "maxItems": 3},
        "note": {"anyOf": [{"type": "string", "pattern": "^[^\\u0000-\\u001f]*$"}, {"type": "null"}]},
    },
    "required": ["sentiment", "score", "ok", "tags", "note"],
    "additionalProperties": False,
}


def test_structured_outputs_choice_and_regex() -> None:
    base = {"messages": [{"role": "user", "content": "pick"}]}
    for seed in range(20):
        rng = request_rng(seed, base)
        choice = {**base, "structured_outputs": {"choice": ["yes", "no"]}}
        assert make_body(rng, "openai", choice)["choices"][0]["message"]["content"] in ("yes", "no")
        regex = {**base, "structured_outputs": {"regex": "[A-Z]{3}-[0-9]{2}"}}
        assert re.fullmatch("[A-Z]{3}-[0-9]{2}", make_body(rng, "openai", regex)["choices"][0]["message"]["content"])


def test_response_format_wins_over_structured_outputs() -> None:
    # vLLM 0.32 (structured_outputs_from_response_format): response_format's constraint replaces the other.
    request = {**chat(REVIEW), "structured_outputs": {"choice": ["never"]}}
    for seed in range(10):
        check_answer(REVIEW, make_body(random.Random(seed), "openai", request)["choices"][0]["message"]["content"])


def test_guided_json_is_ignored_from_vllm_0_12() -> None:
    request = {"messages": [{"role": "user", "content": "classify"}], "guided_json": REVIEW}
    for seed in range(10):
        free = make_body(random.Random(seed), "openai", request)["choices"][0]["message"]["content"]
        with pytest.raises(json.JSONDecodeError):
            json.loads(free)  # vLLM 0.32 ignores the removed field: unconstrained text
        old = BodyOptions(guided_fields=True)
        check_answer(REVIEW, make_body(random.Random(seed), "openai", request, old)["choices"][0]["message"]["content"])


def test_disable_any_whitespace_gives_compact_json() -> None:
    for seed in range(40):
        content = make_body(random.Random(seed), "openai", chat(REVIEW, "json-text"))["choices"][0]["message"]
        assert "\n" not in content["content"] and "\t" not in content["content"]


# --- over HTTP ---


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with serve_simulator(seed=11, created=1_760_000_123) as running:
        yield running


def post(url: str, request: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> tuple[int, Any]:
    parts = urllib.parse.urlsplit(url)
    conn = HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        body = json.dumps(request).encode()
        conn.request("POST", "/v1/chat/completions", body, {"content-type": "application/json", **(headers or {})})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=answer_schemas, form=st.sampled_from(["response_format", "structured_outputs", "json-text"]))
def test_every_form_is_kept_over_http(sim: RunningSimulator, schema: dict[str, Any], form: str) -> None:
    status, body = post(sim.url, chat(schema, form, n=2))
    assert status == 200
    for choice in body["choices"]:
        check_answer(schema, choice["message"]["content"])


def test_guided_json_over_http_by_version() -> None:
    request = {"messages": [{"role": "user", "content": "classify"}], "guided_json": REVIEW}
    with serve_simulator(version="0.11.0") as old, serve_simulator() as new:
        check_answer(REVIEW, post(old.url, request)[1]["choices"][0]["message"]["content"])
        with pytest.raises(json.JSONDecodeError):
            json.loads(post(new.url, request)[1]["choices"][0]["message"]["content"])


def test_refusal_fault(sim: RunningSimulator) -> None:
    status, body = post(sim.url, chat(REVIEW, n=2), {"x-dspark-fault": "refusal"})
    assert status == 200
    for choice in body["choices"]:
        message = choice["message"]
        assert message["content"] is None
        assert isinstance(message["refusal"], str) and message["refusal"].endswith(".")
        assert choice["finish_reason"] == "stop"
    refusals = [c["message"]["refusal"] for c in body["choices"]]
    assert body["usage"]["completion_tokens"] == sum(-(-len(r) // CHARS_PER_TOKEN) for r in refusals)
    status, plain = post(sim.url, chat(REVIEW))
    assert plain["choices"][0]["message"]["refusal"] is None
    check_answer(REVIEW, plain["choices"][0]["message"]["content"])


def test_refusal_fault_at_a_rate() -> None:
    with serve_simulator(seed=4, faults={"refusal": 0.5}) as running:
        bodies = [post(running.url, chat(REVIEW, seed=i))[1] for i in range(40)]
        refused = [b for b in bodies if b["choices"][0]["message"]["refusal"] is not None]
        assert 8 < len(refused) < 32
        assert running.stats()["fault refusal"] == len(refused)
        for b in bodies:
            if b["choices"][0]["message"]["refusal"] is None:
                check_answer(REVIEW, b["choices"][0]["message"]["content"])


def _way(schema: Mapping[str, Any], value: Any) -> str:
    error = jsonschema.exceptions.best_match(_validator(schema).iter_errors(value))
    assert error is not None, value
    ways = {"required": "missing", "type": "wrong-type", "anyOf": "wrong-type", "additionalProperties": "extra"}
    return {**ways, "pattern": "too-long"}[
        error.validator  # type: ignore[index]
    ]


def test_ignore_schema_fault_breaks_the_schema_every_way(sim: RunningSimulator) -> None:
    ways = set()
    for i in range(40):
        request = chat(REVIEW, seed=i)
        status, body = post(sim.url, request, {"x-dspark-fault": "ignore-schema"})
        assert status == 200 and body["choices"][0]["finish_reason"] == "stop"
        value = json.loads(body["choices"][0]["message"]["content"])
        ways.add(_way(REVIEW, value))
        assert post(sim.url, request, {"x-dspark-fault": "ignore-schema"})[1] == body  # drawn from the seed
    assert ways == set(BREAK_WAYS)


def test_ignore_schema_without_a_schema_is_free_text(sim: RunningSimulator) -> None:
    plain = {"messages": [{"role": "user", "content": "hello"}]}
    status, body = post(sim.url, plain, {"x-dspark-fault": "ignore-schema"})
    assert status == 200 and isinstance(body["choices"][0]["message"]["content"], str)
    choice = {**plain, "structured_outputs": {"choice": ["yes", "no"]}}
    assert post(sim.url, choice, {"x-dspark-fault": "ignore-schema"})[1]["choices"][0]["message"]["content"] not in (
        "yes",
        "no",
    )


def test_max_tokens_over_http(sim: RunningSimulator) -> None:
    status, body = post(sim.url, chat(REVIEW, max_tokens=3))
    choice = body["choices"][0]
    assert (choice["finish_reason"], len(choice["message"]["content"])) == ("length", 12)
    assert body["usage"]["completion_tokens"] == 3


def test_help_names_the_answer_faults() -> None:
    parser = argparse.ArgumentParser()
    sim_cli.add_arguments(parser)
    text = " ".join(parser.format_help().split())
    assert "refusal (chat choices with message.refusal set and content null" in text
    assert "ignore-schema (JSON that breaks the request's schema" in text


def test_answer_faults_through_the_command_line() -> None:
    # A simulator in its own process, configured by `dspark-vllm simulate` arguments.
    with serve_simulator(mode="process", seed=2, faults={"ignore-schema": 1.0}) as running:
        for i in range(3):
            status, body = post(running.url, chat(REVIEW, seed=i))
            assert status == 200
            assert not _validator(REVIEW).is_valid(json.loads(body["choices"][0]["message"]["content"]))
        assert running.stats()["fault ignore-schema"] == 3
