"""Answer fields planned: a declared column's Flink type -> its JSON Schema, the options that shape it, what is
refused in one line, and what the request carries (connector.types.answer, the planner's model and table plans).
No JVM: the types are given as the jar's PythonPlanner describes them."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from connector.errors import DsparkError
from connector.plan.format import format_plan
from connector.plan.model import model_plan
from connector.plan.table import table_plan as plan
from connector.types.answer import AnswerField, answer_schema, field_schema


def t(sql: str, root: str, **more):
    return {"sql": sql, "root": root, "nullable": True, **more}


def varchar(n: int):
    return t("STRING" if n == 2147483647 else f"VARCHAR({n})", "VARCHAR", length=n)


INT = t("INT", "INTEGER")
TYPES = {
    "b": t("BOOLEAN", "BOOLEAN"),
    "t": t("TINYINT", "TINYINT"),
    "si": t("SMALLINT", "SMALLINT"),
    "i": INT,
    "bi": t("BIGINT", "BIGINT"),
    "f": t("FLOAT", "FLOAT"),
    "d": t("DOUBLE", "DOUBLE"),
    "dec": t("DECIMAL(6, 2)", "DECIMAL", precision=6, scale=2),
    "c": t("CHAR(3)", "CHAR", length=3),
    "v": varchar(5),
    "s": varchar(2147483647),
    "dt": t("DATE", "DATE"),
    "tm": t("TIME(0)", "TIME_WITHOUT_TIME_ZONE", precision=0),
    "ts": t("TIMESTAMP(3)", "TIMESTAMP_WITHOUT_TIME_ZONE", precision=3),
    "ltz": t("TIMESTAMP_LTZ(3)", "TIMESTAMP_WITH_LOCAL_TIME_ZONE", precision=3),
    "arr": t("ARRAY<INT>", "ARRAY", element=INT),
    "m": t("MAP<STRING, INT>", "MAP", key=varchar(2147483647), value=INT),
    "r": t("ROW<`x` INT, `y` ARRAY<STRING>>", "ROW", fields=[
        {"name": "x", "type": INT, "description": "the x"},
        {"name": "y", "type": t("ARRAY<STRING>", "ARRAY", element=varchar(2147483647))},
    ]),
}  # fmt: skip


def test_every_type_has_its_json_schema():
    fields = [AnswerField(name, ftype, "a comment" if name == "b" else None) for name, ftype in TYPES.items()]
    schema = answer_schema(fields, {"answer.v.enum": "yes;no", "answer.arr.max-items": "3", "answer.nullable": "s"})
    jsonschema.Draft202012Validator.check_schema(schema)
    props = schema["properties"]
    assert schema["required"] == list(TYPES) and schema["additionalProperties"] is False
    assert props["b"] == {"type": "boolean", "description": "a comment"}
    assert props["t"] == {"type": "integer", "minimum": -128, "maximum": 127}
    assert props["bi"] == {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1}
    assert props["dec"] == {"type": "number", "minimum": -9999.99, "maximum": 9999.99}
    assert props["c"] == {"type": "string", "pattern": "^[^\\u0000-\\u001f]{0,3}$"}
    assert props["v"] == {"type": "string", "enum": ["yes", "no"]}
    assert props["s"] == {"anyOf": [{"type": "string", "pattern": "^[^\\u0000-\\u001f]*$"}, {"type": "null"}]}
    assert props["arr"] == {"type": "array", "items": props["i"], "maxItems": 3}
    assert props["m"] == {"type": "object", "additionalProperties": props["i"]}
    assert props["r"]["required"] == ["x", "y"] and props["r"]["additionalProperties"] is False
    assert props["r"]["properties"]["x"]["description"] == "the x"
    check = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    good = {
        "b": True, "t": -128, "si": 3, "i": 7, "bi": 2**62, "f": 1.5, "d": -2.0, "dec": 12.5, "c": "abc",
        "v": "no", "s": None, "dt": "2026-02-28", "tm": "23:59:59", "ts": "2026-12-07T01:02:03.456",
        "ltz": "2026-12-07T01:02:03Z", "arr": [1, 2], "m": {"a": 1}, "r": {"x": 1, "y": ["z"]},
    }  # fmt: skip
    assert list(check.iter_errors(good)) == []
    for bad in ({"t": 128}, {"c": "abcd"}, {"c": "a\nb"}, {"v": "maybe"}, {"dt": "2026-13-01"}, {"tm": "24:00:00"},
                {"ts": "2026-12-07 01:02:03"}, {"ltz": "2026-12-07T01:02:03"}, {"arr": [1, 2, 3, 4]},
                {"r": {"x": 1}}, {"m": {"a": "x"}}, {"b": None}):  # fmt: skip
        assert list(check.iter_errors({**good, **bad})), bad


@pytest.mark.parametrize(
    ("ftype", "message"),
    [
        (t("BYTES", "VARBINARY"), "Column 'x' is BYTES, which has no JSON form for the model to write: declare one"),
        (t("MAP<INT, INT>", "MAP", key=INT, value=INT), "a JSON object's keys are strings, declare MAP<STRING, ...>"),
        (t("ARRAY<BYTES>", "ARRAY", element=t("BYTES", "VARBINARY")), "Column 'x[]' is BYTES"),
        (t("INTERVAL SECOND(3)", "INTERVAL_DAY_TIME"), "has no JSON form"),
        # more digits than the double an answer's number is read as holds: 123456789012345678.91 would be typed
        # ...680.00, and 999999999999999999 (within the schema's maximum) an error row 'out of range'
        (t("DECIMAL(20, 2)", "DECIMAL", precision=20, scale=2), "Column 'x' is DECIMAL(20, 2), more digits than"),
        (t("DECIMAL(18, 0)", "DECIMAL", precision=18, scale=0), "Column 'x' is DECIMAL(18, 0), more digits than"),
        (
            t("ARRAY<DECIMAL(16, 1)>", "ARRAY", element=t("DECIMAL(16, 1)", "DECIMAL", precision=16, scale=1)),
            "Column 'x[]' is DECIMAL(16, 1)",
        ),
    ],
)
def test_a_type_with_no_json_form_is_refused_in_one_line(ftype, message):
    with pytest.raises(DsparkError, match=re.escape(message)) as raised:
        field_schema(ftype, "x")
    assert "\n" not in str(raised.value)
    assert any(w in str(raised.value) for w in ("BOOLEAN, TINYINT", "MAP<STRING", "with p <= 15"))  # what works


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"answer.nullable": "nope"}, "Option 'answer.nullable' names 'nope', which is no answer field"),
        ({"answer.score.enum": "a;b"}, "Option 'answer.score.enum' needs a CHAR, VARCHAR or STRING column"),
        ({"answer.tags.max-items": "two"}, "Option 'answer.tags.max-items' must be a whole number, got 'two'"),
        ({"answer.tags.min-items": "3", "answer.tags.max-items": "2"}, "is more than 'answer.tags.max-items'"),
        ({"answer.label.enum": "positive;negative"}, "has 'positive', longer than VARCHAR(3) holds"),
        ({"answer.label.colour": "x"}, "Option 'answer.label.colour' is not an answer setting"),
        ({"answer.other.enum": "x"}, "Option 'answer.other.enum' names 'other', which is no answer field"),
    ],
)
def test_answer_options_are_checked_against_the_fields(options, message):
    fields = [
        AnswerField("score", INT),
        AnswerField("tags", t("ARRAY<STRING>", "ARRAY", element=varchar(2147483647))),
        AnswerField("label", varchar(3)),
    ]
    with pytest.raises(DsparkError, match=re.escape(message)):
        answer_schema(fields, options)


def model(output, **options):
    given = {"provider": "dspark-vllm", "endpoint": "http://127.0.0.1:9", "model": "m", **options}
    return model_plan({
        "model": "judge", "options": given, "input": [{"name": "review", "type": varchar(2147483647)}],
        "output": [{"name": n, "type": ftype} for n, ftype in output],
    })  # fmt: skip


def body_of(plan_: dict) -> dict:
    client = plan_["request"]["client"]
    return json.loads(client["body_prefix"] + '""' + client["body_suffix"])


def test_a_model_without_a_profile_sends_the_declared_shape_as_a_strict_json_schema():
    planned = model([("sentiment", varchar(8)), ("score", INT), ("error.reason", varchar(2147483647)),
                     ("completion_tokens", t("BIGINT", "BIGINT"))])  # fmt: skip
    sent = body_of(planned)
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["strict"] is True
    assert sent["response_format"]["json_schema"]["schema"] == planned["answer"]["schema"]
    assert [f["name"] for f in planned["answer"]["fields"]] == ["sentiment", "score"]
    assert [o["from"] for o in planned["outputs"]] == [
        {"answer": "sentiment"},
        {"answer": "score"},
        {"column": "_error"},
        {"column": "completion_tokens"},
    ]
    assert {"sentiment", "score", "content_error", "refusal", "finish_reason"} <= set(planned["native"]["columns"])


def test_the_constraint_option_chooses_how_the_server_is_asked():
    vllm = body_of(model([("score", INT)], **{"answer.constraint": "structured-outputs"}))
    assert (
        "response_format" not in vllm and vllm["structured_outputs"]["json"]["properties"]["score"]["type"] == "integer"
    )
    prompted = model([("score", INT)], **{"answer.constraint": "prompt", "system-prompt": "Be brief."})
    assert "response_format" not in body_of(prompted) and "structured_outputs" not in body_of(prompted)
    assert prompted["prompt"]["system"].startswith("Be brief.\n\nAnswer with one JSON object and nothing else")
    completions = model([("score", INT)], **{"answer.constraint": "prompt", "request.api": "completions"})
    assert completions["prompt"]["template"][0][0].startswith("Answer with one JSON object")
    assert completions["prompt"]["template"][1] == ["", 0]


def test_a_profile_with_its_own_content_schema_refuses_answer_fields():
    with pytest.raises(DsparkError, match="profile 'coder' has a content schema of its own"):
        model([("verdict", varchar(2147483647))], profile="coder")


def test_a_table_and_the_format_plan_answer_fields_too(tmp_path):
    columns = [
        {"name": "id", "kind": "physical", "type": varchar(2147483647)},
        {"name": "score", "kind": "physical", "type": INT},
        {"name": "reason", "kind": "metadata", "key": "error.reason", "type": varchar(2147483647)},
    ]
    options = {"connector": "dspark-vllm", "endpoint": "http://127.0.0.1:9", "model": "m", "prompts.path": "/x",
               "answer.constraint": "prompt"}  # fmt: skip
    planned = plan({"name": "answers", "options": options, "columns": columns, "watermark": None})
    assert planned["physical"]["score"] == {
        "needs": ["completion_tokens", "content_error", "finish_reason", "refusal", "score"],
        "from": {"answer": "score"},
    }
    assert planned["physical"]["id"]["from"] == {"column": "id"}
    sent = body_of(planned)
    assert sent["messages"][0]["role"] == "system" and "JSON Schema" in sent["messages"][0]["content"]
    formatted = format_plan({"format": {"answer.nullable": "score"}, "columns": [
        *columns[:2], {"name": "error_reason", "kind": "physical", "type": varchar(2147483647)}]})  # fmt: skip
    assert formatted["answer"]["fields"][0]["schema"]["anyOf"][1] == {"type": "null"}


def test_an_answer_setting_that_names_no_field_is_refused():
    with pytest.raises(
        DsparkError, match=re.escape("Option 'answer.scroe.enum' names 'scroe', which is no answer field")
    ):
        model([("score", INT)], **{"answer.scroe.enum": "a;b"})
    with pytest.raises(DsparkError, match=re.escape("answer fields: (none)")):
        model([("error.reason", varchar(2147483647))], **{"answer.nullable": "score"})
