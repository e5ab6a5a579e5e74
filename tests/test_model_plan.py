"""The plan of a 'dspark-vllm' model (`connector.plan.model.model_plan`): pure code, no Flink job.

The Java face (`DsparkVllmModelFactory`) sends the model's options, INPUT and OUTPUT columns; the end-to-end
behaviour is in tests/test_flink_request.py and tests/test_flink_model.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from connector.errors import OptionsError
from connector.options import validate_model
from connector.plan.contract import PLAN_VERSION, REQUEST_COLUMNS
from connector.plan.model import model_plan

OPTIONS = {"provider": "dspark-vllm", "endpoint": "http://127.0.0.1:8000", "model": "m", "profile": "coder"}
MESSAGES = {"sql": "ARRAY<ROW<`role` VARCHAR(2147483647), `content` VARCHAR(2147483647)>>", "root": "ARRAY"}


def col(name: str, sql: str, root: str | None = None, fields=None) -> dict:
    node = {"name": name, "type": {"sql": sql, "root": root or sql.split("(")[0], "nullable": True}}
    if fields:
        node["type"]["fields"] = fields
    return node


STRING = "VARCHAR(2147483647)"


def declared(inputs, outputs, **options) -> dict:
    return {"model": "reviewer", "options": {**OPTIONS, **options}, "input": inputs, "output": outputs}


def test_output_columns_are_profile_columns_or_metadata():
    usage = col(
        "usage",
        "ROW<`prompt_tokens` INT, `completion_tokens` BIGINT>",
        "ROW",
        [
            {"name": "prompt_tokens", "type": {"sql": "INT", "root": "INTEGER"}},
            {"name": "completion_tokens", "type": {"sql": "BIGINT", "root": "BIGINT"}},
        ],
    )
    result = model_plan(
        declared(
            [col("question", STRING, "VARCHAR")],
            [
                col("language", STRING, "VARCHAR"),
                col("completion_tokens", "BIGINT"),
                col("model", STRING, "VARCHAR"),
                usage,
                col("request.latency-ms", "DOUBLE"),
                col("request.received-at", "TIMESTAMP(3) WITH LOCAL TIME ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE"),
                col("error.reason", STRING, "VARCHAR"),
            ],
        )
    )
    assert result["version"] == PLAN_VERSION
    assert result["request"]["columns"] == [list(c) for c in REQUEST_COLUMNS]
    layouts = {o["name"]: o["from"] for o in result["outputs"]}
    assert layouts["language"] == {"column": "language"}
    assert layouts["model"] == {"column": "model", "default": "m"}  # an error row still names the model
    assert layouts["usage"] == {
        "row": [
            {"name": "prompt_tokens", "from": {"column": "prompt_tokens"}},
            {"name": "completion_tokens", "from": {"column": "completion_tokens"}},
        ]
    }
    assert layouts["request.latency-ms"] == {"column": "_latency_ms"}
    assert layouts["request.received-at"] == {"column": "_received_ms"}
    assert layouts["error.reason"] == {"column": "_error"}
    assert result["prompt"] == {"chat": True, "system": None, "template": None, "messages": None, "column": 0}
    # What the core reads: the core columns of the outputs (language, a content property, keeps the content part).
    read = result["native"]["read"]
    assert [c[0] for c in read["columns"]] == [
        "model", "content", "prompt_tokens", "completion_tokens", "language", "code", "explanation", "code_blocks",
        "content_error",
    ]  # fmt: skip


def test_template_system_prompt_and_row_options():
    result = model_plan(
        declared(
            [col("code", STRING, "VARCHAR"), col("lang", STRING, "VARCHAR"), col("max_tokens", "INT", "INTEGER"),
             col("temperature", "DOUBLE"), col("model", STRING, "VARCHAR")],
            [col("code", STRING, "VARCHAR")],
            **{"prompt.template": "Review this {lang} code: {code} {{literally}}", "system-prompt": "Be brief."},
        )
    )  # fmt: skip
    prompt = result["prompt"]
    assert prompt["system"] == "Be brief."
    assert prompt["template"] == [["Review this ", None], ["", 1], [" code: ", None], ["", 0], [" {literally}", None]]
    columns = result["body_columns"]
    assert [c[:3] for c in columns] == [["max_tokens", 2, "int"], ["temperature", 3, "float"], ["model", 4, "string"]]
    # each with its option's rule, which the JVM holds the row's value to
    assert columns[1][3] == {"type": "float", "rule": "a number >= 0", "min": 0, "max": None, "above": False,
                             "below": False} and columns[2][3] is None  # fmt: skip


def test_messages_column_is_taken_as_it_is():
    result = model_plan(declared([{"name": "history", "type": MESSAGES}], [col("content", STRING, "VARCHAR")]))
    assert result["prompt"]["messages"] == 0 and result["prompt"]["template"] is None


@pytest.mark.parametrize(
    ("inputs", "outputs", "options", "message"),
    [
        ([col("q", STRING, "VARCHAR")], [col("langauge", STRING, "VARCHAR")], {},
         "Column 'langauge' is neither a column of profile 'coder' nor a metadata key, so it would be an answer "
         "field: did you mean 'language'?"),
        ([col("q", STRING, "VARCHAR")], [col("error.reason", "INT", "INTEGER")], {},
         "OUTPUT column 'error.reason' is the metadata key 'error.reason': declare it STRING."),
        ([col("q", STRING, "VARCHAR")], [col("code", STRING, "VARCHAR")], {"prompt.template": "Review {code}"},
         "Option 'prompt.template' names '{code}', which is not an INPUT column of the model; its INPUT columns: q."),
        ([col("q", STRING, "VARCHAR")], [col("code", STRING, "VARCHAR")], {"prompt.template": "Review {q!r}"},
         "name an INPUT column only"),
        ([col("a", STRING, "VARCHAR"), col("b", STRING, "VARCHAR")], [col("code", STRING, "VARCHAR")], {},
         "The model needs 'prompt.template' to make a request of its INPUT columns (a, b)"),
        ([col("q", STRING, "VARCHAR"), col("max_tokens", STRING, "VARCHAR")], [col("code", STRING, "VARCHAR")], {},
         "INPUT column 'max_tokens' sets the request's 'max_tokens' for its row: declare it BIGINT."),
        ([{"name": "history", "type": MESSAGES}], [col("code", STRING, "VARCHAR")], {"system-prompt": "x"},
         "sent as they are: remove 'prompt.template' and 'system-prompt'"),
        ([col("q", STRING, "VARCHAR")], [col("code", STRING, "VARCHAR")], {"parse.backend": "gpu"},
         "'parse.backend' = 'gpu' is not available for a model"),
        ([col("q", STRING, "VARCHAR")], [col("code", STRING, "VARCHAR")], {"prompts.rate": "5"},
         "Unsupported options found for model provider 'dspark-vllm'."),
        ([col("q", STRING, "VARCHAR")], [col("code", STRING, "VARCHAR")],
         {"request.routing": "prefix", "request.routing.key-column": "user_id"},
         "Option 'request.routing.key-column' names 'user_id', which is not an INPUT column of the model; its INPUT "
         "columns: q."),
        ([col("q", STRING, "VARCHAR"), col("user_id", STRING, "VARCHAR")], [col("code", STRING, "VARCHAR")],
         {"request.routing.key-column": "user_id", "prompt.template": "{q}"},
         "Option 'request.routing.key-column' chooses a row's replica by a column's value, which is prefix routing: "
         "add 'request.routing' = 'prefix'."),
        ([col("q", STRING, "VARCHAR"), col("tags", "ARRAY<VARCHAR(2147483647)>", "ARRAY")],
         [col("code", STRING, "VARCHAR")],
         {"request.routing": "prefix", "request.routing.key-column": "tags", "prompt.template": "{q}"},
         "INPUT column 'tags' of 'request.routing.key-column' is ARRAY<VARCHAR(2147483647)>: declare it STRING, an "
         "integer or BYTES (a session or user id)."),
    ],
)  # fmt: skip
def test_refused_with_the_fix(inputs, outputs, options, message):
    with pytest.raises(OptionsError) as raised:
        model_plan(declared(inputs, outputs, **options))
    assert message in str(raised.value)


def test_model_options_share_the_tables_keys_and_defaults():
    options = validate_model({**OPTIONS, "request.concurrency": "auto", "request.max-tokens": "64"})
    assert options.concurrency == (16, 1, 256, True)
    with pytest.raises(OptionsError, match="Option 'endpoint' must be an http"):
        validate_model({**OPTIONS, "endpoint": "vllm:8000"})
    with pytest.raises(OptionsError, match="Option 'model' is required"):
        validate_model({k: v for k, v in OPTIONS.items() if k != "model"})


def test_the_planner_answers_a_model_question_on_stdin():
    question = declared([col("q", STRING, "VARCHAR")], [col("bogus", STRING, "VARCHAR")])
    done = subprocess.run(
        [sys.executable, "-m", "connector.plan"], input=json.dumps(question), capture_output=True, text=True
    )
    assert done.returncode == 0
    assert "Columns bogus are answer fields" in json.loads(done.stdout)["error"]


def test_docs_list_the_model_options():
    from pathlib import Path

    from connector.options import MODEL_OPTIONS, options_markdown

    doc = Path(__file__).resolve().parents[1] / "docs" / "flink.md"
    text = doc.read_text()
    block = text.split("<!-- model-options:start -->\n")[1].split("<!-- model-options:end -->")[0]
    assert block == options_markdown(MODEL_OPTIONS), f"{doc} is stale: run python -m connector.options --update {doc}"


def test_raw_body_output_is_declared_bytes():
    """`raw.body` is BYTES in the metadata registry, which Flink sends as VARBINARY(2147483647): the model refused
    it with "declare it BYTES" although it was declared BYTES (jobs/features.py keeps the bodies of its error rows)."""
    result = model_plan(
        declared([col("question", STRING, "VARCHAR")], [col("raw.body", "VARBINARY(2147483647)", "VARBINARY")])
    )
    assert [c["name"] for c in result["outputs"]] == ["raw.body"]


def test_a_column_of_the_template_is_not_a_body_option():
    """`n` (or `seed`, `model`...) used by the template is part of the prompt, not the request's `n` too: a row
    with n = 3 would pay for three choices."""
    inputs = [col("q", STRING, "VARCHAR"), col("n", "BIGINT"), col("seed", "BIGINT"), col("temperature", "DOUBLE")]
    result = model_plan(
        declared(inputs, [col("content", STRING, "VARCHAR")], **{"prompt.template": "Question {n} (seed {seed}): {q}"})
    )
    assert [c[0] for c in result["body_columns"]] == ["temperature"]


def test_a_routing_key_column_is_an_input_column():
    """'request.routing.key-column': the plan names the INPUT column whose value routes a row (in the request
    section, beside the client's 'prefix' routing); unset: none."""
    inputs = [col("user_id", "BIGINT"), col("q", STRING, "VARCHAR")]
    keyed = model_plan(
        declared(
            inputs,
            [col("code", STRING, "VARCHAR")],
            **{"request.routing": "prefix", "request.routing.key-column": "user_id", "prompt.template": "{q}"},
        )
    )
    assert keyed["request"]["routing_key"] == 0
    assert keyed["request"]["client"]["routing"]["mode"] == "prefix"
    plain = model_plan(declared(inputs, [col("code", STRING, "VARCHAR")], **{"prompt.template": "{q}"}))
    assert plain["request"]["routing_key"] is None
