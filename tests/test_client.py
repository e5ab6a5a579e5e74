"""What is left of the Python client: the request body a table sends (`prepare_request`, rendered by the
planner for the JVM's request step) and the options that shape it. Sending is the JVM's (RequesterTests)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

import connector.server
from connector.errors import OptionsError
from connector.server import ClientConfig, open_transport, prepare_request
from tests.http_support import Reply, http, raw_server


def chat(text: str = "hi", **extra: object) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": text}], **extra}


def test_public_names() -> None:
    public = {n for n in vars(connector.server) if not n.startswith("_")}
    public -= {"annotations", "cli", "discovery", "outcome", "request", "transport"}  # its modules
    assert sorted(connector.server.__all__) == sorted(public)


def test_option_validation() -> None:
    with pytest.raises(OptionsError, match=r"client option 'base_url' must be an http\(s\) URL"):
        ClientConfig("localhost:8000")
    with pytest.raises(OptionsError, match="'timeout_s' must be > 0"):
        ClientConfig("http://x", timeout_s=0)
    with pytest.raises(OptionsError, match="'max_body_bytes' must be at least 1024"):
        ClientConfig("http://x", max_body_bytes=10)
    with pytest.raises(OptionsError, match="'ca_bundle' must be unset when verify=False"):
        ClientConfig("https://x", verify=False, ca_bundle="ca.pem")
    with pytest.raises(OptionsError, match="'client_key' must be given with client_cert"):
        ClientConfig("https://x", client_key="key.pem")
    with pytest.raises(OptionsError, match="'headers' must be strings without line breaks"):
        ClientConfig("https://x", headers={"x-a": "1\r\nx-b: 2"})


def test_an_api_key_is_sent_only_when_the_config_has_one(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Before: $DSPARK_VLLM_API_KEY went to whatever server the client was pointed at.
    monkeypatch.setenv("DSPARK_VLLM_API_KEY", "sk-from-the-environment")

    async def headers(config: ClientConfig) -> bytes:
        heads: list[bytes] = []

        def answer(head: bytes, body: bytes) -> Reply:
            heads.append(head.lower())
            return Reply(http(200, b"{}"))

        async with raw_server(answer) as (url, _):
            transport = open_transport(replace(config, base_url=url))
            try:
                async with transport.request("GET", "/v1/models") as response:
                    await response.read()
            finally:
                await transport.aclose()
        return heads[0]

    unasked = asyncio.run(headers(ClientConfig("http://127.0.0.1:1")))
    asked = asyncio.run(headers(ClientConfig("http://127.0.0.1:1", api_key="sk-asked-for")))
    assert b"authorization" not in unasked and b"user-agent: dspark-vllm/" in unasked
    assert b"authorization: bearer sk-asked-for\r\n" in asked
    assert "sk-asked-for" not in repr(ClientConfig("http://127.0.0.1:1", api_key="sk-asked-for"))


def test_request_parameters_are_defaults_of_every_payload() -> None:
    params = {"n": 2, "temperature": 0.3, "top_p": 0.9, "stop": ["\n\n"], "seed": 7, "logprobs": 2, "max_tokens": 64}
    config = ClientConfig("http://x", params=params)
    payloads = [chat(), {"prompt": "p"}, chat(temperature=1.5), chat(logprobs=False)]
    bodies = [prepare_request(config, p) for p in payloads]
    common = {"n": 2, "top_p": 0.9, "stop": ["\n\n"], "seed": 7, "max_tokens": 64}
    assert bodies[0] == {**chat(), **common, "temperature": 0.3, "logprobs": True, "top_logprobs": 2}
    assert bodies[1] == {"prompt": "p", **common, "temperature": 0.3, "logprobs": 2}
    assert bodies[2] == {**chat(), **common, "temperature": 1.5, "logprobs": True, "top_logprobs": 2}
    assert bodies[3] == {**chat(), **common, "temperature": 0.3, "logprobs": False}


def test_the_default_model_and_structured_output() -> None:
    config = ClientConfig("http://x/v1", model="m", structured_output="coder")
    body = prepare_request(config, chat(), response_format=connector.server.response_format_of(config))
    assert config.root_url == "http://x"
    assert body["model"] == "m" and body["response_format"]["type"] == "json_schema"
    assert prepare_request(config, chat(model="own"))["model"] == "own"  # the payload's own values win


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"temprature": 0.2}, r"unknown request parameter 'temprature': use one of n, max_tokens, .*"),
        ({"n": 0}, r"request parameter 'n' must be an integer >= 1, got 0"),
        ({"n": True}, r"request parameter 'n' must be an integer >= 1, got True"),
        ({"top_p": 1.5}, r"request parameter 'top_p' must be a number in \(0, 1\], got 1.5"),
        ({"temperature": float("nan")}, r"request parameter 'temperature' must be a number >= 0, got nan"),
        ({"stop": "\n"}, r"request parameter 'stop' must be a list of non-empty strings, got '\\n'"),
        ({"logprobs": 21}, r"request parameter 'logprobs' must be an integer in \[0, 20\], got 21"),
    ],
)
def test_request_parameters_are_checked(params: dict[str, Any], match: str) -> None:
    with pytest.raises(OptionsError, match=match):
        ClientConfig("http://x", params=params)
