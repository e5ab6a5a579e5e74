"""The option table of 'dspark-vllm': Flink's wording for unknown and missing keys, types, rules, docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from connector.errors import OptionsError
from connector.options import (
    MODE,
    OPTIONS,
    PARSE_BACKEND,
    PARSE_BATCH_SIZE,
    REPLAY_PATH,
    REQUEST_OUTPUT_MODE,
    REQUEST_STRUCTURED_OUTPUT,
    REQUEST_TIMEOUT,
    RETIRED,
    options_markdown,
    parse_duration,
    validate,
)
from connector.options.endpoint import base_urls

ROOT = Path(__file__).resolve().parent.parent
REPLAY = {"connector": "dspark-vllm", "mode": "replay", "replay.path": "/tmp/bodies"}
REQUEST = {
    "connector": "dspark-vllm",
    "endpoint": "http://127.0.0.1:8000",
    "model": "m",
    "prompts.rate": "10",
}


def test_defaults_are_filled_and_typed():
    opts = validate(REPLAY)
    assert opts.get(MODE) == "replay"
    assert opts.get(PARSE_BACKEND) == "auto"
    assert opts.get(PARSE_BATCH_SIZE) is None and opts.batch_size == 10000
    # Request mode: requests run on the JVM, a bundle waits only for the parse: 1000 bodies at most, and a bundle
    # ends after 20 ms (the latency it adds), 1 s in replay mode.
    assert (validate(REQUEST).batch_size, validate(REQUEST).bundle_size) == (1000, 1000)
    assert (validate(REQUEST).bundle_time, opts.bundle_time) == (0.02, 1.0)
    assert validate({**REQUEST, "python.fn-execution.bundle.time": "5 s"}).bundle_time == 5.0
    assert validate(REQUEST).concurrency == (64, 64, 64, False)
    assert validate({**REQUEST, "request.concurrency": "AUTO"}).concurrency == (16, 1, 256, True)
    bounded = {**REQUEST, "request.concurrency": "auto", "request.concurrency.max": "8"}
    assert validate(bounded).concurrency == (8, 1, 8, True)
    assert validate(REQUEST).get(REQUEST_OUTPUT_MODE) == "unordered"
    assert opts.get(REQUEST_TIMEOUT) == 60.0
    assert opts.get(REQUEST_STRUCTURED_OUTPUT) is False
    # Replay: five batches to a bundle, so that the JVM reads and sends while Python parses.
    assert (opts.bundle_size, opts.arrow_batch_size) == (50000, 10000)
    assert validate({**REPLAY, "parse.batch-size": "2000"}).bundle_size == 10000
    assert opts.is_set(REPLAY_PATH) and not opts.is_set(PARSE_BACKEND)


def test_secrets_are_masked_in_public_options():
    opts = validate({**REQUEST, "api-key": "s3cret"})
    assert opts.public()["api-key"] == "******" and "s3cret" not in repr(opts.public())


def test_unknown_key_uses_flinks_wording_with_the_nearest_keys():
    """A misspelt key got all ~60 supported keys after it and no word of the one meant."""
    with pytest.raises(OptionsError) as info:
        validate({**REPLAY, "parse.bakend": "cpu", "foo": "1", "prompts.cont": "5"})
    message = str(info.value)
    count = len({o.key for o in OPTIONS} | {"connector", "property-version"})
    assert message == (
        "Unsupported options found for 'dspark-vllm'.\n\nUnsupported options:\n\nfoo\n"
        "parse.bakend (did you mean parse.backend or parse.batch-size?)\n"
        "prompts.cont (did you mean prompts.count or prompts.rate or prompts.path?)\n\n"
        f"Supported options: {count} keys, in the README's table of options (connector.options.OPTIONS)."
    )


def test_an_unknown_model_key_gets_the_nearest_keys_as_a_tables_does():
    """A misspelt model option got every supported key (~40) after it and no word of the one meant."""
    from connector.options import MODEL_OPTIONS, validate_model

    model = {"provider": "dspark-vllm", "endpoint": "http://127.0.0.1:8000", "model": "m"}
    with pytest.raises(OptionsError) as info:
        validate_model({**model, "request.temprature": "0.2"})
    assert str(info.value) == (
        "Unsupported options found for model provider 'dspark-vllm'.\n\nUnsupported options:\n\n"
        "request.temprature (did you mean request.temperature or request.store or request.timeout?)\n\n"
        f"Supported options: {len(MODEL_OPTIONS)} keys, in docs/flink.md's table of model options "
        "(connector.options.MODEL_OPTIONS)."
    )


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({**REQUEST, "prompts.rate": None, "prompts.source.connector": "kafka", "prompts.source.topic": "t"},
         "prompts.source.*"),
        ({**REQUEST, "prompts.column": "q"}, "prompts.column"),
        ({**REPLAY, "prompts.source.format": "raw", "parse.bakend": "cpu"}, "prompts.source.*"),
    ],
)  # fmt: skip
def test_a_retired_key_says_what_replaced_it_in_one_line(options, key):
    """Prompts from another table are read by ML_PREDICT over that table. A retired key is named, with
    what replaces it and where the docs show it, in one line, before any other check of the options."""
    with pytest.raises(OptionsError) as info:
        validate({k: v for k, v in options.items() if v is not None})
    message = str(info.value)
    assert message.startswith(f"Option '{key}' is retired") and "\n" not in message
    assert "ML_PREDICT" in message and "CREATE MODEL" in message
    assert "docs/flink.md, \"Enrichment: ML_PREDICT with a 'dspark-vllm' model\"" in message
    assert message in RETIRED.values()


def test_the_docs_section_a_retired_key_names_exists():
    assert "## Enrichment: `ML_PREDICT` with a `'dspark-vllm'` model" in (ROOT / "docs" / "flink.md").read_text()


def test_missing_required_option_names_itself():
    with pytest.raises(OptionsError, match="Missing required options are:\n\nconnector$"):
        validate({"mode": "replay"})


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        (
            "parse.backend",
            "tpu",
            "Could not parse value 'tpu' for key 'parse.backend'.\n\nExpected one of 'auto'",
        ),
        ("parse.batch-size", "many", "Expected an integer"),
        ("parse.batch-size", "0", "Option 'parse.batch-size' must be >= 1, got '0'."),
        ("python.fn-execution.bundle.time", "soon", "Expected a duration such as '30 s'"),
    ],
)
def test_values_are_typed(key, value, expected):
    with pytest.raises(OptionsError, match=re.escape(expected)):
        validate({**REPLAY, key: value})


def test_enum_and_boolean_are_case_insensitive():
    opts = validate({**REQUEST, "parse.backend": "CPU", "request.structured-output": "TRUE"})
    assert opts.get(PARSE_BACKEND) == "cpu" and opts.get(REQUEST_STRUCTURED_OUTPUT) is True


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30 s", 30.0), ("500ms", 0.5), ("2 min", 120.0), ("1h", 3600.0), ("250", 0.25), ("1.5 s", 1.5)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({**REQUEST, "endpoint": None}, "Option 'endpoint' is required when 'mode' = 'request'"),
        ({**REQUEST, "model": None}, "Option 'model' is required when 'mode' = 'request'"),
        (
            {**REQUEST, "prompts.path": "/p"},
            "Option 'prompts.path' and 'prompts.rate' shouldn't be set together",
        ),
        (
            {**REQUEST, "prompts.rate": None},
            "One of 'prompts.path' or 'prompts.rate' is required when 'mode' = 'request' (prompts from another "
            "table: read them with a table of their own connector and ask the model with ML_PREDICT",
        ),
        (
            {**REQUEST, "prompts.rate": None, "prompts.path": "/p", "prompts.count": "3"},
            "'prompts.count' needs",
        ),
        ({**REQUEST, "request.rate-limit": "nan"}, "Could not parse value 'nan' for key 'request.rate-limit'"),
        ({**REPLAY, "replay.path": None}, "Option 'replay.path' is required when 'mode' = 'replay'."),
        ({**REPLAY, "endpoint": "http://x"}, "Option 'endpoint' has no effect when 'mode' = 'replay'"),
        ({**REQUEST, "replay.path": "/r"}, "Option 'replay.path' has no effect when 'mode' = 'request'"),
        (
            {**REQUEST, "api-key": "k", "api-key.env": "K"},
            "'api-key' and 'api-key.env' shouldn't be set together",
        ),
        ({**REQUEST, "endpoint": "localhost:8000"}, "Option 'endpoint' must be an http(s) URL"),
        (
            {**REQUEST, "endpoint": "http://a:8000, b:8000"},
            "Option 'endpoint' must be an http(s) URL (one of several separated by commas) such as "
            "'http://127.0.0.1:8000', got 'b:8000'",
        ),
        (
            {**REQUEST, "endpoint": "http://a:8000,http://A:8000/v1"},
            "Option 'endpoint' names the replica 'http://A:8000/v1' twice",
        ),
        ({**REQUEST, "endpoint": "http://a:8000,"}, "got '': it is not an http(s) URL"),
        # a request's path given as the base URL: the request step adds it again, and every request answers 404
        (
            {**REQUEST, "endpoint": "http://a:8000/v1/chat/completions"},
            "got 'http://a:8000/v1/chat/completions': it ends in the request path '/v1/chat/completions', which the "
            "request step adds itself: give the server's base URL, such as 'http://a:8000'",
        ),
        ({**REQUEST, "endpoint": "http://a:8000,http://b:8000/v1/completions/"}, "ends in the request path"),
        # the scheme's own port written out or not: the same server (and replica name) twice
        ({**REQUEST, "endpoint": "http://a,http://A:80/"}, "Option 'endpoint' names the replica 'http://A:80/' twice"),
        ({**REQUEST, "endpoint": "https://a:443/v1,https://a"}, "names the replica 'https://a' twice"),
        # a path the jar's java.net.URI refuses: a job that fails on its TaskManagers, unless refused here
        ({**REQUEST, "endpoint": "http://a:8000/a%zz"}, "got 'http://a:8000/a%zz': its path holds"),
        ({**REQUEST, "endpoint": "http://a:8000,http://b:8000/{x}"}, "got 'http://b:8000/{x}': its path holds"),
        ({**REQUEST, "request.routing": "random"}, "Could not parse value 'random' for key 'request.routing'"),
        (
            {**REQUEST, "request.routing": "prefix", "request.routing.key-column": "user_id"},
            "Option 'request.routing.key-column' names an INPUT column of a model (ML_PREDICT); a 'dspark-vllm' "
            "table has none: remove it ('request.routing' = 'prefix' routes the table's prompts by their head).",
        ),
        ({**REPLAY, "parse.gpu-device": "first"}, "'parse.gpu-device' must be 'auto' or a device number"),
        (
            {**REQUEST, "request.concurrency": "8", "request.concurrency.max": "100"},
            "Option 'request.concurrency.max' needs 'request.concurrency' = 'auto'",
        ),
        (
            {**REQUEST, "request.concurrency": "auto", "request.concurrency.min": "9", "request.concurrency.max": "8"},
            "Option 'request.concurrency.min' (9) is larger than 'request.concurrency.max' (8)",
        ),
        ({**REQUEST, "request.concurrency": "many"}, "Expected an integer or 'auto'."),
        (
            {**REQUEST, "request.concurrency": "500", "request.queue-size": "100"},
            "Option 'request.queue-size' (100) is smaller than 'request.concurrency' (500)",
        ),
        ({**REQUEST, "request.concurrency": "0"}, "Option 'request.concurrency' must be >= 1, got '0'."),
        ({**REQUEST, "request.output-mode": "sorted"}, "Expected one of 'unordered', 'ordered'."),
        (
            {**REQUEST, "request.cache": "1 h"},
            "Option 'request.cache' answers from the responses kept in 'request.store'; set 'request.store'",
        ),
        ({**REPLAY, "request.store": "file:///s"}, "Option 'request.store' has no effect when 'mode' = 'replay'"),
        ({**REQUEST, "request.store": "file:///s", "request.cache": "soon"}, "Expected a duration such as"),
        (
            {**REPLAY, "python.fn-execution.arrow.batch.size": "60000"},
            "raise 'python.fn-execution.bundle.size' or lower 'python.fn-execution.arrow.batch.size'",
        ),
    ],
)
def test_rules_across_options(options, message):
    options = {k: v for k, v in options.items() if v is not None}
    with pytest.raises(OptionsError, match=re.escape(message)):
        validate(options)


def test_valid_request_and_replay_tables():
    assert validate(REQUEST).get(MODE) == "request"
    # A URL's scheme is case-insensitive (RFC 3986): 'HTTP://' was refused as "not an http(s) URL".
    validate({**REQUEST, "endpoint": "HTTP://a:8000, Https://b"})
    assert base_urls("HTTP://a:8000, Https://b") == ["http://a:8000", "https://b"]
    validate({**{k: v for k, v in REQUEST.items() if k != "prompts.rate"}, "prompts.path": "/p"})
    validate({**REPLAY, "parse.backend": "cpu", "replay.monitor-interval": "5 s"})


def test_markdown_lists_every_option():
    table = options_markdown()
    for option in OPTIONS:
        assert f"| `{option.key}` |" in table
    assert "| `request.timeout` | no | `1 min` | duration |" in table


def test_docs_match_the_code():
    # docs/flink.md (and the README, once it carries the table) hold options_markdown() between markers.
    for doc in (ROOT / "docs" / "flink.md", ROOT / "README.md"):
        if not doc.exists() or "<!-- options:start -->" not in doc.read_text():
            assert doc.name == "README.md", f"{doc} lacks the generated options table"
            continue
        text = doc.read_text()
        block = text.split("<!-- options:start -->\n")[1].split("<!-- options:end -->")[0]
        assert block == options_markdown(), f"{doc} is stale: run python -m connector.options --update {doc}"


def test_the_java_option_keys_match_the_code():
    """The factory declares the same keys to Flink (FactoryUtil) as `OPTIONS` (generated, never by hand)."""
    from connector.options import options_java

    java = ROOT / "java" / "src" / "main" / "java" / "io" / "dspark" / "vllm" / "sql" / "TableOptions.java"
    assert java.read_text() == options_java(), f"{java} is stale: run python -m connector.options --java {java}"


def test_a_body_limit_over_what_the_parser_reads_is_refused():
    """request.max-body-size stops at the parser's own limit (docs/json.md): a larger response could only be
    read to become an error row."""
    from connector.options import REQUEST_MAX_BODY_SIZE
    from connector.strict import MAX_BODY_BYTES

    assert REQUEST_MAX_BODY_SIZE.parse("256 mb") == MAX_BODY_BYTES
    with pytest.raises(OptionsError, match=r"^Option 'request.max-body-size' must be <= 268435456, got '257 mb'\.$"):
        REQUEST_MAX_BODY_SIZE.parse("257 mb")


@pytest.mark.parametrize("option", [o for o in OPTIONS if o.type == "duration"], ids=lambda o: o.key)
def test_a_duration_stops_at_a_year(option):
    """The JVM counts time in nanoseconds (2^63 ns: 292 years): 'request.retry.deadline' = '300000 d' overflowed
    its deadline, and every request failed at once. Every duration is refused past 365 days, in one line."""
    assert option.parse("365 d") == 365 * 86400
    with pytest.raises(OptionsError, match=rf"^Option '{option.key}' must be <= 365 d, got '366 d'\.$"):
        option.parse("366 d")


@pytest.mark.parametrize("value", ["1_0", "\u0663", "\u0661\u0665", " +\u0663 "])
def test_numbers_are_ascii_digits_as_flink_reads_them(value):
    """Python's int() and float() (and the regex \\d) take '1_0' and other scripts' digits; Flink's and Java's
    parsers do not, so such a value meant something else, or nothing, on the JVM side."""
    from connector.options import PARSE_BATCH_SIZE, PROMPTS_RATE, REQUEST_MAX_BODY_SIZE, REQUEST_TIMEOUT

    for option, text in ((PARSE_BATCH_SIZE, value), (PROMPTS_RATE, value), (REQUEST_TIMEOUT, value + " s"),
                         (REQUEST_MAX_BODY_SIZE, value + " mb")):  # fmt: skip
        with pytest.raises(OptionsError, match="^Could not parse value"):
            option.parse(text)
    with pytest.raises(OptionsError, match="'parse.gpu-device' must be 'auto' or a device number"):
        validate({**REPLAY, "parse.gpu-device": value})


def test_a_models_cache_needs_its_store_too():
    from connector.options import validate_model

    model = {"provider": "dspark-vllm", "endpoint": "http://127.0.0.1:1", "model": "m"}
    with pytest.raises(OptionsError, match=re.escape("Option 'request.cache' answers from the responses kept")):
        validate_model({**model, "request.cache": "1 h"})
    validate_model({**model, "request.store": "file:///s", "request.cache": "1 h"})


@pytest.mark.parametrize(
    "endpoint",
    ["http://user:sk-secret-42@127.0.0.1:8000", "http://sk-secret-42@127.0.0.1:8000",
     "http://127.0.0.1:8000/v1?key=sk-secret-42", "http://127.0.0.1:8000/#sk-secret-42",
     # a password with ',' (which separates replicas) or '/' (which ends a URL's authority) in it
     "http://user:sk-secret-42,x@127.0.0.1:8000", "http://user:sk-secret-42/x@127.0.0.1:8000",
     "http://127.0.0.1:8000,http://user:sk-secret-42,x@127.0.0.2:8000"],
)  # fmt: skip
def test_an_endpoint_with_a_secret_is_refused_without_repeating_it(endpoint):
    with pytest.raises(OptionsError) as raised:
        validate({**REQUEST, "endpoint": endpoint})
    assert "sk-secret" not in str(raised.value) and "user:" not in str(raised.value)
    assert str(raised.value).startswith("Option 'endpoint' must be an http(s) URL")


def test_the_format_options_are_declared_once():
    """'format' = 'dspark-vllm''s options are `FORMAT_OPTIONS` (connector.options): the jar's ConfigOptions are
    generated into TableOptions.java, the planner reads the declaration; no other file writes one of their keys
    or values."""
    from connector.options import FORMAT_ON_ERROR, FORMAT_OPTIONS, options_java

    generated = options_java()
    for option in FORMAT_OPTIONS:
        default = f'defaultValue("{option.default}")'
        assert f'ConfigOptions.key("{option.key}").stringType().{default}' in generated, option.key
    assert FORMAT_ON_ERROR.values == ("column", "skip", "fail") and FORMAT_ON_ERROR.default == "column"
    java = ROOT / "java" / "src" / "main" / "java" / "io" / "dspark" / "vllm"
    for path in java.rglob("*.java"):
        if path.name != "TableOptions.java":
            assert 'ConfigOptions.key("' not in path.read_text(), f"{path.name} declares an option of its own"
    declared = ROOT / "connector" / "options"
    for path in (ROOT / "connector").rglob("*.py"):
        if not path.is_relative_to(declared):
            text = path.read_text()
            assert '"on-error"' not in text and '"skip", "fail"' not in text, f"{path} declares a format option"
