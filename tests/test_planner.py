"""The planner the Java factory calls (`python -m connector.plan`): pure code, no Flink job."""

from __future__ import annotations

import base64
import json
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from connector.errors import OptionsError
from connector.plan.contract import CLIENT_SPEC_VERSION, PLAN_VERSION, REQUEST_COLUMNS
from connector.plan.model import model_plan
from connector.plan.parse_function import ParseFunctionPlan
from connector.plan.table import table_plan as plan
from connector.profiles import load_profile


def column(name: str, sql: str, root: str | None = None, fields=None, kind: str = "physical", key=None) -> dict:
    node = {"name": name, "kind": kind, "type": {"sql": sql, "root": root or sql.split("(")[0], "nullable": True}}
    if fields:
        node["type"]["fields"] = fields
    if key:
        node["key"] = key
    return node


USAGE = column(
    "usage",
    "ROW<`prompt_tokens` INT, `completion_tokens` BIGINT>",
    "ROW",
    [
        {"name": "prompt_tokens", "type": {"sql": "INT", "root": "INTEGER"}},
        {"name": "completion_tokens", "type": {"sql": "BIGINT", "root": "BIGINT"}},
    ],
)
REPLAY = {"connector": "dspark-vllm", "mode": "replay", "replay.path": "/data", "profile": "coder"}
REQUEST = {
    "connector": "dspark-vllm",
    "endpoint": "http://127.0.0.1:8000",
    "model": "m",
    "prompts.rate": "5",
    "prompts.count": "10",
    "prompts.template": "it's {n}",
}


def declared(options, *columns, watermark=None) -> dict:
    return {"name": "responses", "options": options, "columns": list(columns), "watermark": watermark}


def test_columns_become_layouts_over_flat_columns():
    result = plan(
        declared(
            REPLAY,
            column("id", "VARCHAR(2147483647)", "VARCHAR"),
            USAGE,
            column("created", "TIMESTAMP(3)", "TIMESTAMP_WITHOUT_TIME_ZONE"),
            column("lat", "DOUBLE", kind="metadata", key="source.line"),
            watermark="created",
        )
    )
    assert result["physical"]["id"] == {"needs": ["id"], "from": {"column": "id"}}
    assert result["physical"]["usage"] == {
        "needs": ["completion_tokens", "prompt_tokens"],
        "from": {
            "row": [
                {"name": "prompt_tokens", "from": {"column": "prompt_tokens"}},  # INT from BIGINT, as CAST does
                {"name": "completion_tokens", "from": {"column": "completion_tokens"}},
            ]
        },
    }
    assert result["physical"]["created"] == {"needs": ["created"], "from": {"column": "created"}}
    assert result["metadata"][0] == {"key": "error.reason", "type": "STRING", "from": {"column": "_error"}}
    assert "sql" not in json.dumps(result["physical"])  # no SQL in the plan: the JVM makes the rows
    assert "lat" not in result["physical"]  # metadata is Flink's to map, through the keys listed
    assert [m["key"] for m in result["metadata"]] == [
        "error.reason", "error.field", "raw.body", "parse.backend", "source.path", "source.line",
    ]  # fmt: skip
    assert result["bounded"] is True and result["mode"] == "replay"
    assert result["source"] == {"kind": "replay", "path": "/data"}  # data, no SQL; no interval: read once
    assert result["parse_inputs"] == [["_body", "BYTES"], ["_source_line", "BIGINT"]]
    assert result["flat"][-4:] == [
        {"name": "_line", "type": "BIGINT"},
        {"name": "_error", "type": "STRING"},
        {"name": "_error_field", "type": "STRING"},
        {"name": "_backend", "type": "STRING"},
    ]
    table_plan = ParseFunctionPlan.of_document(json.loads(json.dumps(result["plan"])))  # JSON, all of it
    assert table_plan.require_created and table_plan.profile.name == "coder"
    assert table_plan.profile.document() == load_profile("coder").document()


def test_request_mode_plan():
    result = plan(declared(REQUEST, column("model", "VARCHAR(2147483647)", "VARCHAR")))
    assert result["physical"]["model"]["from"] == {"column": "model", "default": "m"}  # error rows keep the model
    received = next(m for m in result["metadata"] if m["key"] == "request.received-at")
    assert received["from"] == {"column": "_received_ms"}  # TIMESTAMP_LTZ(3) from epoch milliseconds
    # what the jar builds the source from, as data: the template's {n} is replaced in Java (Sources.Numbered)
    assert result["source"] == {"kind": "rate", "rate": 5, "count": 10, "template": "it's {n}", "table": "responses"}
    assert result["request"]["columns"][2] == ["_body", "BYTES"]
    # The parse function's own operator: bundles of at most 1000 bodies that end after 20 ms (no Python async).
    assert result["settings"] == {
        "python.fn-execution.bundle.size": "1000",
        "python.fn-execution.arrow.batch.size": "1000",
        "python.fn-execution.bundle.time": "20",
    }
    assert {m["key"] for m in result["metadata"]} >= {"request.id", "request.latency-ms", "error.reason"}
    assert "source.path" not in {m["key"] for m in result["metadata"]}


def test_a_column_the_profile_lacks_is_an_answer_field_and_a_near_miss_is_named():
    foo = {"name": "foo", "type": {"sql": "INT", "root": "INTEGER"}}
    openai = {**REPLAY, "profile": "openai"}
    planned = plan(declared(openai, column("usage", "ROW<`foo` INT>", "ROW", [foo])))
    assert planned["physical"]["usage"]["from"] == {"answer": "usage"}
    assert planned["answer"]["fields"][0]["schema"]["properties"] == {"foo": {"type": "integer", **INT_RANGE}}
    with pytest.raises(
        OptionsError,
        match="Column 'complteion_tokens' is neither a column of profile 'openai' nor a "
        "metadata key, so it would be an answer field: did you mean 'completion_tokens'?",
    ):
        plan(declared(openai, column("complteion_tokens", "BIGINT", "BIGINT")))


INT_RANGE = {"minimum": -(2**31), "maximum": 2**31 - 1}


def test_main_answers_errors_as_json_never_a_traceback():
    def run(stdin: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-m", "connector.plan"], input=stdin, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0
        return json.loads(done.stdout)

    assert run(json.dumps(declared({**REPLAY, "parse.bakend": "cpu"})))["error"].startswith(
        "Unsupported options found for 'dspark-vllm'."
    )
    assert "please report it" in run("{not json")["error"]
    good = run(json.dumps(declared(REPLAY, column("id", "VARCHAR(2147483647)", "VARCHAR"))))
    assert "error" not in good and good["physical"]["id"]["needs"] == ["id"]


def test_docs_show_the_metadata_registry():
    from connector.plan.metadata import metadata_markdown

    text = (Path(__file__).resolve().parent.parent / "docs" / "flink.md").read_text()
    block = text.split("<!-- metadata:start -->\n")[1].split("<!-- metadata:end -->")[0]
    assert block == metadata_markdown(), "docs/flink.md is stale: run python -m connector.plan.metadata docs/flink.md"


def test_api_key_env_is_read_where_the_table_is_planned(monkeypatch):
    options = {**REQUEST, "api-key.env": "DSPARK_TEST_KEY"}
    monkeypatch.delenv("DSPARK_TEST_KEY", raising=False)
    with pytest.raises(OptionsError, match="names the environment variable 'DSPARK_TEST_KEY', which is not set"):
        plan(declared(options, column("id", "VARCHAR(2147483647)", "VARCHAR")))
    monkeypatch.setenv("DSPARK_TEST_KEY", "k-123")
    made = plan(declared(options))
    assert made["request"]["client"]["headers"]["authorization"] == "Bearer k-123"
    assert "k-123" not in json.dumps(made["plan"])  # the parse step's part carries no key
    assert "authorization" not in plan(declared(REQUEST))["request"]["client"]["headers"]  # none unless asked


def test_request_plan_holds_the_client_spec_of_the_java_request_step():
    options = {**REQUEST, "api-key": "k-9", "request.temperature": "0.5", "request.logprobs": "2"}
    options |= {"request.concurrency": "auto", "request.concurrency.max": "32", "request.output-mode": "ordered"}
    result = plan(declared(options, column("id", "VARCHAR(2147483647)", "VARCHAR")))
    assert result["version"] == PLAN_VERSION
    request = result["request"]
    assert [c[0] for c in request["columns"]] == [n for n, _ in REQUEST_COLUMNS]
    assert (request["output_mode"], request["on_failure"], request["capacity"]) == ("ordered", "error-row", 128)
    spec = request["client"]
    assert spec["version"] == CLIENT_SPEC_VERSION
    assert spec["url"] == "http://127.0.0.1:8000/v1/chat/completions" and spec["health_url"].endswith("/health")
    assert spec["concurrency"] == {"initial": 16, "min": 1, "max": 32, "adaptive": True}
    assert spec["headers"]["authorization"] == "Bearer k-9"
    # The body is the Python client's own request with the prompt's place left open.
    sent = json.loads(spec["body_prefix"] + json.dumps('say "hi"\n') + spec["body_suffix"])
    assert sent == {
        "messages": [{"role": "user", "content": 'say "hi"\n'}],
        "model": "m",
        "temperature": 0.5,
        "top_logprobs": 2,
        "logprobs": True,
    }
    completions = plan(declared({**REQUEST, "request.api": "completions"}))["request"]["client"]
    assert completions["url"].endswith("/v1/completions") and completions["body_prefix"] == '{"prompt": '
    assert "authorization" not in completions["headers"]  # no key unless one is given


def test_several_replicas_are_planned_as_a_list_with_their_routing():
    options = {**REQUEST, "endpoint": " http://a:8000/v1 ,https://b.example:9000/ , http://[::1]:8001"}
    options |= {"request.routing": "prefix", "request.routing.prefix-length": "1000", "request.routing.load-bound": "2"}
    options |= {"request.replicas.resolve-interval": "5 s"}
    spec = plan(declared(options))["request"]["client"]
    assert spec["urls"] == [
        "http://a:8000/v1/chat/completions",
        "https://b.example:9000/v1/chat/completions",
        "http://[::1]:8001/v1/chat/completions",
    ]
    assert spec["health_urls"] == ["http://a:8000/health", "https://b.example:9000/health", "http://[::1]:8001/health"]
    assert spec["url"] == spec["urls"][0] and spec["health_url"] == spec["health_urls"][0]
    assert spec["routing"] == {"mode": "prefix", "prefix_bytes": 1000, "load_bound": 2.0, "resolve_interval_s": 5.0}
    assert plan(declared(options))["request"]["capacity"] == 3 * plan(declared(REQUEST))["request"]["capacity"]
    one = plan(declared(REQUEST))["request"]["client"]
    assert one["urls"] == [one["url"]]
    assert one["routing"] == {
        "mode": "least-loaded",
        "prefix_bytes": 256,
        "load_bound": 1.25,
        "resolve_interval_s": 30.0,
    }


def test_long_requests_are_planned_whatever_the_checkpoint_timeout():
    """Before: a deadline past 'execution.checkpointing.timeout' was refused, since a checkpoint waited for the
    requests in flight. They are now in the checkpoint's state, and nothing waits for them."""
    slow = {**REQUEST, "request.timeout": "3 min", "request.retry.deadline": "10 min"}
    flink = {"execution.checkpointing.interval": "2 s", "execution.checkpointing.timeout": "5 s"}
    assert plan({**declared(slow), "flink": flink})["request"]["timeout_ms"] == 660_000


def test_api_key_file_is_read_where_the_table_is_planned(tmp_path):
    secret = tmp_path / "key"
    secret.write_text("k-file-7\n")
    made = plan(declared({**REQUEST, "api-key.file": str(secret)}))
    assert made["request"]["client"]["headers"]["authorization"] == "Bearer k-file-7"
    with pytest.raises(OptionsError, match="Option 'api-key.file' = '.*missing' cannot be read where the table"):
        plan(declared({**REQUEST, "api-key.file": str(tmp_path / "missing")}))
    with pytest.raises(OptionsError, match="'api-key.env' and 'api-key.file' shouldn't be set together"):
        plan(declared({**REQUEST, "api-key.env": "X", "api-key.file": str(secret)}))


def test_prompts_rate_without_a_count_plans_an_endless_sequence():
    options = {k: v for k, v in REQUEST.items() if k != "prompts.count"}
    result = plan(declared(options, column("model", "VARCHAR(2147483647)", "VARCHAR")))
    assert result["source"]["kind"] == "rate" and result["source"]["count"] == -1
    assert result["bounded"] is False


def test_file_sources_are_planned_as_data():
    watched = plan(declared({**REPLAY, "replay.monitor-interval": "2 s"}))
    assert watched["source"] == {"kind": "replay", "path": "/data", "monitor_interval_ms": 2000}
    assert watched["bounded"] is False
    options = {k: v for k, v in REQUEST.items() if not k.startswith("prompts.")}
    prompts = plan(declared({**options, "prompts.path": "/p.txt"}, column("model", "VARCHAR(2147483647)", "VARCHAR")))
    assert prompts["source"] == {"kind": "prompts", "path": "/p.txt"} and prompts["bounded"] is True


# -- where the parse step runs, and 'format' = 'dspark-vllm' ---------------------------------------------------


def test_cpu_and_auto_without_gpu_task_managers_parse_in_the_jvm():
    for backend in ("cpu", "auto"):
        native = plan(declared({**REPLAY, "parse.backend": backend}, column("id", "STRING", "VARCHAR")))["native"]
        assert {"id", "language", "code_blocks", "content_error"} <= set(native["columns"])  # x-extract too
        assert "read" not in native  # what the core reads comes with the scan's projection (table_read)
        assert (native.get("gpu_unused") is None) == (backend == "cpu")
    gpu = plan(declared({**REPLAY, "parse.backend": "gpu"}, column("id", "STRING", "VARCHAR")))["native"]
    assert gpu["why"] == "'parse.backend' = 'gpu' (libcudf runs in Python)" and "gpu_unused" not in gpu


GPU_TASK_MANAGERS = {"external-resources": "gpu", "external-resource.gpu.amount": "1"}


def test_auto_plans_the_route_the_jobs_configuration_declares_for_its_task_managers(monkeypatch):
    """'auto' is decided by what the job's configuration says of its TaskManagers (Flink's external resource
    'gpu'), never by the machine that plans the query (a SQL Gateway, a laptop): both routes carry the native
    core; the parse step picks its backend at open, where it runs."""
    import functools
    import importlib.util

    def native(flink=None):
        made = declared({**REPLAY, "parse.backend": "auto"}, column("id", "STRING", "VARCHAR"))
        if flink is not None:
            made["flink"] = flink
        return plan(made)["native"]

    python = native(GPU_TASK_MANAGERS)
    assert "why" in python and "external-resource.gpu.amount" in python["why"]
    assert "id" in python["columns"]  # the core for leftovers and a worker without a GPU
    jvm = native()
    assert "why" not in jvm and jvm["columns"] == python["columns"]
    assert "external-resource.gpu.amount" in jvm["gpu_unused"]  # what a TaskManager with a GPU says once
    for flink in (
        {"external-resources": "gpu", "external-resource.gpu.amount": "0"},
        {"external-resource.gpu.amount": "1"},  # no resource named gpu
        {"external-resources": "fpga", "external-resource.gpu.amount": "1"},
    ):
        assert "why" not in native(flink), flink
    assert "why" in native({"external-resources": "fpga;gpu", "external-resource.gpu.amount": "2"})
    # A planning machine with the GPU backend (pylibcudf found, libcudf emulated) changes nothing.
    from connector.parse import backends
    from tests.libcudf_emulator import EmulatedLibcudfReader

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "pylibcudf" else real(name, *a)
    )
    monkeypatch.setattr(backends, "_gpu", lambda: backends.GpuBackend(EmulatedLibcudfReader()))
    monkeypatch.setattr(backends, "_auto", functools.cache(backends._auto.__wrapped__))  # this test's decision
    assert backends.select_backend("auto")[0].name == "gpu"
    assert native() == jvm
    assert native(GPU_TASK_MANAGERS) == python


def format_declared(options: dict, *columns) -> dict:
    return {"name": "t", "format": options, "columns": list(columns), "watermark": None}


def test_the_format_plans_body_columns_rows_of_them_and_error_columns():
    from connector.plan.format import format_plan

    made = format_plan(
        format_declared(
            {"profile": "coder"}, column("id", "STRING", "VARCHAR"), USAGE, column("error_reason", "STRING", "VARCHAR")
        )
    )
    assert made["version"] == PLAN_VERSION and made["on_error"] == "column"
    assert "prompt_tokens" in made["columns"] and "prompt_tokens" in made["physical"]["usage"]["needs"]
    assert made["physical"]["error_reason"] == {"needs": [], "from": {"column": "_error"}}


def test_the_format_leaves_the_connectors_metadata_and_computed_columns_alone():
    """Kafka's `partition`, `offset`, `timestamp` beside the parsed columns (docs/flink.md): they were refused."""
    from connector.plan.format import format_plan

    made = format_plan(
        format_declared(
            {"on-error": "skip"},
            column("id", "STRING", "VARCHAR"),
            column("offset", "BIGINT", "BIGINT", kind="metadata", key="offset"),
            column("t", "TIMESTAMP_LTZ(3)", "TIMESTAMP_WITH_LOCAL_TIME_ZONE", kind="metadata", key="timestamp"),
            column("n", "BIGINT", "BIGINT", kind="computed"),
        )
    )
    assert made["on_error"] == "skip" and "id" in made["columns"]


@pytest.mark.parametrize(
    "options,columns,message",
    [
        ({"profile": "coder"}, [column("id", "STRING", "VARCHAR")], "declare a column `error_reason STRING`"),
        ({"on-error": "drop"}, [column("id", "STRING", "VARCHAR")], "'dspark-vllm.on-error' is 'drop'"),
        ({"profle": "coder"}, [column("id", "STRING", "VARCHAR")], "has no option 'dspark-vllm.profle'"),
        (
            {"on-error": "skip", "profile": "coder"},
            [column("nope", "STRING", "VARCHAR")],
            "but profile 'coder' has a content schema of its own",
        ),
        ({"on-error": "skip"}, [column("created", "INT", "INTEGER")], "declare it TIMESTAMP(3)"),
        ({"on-error": "fail"}, [column("e", "STRING", kind="metadata", key="error.reason")], "no metadata of its own"),
    ],
)
def test_the_format_says_what_is_wrong(options, columns, message):
    from connector.plan.format import format_plan

    with pytest.raises(OptionsError, match=re.escape(message)):
        format_plan(format_declared(options, *columns))


def test_the_parse_function_payload_is_made_by_python_and_builds_the_function():
    """The jar asks `python -m connector.plan` for a Python parse step's payload once it knows the
    columns: a pickle (PyFlink's format for a Python function, made by Python's own pickle) of the call that
    builds the function on the worker from the plan's JSON."""
    from connector.flink.functions import ParseFunction

    made = plan(declared({**REPLAY, "parse.backend": "gpu"}, column("id", "STRING", "VARCHAR")))
    question = {"parse_function": {"plan": made["plan"], "columns": ["id", "_line", "_error"]}}
    done = subprocess.run(
        [sys.executable, "-m", "connector.plan"], input=json.dumps(question), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    function = pickle.loads(base64.b64decode(json.loads(done.stdout)["payload"]))
    assert isinstance(function, ParseFunction)
    assert function.columns == ("id", "_line", "_error")
    assert function.backend == "gpu"


def test_every_declared_column_has_a_layout_the_parse_step_casts_itself():
    """Every cast a declared column may make is Flink's CAST done by the parse step in the JVM (Casts.java): each
    column has a layout, so no SQL runs after the parse step."""
    result = plan(
        declared(
            REPLAY,
            column("prompt_tokens", "VARCHAR(2147483647)", "VARCHAR"),  # a number as text
            column("id", "VARCHAR(8)", "VARCHAR"),
            column("tokens_per_second", "FLOAT"),
            column("choice_contents", "ARRAY<VARCHAR(2147483647)>", "ARRAY"),
            column("created", "TIMESTAMP_LTZ(3)", "TIMESTAMP_WITH_LOCAL_TIME_ZONE"),
            column(
                "usage",
                "ROW<`completion_tokens` DECIMAL(10, 0)>",
                "ROW",
                [{"name": "completion_tokens", "type": {"sql": "DECIMAL(10, 0)", "root": "DECIMAL"}}],
            ),
        )
    )
    assert result["physical"]["prompt_tokens"]["from"] == {"column": "prompt_tokens"}
    assert result["physical"]["choice_contents"] == {
        "needs": ["choice_contents"],
        "from": {"column": "choice_contents"},
    }
    assert result["physical"]["id"]["from"] == {"column": "id"}
    assert result["physical"]["created"]["from"] == {"column": "created"}
    assert result["physical"]["usage"]["from"] == {
        "row": [{"name": "completion_tokens", "from": {"column": "completion_tokens"}}]
    }


INT_TYPE = {"sql": "INT", "root": "INTEGER"}


@pytest.mark.parametrize(
    ("declared_column", "message"),
    [
        (column("id", "VARCHAR(2147483647) NOT NULL", "VARCHAR"), "Column 'id' is declared NOT NULL, but an error row"),
        (
            column(
                "usage",
                "ROW<`prompt_tokens` BIGINT NOT NULL>",
                "ROW",
                [{"name": "prompt_tokens", "type": {"sql": "BIGINT NOT NULL", "root": "BIGINT"}}],
            ),
            "Column 'usage.prompt_tokens' is declared NOT NULL, but an error row",
        ),
        # an answer field (no column of the profile) whose second field is NOT NULL
        (
            column(
                "verdict",
                "ROW<`b` INT, `a` INT NOT NULL>",
                "ROW",
                [{"name": "b", "type": INT_TYPE}, {"name": "a", "type": {"sql": "INT NOT NULL", "root": "INTEGER"}}],
            ),
            "Column 'verdict.a' is declared NOT NULL, but an error row",
        ),
        # a nullable column with a NOT NULL inside: the message names what to change, not the column as a whole
        (
            column("choice_contents", "ARRAY<VARCHAR(2147483647) NOT NULL>", "ARRAY"),
            "Column 'choice_contents' is ARRAY<STRING NOT NULL>, with a NOT NULL inside, but an error row",
        ),
    ],
)
def test_a_not_null_column_is_refused_as_error_rows_have_no_value_for_it(declared_column, message):
    """An error row has NULL in every parsed column: Flink failed the job on the first one ("Column 'id' is NOT
    NULL, however, a null value is being written into it"), so NOT NULL is refused where the table is planned."""
    with pytest.raises(OptionsError, match=re.escape(message)):
        plan(declared({**REPLAY, "profile": "openai"}, declared_column))


# --- mistakes in the options that the jar could only find at run time (or not at all): each refused here, in
# one line naming the option (connector.options, connector.plan)

HOSTILE_REQUEST = {"connector": "dspark-vllm", "endpoint": "http://127.0.0.1:8000", "model": "m", "prompts.rate": "1"}


def planned_with(**options: str) -> dict:
    declared = {"name": "t", "flink": {}, "options": {**HOSTILE_REQUEST, **options}, "columns": [], "watermark": None}
    return plan(declared)


def refused_with(**options: str) -> str:
    with pytest.raises(OptionsError) as error:
        planned_with(**options)
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://127.0.0.1:notaport",  # java.net.URI: no host; the job failed when it started
        "http://127.0.0.1:99999",
        "http://:8000",
        "http://my_host:8000",  # '_': java.net.URI reads no host
        "http://[::1:8000",
        "http://127.0.0.1:8000/v1?x=1",  # the request path went after the query
        "http://user:pw@127.0.0.1:8000",
        "http://h:0",
    ],
)
def test_endpoints_the_request_step_cannot_use(endpoint):
    assert "Option 'endpoint' must be an http(s) URL" in refused_with(endpoint=endpoint)


@pytest.mark.parametrize(
    "endpoint", ["http://127.0.0.1:8000", "https://vllm.example.com", "http://vllm:8000/v1", "http://[::1]:8000/p/"]
)
def test_endpoints_that_work(endpoint):
    assert planned_with(endpoint=endpoint)["request"]["client"]["url"].startswith(
        endpoint.rstrip("/").removesuffix("/v1")
    )


@pytest.mark.parametrize("key", ["abc\r\nX-Evil: 1", "abc\n", "clé€"])
def test_an_api_key_a_header_cannot_carry_is_the_request_steps_to_refuse(key):
    # One rule, the JVM's, where the plan is read as the query is planned (RequesterTests.test41).
    assert planned_with(**{"api-key": key})["request"]["client"]["headers"]["authorization"] == f"Bearer {key}"


def test_an_api_key_file_that_is_not_text(tmp_path):
    (tmp_path / "key").write_bytes(b"\x88\xff\x00binary")
    assert refused_with(**{"api-key.file": str(tmp_path / "key")}).endswith("is not text (UTF-8).")
    (tmp_path / "big").write_bytes(b"k" * 100_000)
    assert "larger than an API key" in refused_with(**{"api-key.file": str(tmp_path / "big")})
    (tmp_path / "ok").write_text("sk-123\n")
    assert planned_with(**{"api-key.file": str(tmp_path / "ok")})["request"]["client"]["headers"]["authorization"] == (
        "Bearer sk-123"
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("request.concurrency", "600000000"),  # x4 overflowed the async operator's int capacity
        ("request.queue-size", "99999999999"),  # the TaskManager ran out of heap
        ("prompts.count", "99999999999999999999999"),  # past a Java long
        ("request.retry.deadline", "9999999999 d"),  # nanoseconds past now overflowed: no retry at all
        ("request.timeout", "9999999999999999999 d"),
        ("request.max-tokens", "99999999999999999999999"),
    ],
)
def test_numbers_past_what_the_jar_holds(key, value):
    extra = {"request.retry.deadline": "99999999999999999999 d"} if key == "request.timeout" else {}
    message = refused_with(**{key: value, **extra})
    assert "must be <=" in message


def test_monitor_interval_past_a_flink_duration():
    declared = {
        "name": "t",
        "flink": {},
        "options": {
            "connector": "dspark-vllm",
            "mode": "replay",
            "replay.path": "/x",
            "replay.monitor-interval": "99999999999999 d",
        },
        "columns": [],
        "watermark": None,
    }
    with pytest.raises(OptionsError, match="'replay.monitor-interval' must be <="):
        plan(declared)


INT_TYPE = {"sql": "INT", "root": "INTEGER"}


@pytest.mark.parametrize(
    ("declared_column", "message"),
    [
        (column("id", "INT"), "Column 'id' is STRING in this profile; declared INT, its CAST would fail"),
        (column("model", "TIMESTAMP(3)", "TIMESTAMP_WITHOUT_TIME_ZONE"), "Column 'model' is STRING"),
        (column("created", "BIGINT"), "Column 'created' is TIMESTAMP(3) in this profile; declared BIGINT"),
        (
            column("usage", "ROW<`prompt_tokens` BOOLEAN>", "ROW",
                   [{"name": "prompt_tokens", "type": {"sql": "BOOLEAN", "root": "BOOLEAN"}}]),
            "Column 'usage.prompt_tokens' is BIGINT in this profile; declared BOOLEAN",
        ),
        (column("choice_contents", "ARRAY<INT>", "ARRAY"), "Column 'choice_contents' is ARRAY<STRING>"),
    ],
)  # fmt: skip
def test_a_column_whose_cast_fails_at_run_time_is_refused(declared_column, message):
    """A declared type that the profile's column cannot always be cast to was planned, and the job failed on
    the first value (`id INT`: For input string: 'cmpl-0'), or gave nonsense (a token count as TRUE)."""
    with pytest.raises(OptionsError, match=re.escape(message)):
        plan(declared({**REPLAY, "profile": "openai"}, declared_column))


def test_casts_that_cannot_fail_are_planned():
    result = plan(
        declared(
            REPLAY,
            column("id", "CHAR(8)"),
            column("prompt_tokens", "VARCHAR(2147483647)", "VARCHAR"),
            column("completion_tokens", "DECIMAL(20, 0)", "DECIMAL"),
            column("created", "TIMESTAMP(3) WITH LOCAL TIME ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE"),
            column("choice_contents", "VARCHAR(2147483647)", "VARCHAR"),
            column("choice_finish_reasons", "ARRAY<CHAR(4)>", "ARRAY"),
        )
    )
    assert set(result["physical"]) >= {"id", "prompt_tokens", "created", "choice_contents", "choice_finish_reasons"}


def test_the_workers_part_of_the_plan_is_json_and_carries_a_profile_file_where_it_is_not(tmp_path):
    """The parse step's part of the plan (`plan`) was a pickled ParseFunctionPlan inside the JSON; it is JSON now, and a
    profile given by path (with `extends`) is rebuilt from it on a worker that has no such file, secrets left
    out."""
    base = tmp_path / "base.yaml"
    base.write_text("name: mine\nextends: coder\nfields:\n  tier: {type: string}\n")
    leaf = tmp_path / "leaf.yaml"
    leaf.write_text("name: leaf\nextends: base.yaml\n")
    made = plan(declared({**REQUEST, "profile": str(leaf), "api-key": "k-secret"}, column("tier", "STRING", "VARCHAR")))
    text = json.dumps(made["plan"])
    assert "k-secret" not in text
    expected = load_profile(str(leaf))
    base.unlink()
    leaf.unlink()
    rebuilt = ParseFunctionPlan.of_document(json.loads(text))
    assert rebuilt.profile.name == "leaf" and rebuilt.profile.columns == expected.columns
    assert rebuilt.profile.content_schema == expected.content_schema and rebuilt.profile.source == str(leaf)
    assert [c["name"] for c in rebuilt.profile.columns][-1] == "tier"


def test_the_request_step_gets_its_store_and_cache_from_the_options():
    """'request.store' and 'request.cache' reach the jar's request step (RequestStep reads request.store)."""
    assert plan(declared(REQUEST))["request"]["store"] is None
    options = {**REQUEST, "request.store": "file:///data/responses", "request.cache": "1 h"}
    store = plan(declared(options))["request"]["store"]
    assert store == {"uri": "file:///data/responses", "cache_ttl_ms": 3_600_000}
    store = plan(declared({**REQUEST, "request.store": "s3://b/r"}))["request"]["store"]
    assert store == {"uri": "s3://b/r", "cache_ttl_ms": 0}


@pytest.mark.parametrize(
    ("uri", "said"),
    [
        ("kafak://broker:9092/responses", "'kafak://': did you mean 'kafka://'"),
        ("fiel:///data/responses", "'fiel://': did you mean 'file://'"),
        ("kafka://broker:9092", "is not kafka://host:port[,host:port]/topic"),
        ("kafka://broker:9092/a/b", "is not kafka://host:port[,host:port]/topic"),
        ("kafka:///responses", "is not kafka://host:port[,host:port]/topic"),
    ],
)
def test_a_store_uri_that_names_no_store_is_refused_at_planning(uri, said):
    """Before: a typo in 'request.store' was planned, and the job ran with no store, said in one stderr line of a
    TaskManager; now the planner refuses it in one line, for a table and a model alike."""
    with pytest.raises(OptionsError, match=re.escape(said)) as refused:
        plan(declared({**REQUEST, "request.store": uri}))
    assert "'request.store'" in str(refused.value) and "\n" not in str(refused.value)
    model = {
        "model": "m",
        "options": {"provider": "dspark-vllm", "endpoint": "http://127.0.0.1:9/v1", "model": "m", "request.store": uri},
        "input": [{"name": "q", "type": {"sql": "VARCHAR(2147483647)", "root": "VARCHAR"}}],
        "output": [{"name": "id", "type": {"sql": "VARCHAR(2147483647)", "root": "VARCHAR"}}],
    }
    with pytest.raises(OptionsError, match=re.escape(said)):
        model_plan(model)


def test_a_store_of_any_file_system_or_kafka_topic_is_planned():
    for uri in ("file:///data/r", "/data/r", "s3://b/r", "hdfs://nn:8020/r", "gs://b/r", "abfss://c@a/r",
                "kafka://a:9092,b:9092/responses?acks=all"):  # fmt: skip
        assert plan(declared({**REQUEST, "request.store": uri}))["request"]["store"]["uri"] == uri
