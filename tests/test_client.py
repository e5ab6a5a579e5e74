"""The client against the simulator on 127.0.0.1: real sockets, every fault kind, retries and their limits."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import socket

import pytest

import connector.client
import connector.client.client as client_module
from connector.client import (
    BlockingClient,
    ClientConfig,
    RateLimiter,
    StreamAssembler,
    StreamError,
    VllmClient,
    backoff_delay,
    parse_retry_after,
    run_sync,
)
from connector.errors import OptionsError
from connector.profiles import load_profile
from connector.simulator.responses import BodyOptions, make_body, request_rng, to_bytes
from connector.simulator.server import system_fingerprint
from connector.simulator.testing import serve_simulator

CREATED = 1_760_000_555
FAST = {"backoff_initial_s": 0.001, "backoff_max_s": 0.002}


def chat(text: str = "hi", **extra: object) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": text}], **extra}


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


async def send_all(url: str, payloads: list[dict[str, object]], **options: object) -> list[connector.client.Outcome]:
    async with VllmClient(url, **options) as client:
        return await client.send_all(payloads)


@pytest.fixture(params=["asyncio", "httpx"], autouse=True)
def engine(request, monkeypatch) -> str:  # type: ignore[no-untyped-def]
    """Every test runs with both engines: the default asyncio one and httpx."""
    monkeypatch.setattr(client_module, "DEFAULT_ENGINE", request.param)
    return str(request.param)


@pytest.fixture(scope="module")
def sim():  # type: ignore[no-untyped-def]
    with serve_simulator(profiles=("openai", "math"), seed=2, created=CREATED, retry_after_s=0.01) as running:
        yield running


def test_public_names() -> None:
    public = {n for n in vars(connector.client) if not n.startswith("_")}
    public -= {"annotations", "client", "fasthttp", "outcome", "ratelimit", "retry", "sse", "sync"}
    assert sorted(connector.client.__all__) == sorted(public)


def test_outcomes_in_order_with_the_exact_bodies(sim) -> None:  # type: ignore[no-untyped-def]
    payloads = [chat(f"q{i}") if i % 2 else {"prompt": f"q{i}", "max_tokens": 50} for i in range(30)]
    outcomes = run(send_all(sim.url, payloads, concurrency=8))
    assert [o.index for o in outcomes] == list(range(30))
    for payload, outcome in zip(payloads, outcomes, strict=True):
        served = {**payload, "model": "meta-llama/Llama-3.1-8B-Instruct"}
        if "max_tokens" not in served:
            served["max_tokens"] = 4096  # the simulator fills in the default (or what is left of the context)
        options = BodyOptions(created=CREATED, system_fingerprint=system_fingerprint("0.32.0", 2))
        expected = make_body(request_rng(2, payload), "openai", served, options)
        assert (outcome.status, outcome.error, outcome.attempts, outcome.backoff_s) == (200, None, 1, 0.0)
        assert outcome.body == to_bytes(expected)
        assert outcome.ok and outcome.latency_ms > 0 and outcome.ttft_ms is None
        assert len(outcome.request_id) == 32


def test_base_url_with_v1_and_default_model(sim) -> None:  # type: ignore[no-untyped-def]
    (outcome,) = run(send_all(sim.url + "/v1/", [chat()], model="Qwen/Qwen2.5-Math-7B-Instruct"))
    assert json.loads(outcome.body)["model"] == "Qwen/Qwen2.5-Math-7B-Instruct"


def test_structured_output_sends_the_profile_schema(sim) -> None:  # type: ignore[no-untyped-def]
    import jsonschema

    payloads = [chat(f"q{i}", model="Qwen/Qwen2.5-Math-7B-Instruct") for i in range(10)]
    outcomes = run(send_all(sim.url, payloads, structured_output="math"))
    schema = load_profile("math").response_format()["json_schema"]["schema"]  # type: ignore[index]
    for outcome in outcomes:
        jsonschema.validate(json.loads(json.loads(outcome.body)["choices"][0]["message"]["content"]), schema)
    with pytest.raises(OptionsError, match="has no content schema"):
        VllmClient(sim.url, structured_output="openai")


def test_a_request_without_messages_or_prompt_is_an_outcome(sim) -> None:  # type: ignore[no-untyped-def]
    outcomes = run(send_all(sim.url, [{"model": "x"}, chat()]))
    assert (outcomes[0].attempts, outcomes[0].error) == (0, "the request has neither 'messages' nor 'prompt'")
    assert outcomes[1].ok


# --- retries ---


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_retryable_statuses_are_retried(sim, status: int) -> None:  # type: ignore[no-untyped-def]
    headers = {"x-dspark-fault": f"{status}*2"}
    outcomes = run(send_all(sim.url, [chat(f"r{i}") for i in range(3)], headers=headers, rng=random.Random(1), **FAST))
    for outcome in outcomes:
        assert (outcome.status, outcome.attempts, outcome.error) == (200, 3, None)
    if status in (429, 503):  # Retry-After: 0.01 is honoured exactly, instead of the backoff
        assert [o.backoff_s for o in outcomes] == [0.02, 0.02, 0.02]


def test_backoff_uses_the_jitter_rng(sim) -> None:  # type: ignore[no-untyped-def]
    (outcome,) = run(send_all(sim.url, [chat()], headers={"x-dspark-fault": "502*3"}, rng=random.Random(7), **FAST))
    rng = random.Random(7)
    expected = sum(backoff_delay(a, 0.001, 0.002, rng) for a in (1, 2, 3))
    assert (outcome.attempts, outcome.backoff_s) == (4, expected)


def test_retries_stop_at_max_attempts(sim) -> None:  # type: ignore[no-untyped-def]
    (outcome,) = run(send_all(sim.url, [chat()], headers={"x-dspark-fault": "503"}, max_attempts=3, **FAST))
    assert (outcome.status, outcome.attempts) == (503, 3)
    assert outcome.error == "HTTP 503: Service Unavailable (gave up after 3 attempts)"
    assert json.loads(outcome.body)["error"]["code"] == 503


def test_retry_after_is_capped(sim) -> None:  # type: ignore[no-untyped-def]
    headers = {"x-dspark-fault": "429*1"}
    (outcome,) = run(send_all(sim.url, [chat()], headers=headers, max_retry_after_s=0.005))
    assert (outcome.attempts, outcome.backoff_s) == (2, 0.005)


@pytest.mark.parametrize(
    ("fault", "status", "message"),
    [
        ("500", 500, "HTTP 500: simulated 500 (Internal Server Error)"),
    ],
)
def test_500_is_not_retried(sim, fault: str, status: int, message: str) -> None:  # type: ignore[no-untyped-def]
    (outcome,) = run(send_all(sim.url, [chat()], headers={"x-dspark-fault": fault}, **FAST))
    assert (outcome.status, outcome.attempts, outcome.error) == (status, 1, message)


def test_client_errors_are_not_retried(sim) -> None:  # type: ignore[no-untyped-def]
    outcomes = run(send_all(sim.url, [chat(model="nope"), chat(n=0), chat("x" * 40_000)], **FAST))
    assert [(o.status, o.attempts) for o in outcomes] == [(404, 1), (400, 1), (400, 1)]
    assert outcomes[0].error == (
        "HTTP 404: The model `nope` does not exist. Valid aliases: meta-llama/Llama-3.1-8B-Instruct, "
        "Qwen/Qwen2.5-Math-7B-Instruct."
    )
    assert outcomes[2].error.startswith("HTTP 400: This model's maximum context length is 8192 tokens.")


@pytest.mark.parametrize("fault", ["reset", "cut"])
def test_broken_connections_are_retried(sim, fault: str) -> None:  # type: ignore[no-untyped-def]
    once = run(send_all(sim.url, [chat(fault)], headers={"x-dspark-fault": f"{fault}*1"}, **FAST))[0]
    assert (once.status, once.attempts, once.error) == (200, 2, None)
    always = run(send_all(sim.url, [chat(fault)], headers={"x-dspark-fault": fault}, max_attempts=2, **FAST))[0]
    assert (always.status, always.body, always.attempts) == (None, None, 2)
    assert always.error.startswith(("ReadError", "RemoteProtocolError"))
    assert always.error.endswith("(gave up after 2 attempts)")


def test_a_hang_times_out_and_is_retried(sim) -> None:  # type: ignore[no-untyped-def]
    once = run(send_all(sim.url, [chat()], headers={"x-dspark-fault": "hang*1"}, timeout_s=0.5, **FAST))[0]
    assert (once.status, once.attempts, once.error) == (200, 2, None)
    always = run(
        send_all(sim.url, [chat()], headers={"x-dspark-fault": "hang"}, timeout_s=0.2, max_attempts=2, **FAST)
    )[0]
    assert (always.status, always.attempts) == (None, 2)
    assert always.error in (
        "timed out after 0.2 s (gave up after 2 attempts)",
        "ReadTimeout: timed out (gave up after 2 attempts)",
    )


def test_connect_errors_are_retried() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    (outcome,) = run(send_all(f"http://127.0.0.1:{port}", [chat()], max_attempts=3, **FAST))
    assert (outcome.status, outcome.attempts) == (None, 3)
    assert outcome.error.startswith("ConnectError: ")
    assert outcome.error.endswith("(gave up after 3 attempts)")


@pytest.mark.parametrize("fault", ["truncate", "malformed", "invalid-utf8", "big"])
def test_bad_bodies_arrive_as_they_were_sent(sim, fault: str) -> None:  # type: ignore[no-untyped-def]
    # The client hands 2xx bodies over untouched: judging them is the deserializer's job (error rows).
    (outcome,) = run(send_all(sim.url, [chat(fault)], headers={"x-dspark-fault": fault}))
    assert (outcome.status, outcome.attempts, outcome.error) == (200, 1, None)
    if fault == "big":
        assert len(outcome.body) > 4 * 1024 * 1024
    else:
        with pytest.raises(ValueError):
            json.loads(outcome.body)


def test_one_failure_never_fails_the_others() -> None:
    # (hangs have their own test: a timeout here would make the counts depend on the machine's speed)
    faults = {"500": 0.2, "reset": 0.1, "malformed": 0.1, "429": 0.1}
    with serve_simulator(seed=4, faults=faults, retry_after_s=0) as running:
        outcomes = run(send_all(running.url, [chat(f"q{i}") for i in range(120)], concurrency=16, max_attempts=1))
        stats = running.stats()
    assert [o.index for o in outcomes] == list(range(120))
    assert stats["fault 500"] > 10 and stats["fault reset"] > 5 and stats["fault 429"] > 5
    assert sum(o.status == 500 for o in outcomes) == stats["fault 500"]
    assert sum(o.status == 429 for o in outcomes) == stats["fault 429"]
    assert sum(o.status is None for o in outcomes) == stats["fault reset"]
    assert sum(o.ok for o in outcomes) == 120 - stats["fault 500"] - stats["fault reset"] - stats["fault 429"]


# --- concurrency, keep-alive, rate limit ---


def test_concurrency_bounds_requests_in_flight_and_connections() -> None:
    with serve_simulator(latency_ms=20) as running:
        # 10: pools of 4, 4 and 2 connections (connector.client.client.POOL_SHARD)
        outcomes = run(send_all(running.url, [chat(f"q{i}") for i in range(100)], concurrency=10))
        stats = running.stats()
    assert all(o.ok for o in outcomes)
    assert stats["in_flight_max"] == 10
    assert stats["connections_total"] == 10  # the pools keep their connections alive


def test_blocking_client_reuses_its_connection(sim) -> None:  # type: ignore[no-untyped-def]
    before = sim.stats()["connections_total"]
    with BlockingClient(sim.url, concurrency=1) as client:
        first = client.send_all([chat("a"), chat("b")])
        second = client.send(chat("c"), request_id="fixed-id")
    assert [o.ok for o in first] == [True, True]
    assert (second.ok, second.request_id) == (True, "fixed-id")
    assert sim.stats()["connections_total"] == before + 1
    assert [o.ok for o in run_sync(sim.url, [{"prompt": "x"}])] == [True]


def test_rate_limiter_spaces_requests() -> None:
    now = [0.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    async def go() -> list[float]:
        limiter = RateLimiter(4.0, clock=lambda: now[0], sleep=sleep)
        waits = [await limiter.acquire() for _ in range(4)]
        now[0] += 10.0  # idle: no credit is saved up beyond one slot
        waits += [await limiter.acquire() for _ in range(2)]
        return waits

    assert run(go()) == [0.0, 0.25, 0.25, 0.25, 0.0, 0.25]
    with pytest.raises(ValueError, match="rate must be > 0"):
        RateLimiter(0)


def test_rate_limit_option(sim) -> None:  # type: ignore[no-untyped-def]
    outcomes = run(send_all(sim.url, [chat(f"q{i}") for i in range(5)], rate_limit=200.0))
    assert all(o.ok for o in outcomes)


def test_backoff_and_retry_after_parsing() -> None:
    rng = random.Random(0)
    delays = [backoff_delay(a, 0.5, 4.0, rng) for a in range(1, 7)]
    steps = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert all(s / 2 <= d <= s for d, s in zip(delays, steps, strict=True))
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("0.25") == 0.25
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_option_validation() -> None:
    with pytest.raises(OptionsError, match="'concurrency' must be at least 1"):
        ClientConfig("http://x", concurrency=0)
    with pytest.raises(OptionsError, match="must start with http:// or https://"):
        ClientConfig("localhost:8000")
    with pytest.raises(OptionsError, match="'max_attempts' must be at least 1"):
        ClientConfig("http://x", max_attempts=0)


# --- secrets and TLS ---


def test_api_key_never_appears_in_logs_errors_or_reprs(monkeypatch, caplog, engine) -> None:  # type: ignore[no-untyped-def]
    secret = "sk-very-secret-0123456789"
    monkeypatch.setenv("DSPARK_VLLM_API_KEY", secret)
    caplog.set_level(logging.DEBUG)
    with serve_simulator(api_key=secret, faults={"503": 0.3}, retry_after_s=0.001) as running:
        good = run(send_all(running.url, [chat(f"q{i}") for i in range(10)], max_attempts=5))
        config = ClientConfig(running.url, api_key="sk-wrong-key-987")
        bad = run(send_all(running.url, [chat()], config=config))
        client = VllmClient(running.url)
        texts = [repr(client), repr(client.config), repr(config), *(repr(o) for o in good + bad)]
        run(client.aclose())
    assert all(o.ok for o in good)
    assert any(o.attempts > 1 for o in good)  # retries were logged
    assert "retrying" in caplog.text
    assert (bad[0].status, bad[0].error) == (401, "HTTP 401: Unauthorized")
    for text in [caplog.text, *texts]:
        assert secret not in text and "sk-wrong-key-987" not in text
    if engine == "httpx":
        assert any(r.name.startswith("httpcore") for r in caplog.records)  # the transport's debug log was on


def test_tls_is_verified_by_default(tls_server_context) -> None:  # type: ignore[no-untyped-def]
    with serve_simulator(ssl_context=tls_server_context) as running:
        assert running.url.startswith("https://")
        (refused,) = run(send_all(running.url, [chat()], **FAST))
        (allowed,) = run(send_all(running.url, [chat()], verify=False))
    assert (refused.status, refused.attempts) == (None, 1)  # a certificate problem is not retried
    assert refused.error.startswith("TLS failure: ")
    assert "CERTIFICATE_VERIFY_FAILED" in refused.error
    assert (allowed.status, allowed.error) == (200, None)


# --- streaming ---


def test_stream_gives_the_non_streaming_body(sim) -> None:  # type: ignore[no-untyped-def]
    payloads = [chat(f"s{i}", n=2, model="Qwen/Qwen2.5-Math-7B-Instruct") for i in range(6)]
    payloads.append({"prompt": "complete me", "max_tokens": 40})
    streamed = run(send_all(sim.url, payloads, stream=True))
    plain = run(send_all(sim.url, payloads))
    for s, p in zip(streamed, plain, strict=True):
        assert (s.status, s.error) == (200, None)
        assert s.ttft_ms is not None and 0 < s.ttft_ms <= s.latency_ms
        a, b = json.loads(s.body), json.loads(p.body)
        for key in ("id", "object", "created", "model", "system_fingerprint"):
            assert a[key] == b[key]
        for key in ("prompt_tokens", "total_tokens", "completion_tokens"):  # the usage chunk has no details
            assert a["usage"][key] == b["usage"][key]
        for ca, cb in zip(a["choices"], b["choices"], strict=True):
            for key in ("index", "finish_reason", "stop_reason"):
                assert ca[key] == cb[key]
            if "message" in cb:
                assert ca["message"]["content"] == cb["message"]["content"]
                assert ca["message"].get("reasoning") == cb["message"]["reasoning"]
            else:
                assert ca["text"] == cb["text"]


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ("truncate", "stream: the stream ended without [DONE] after "),
        ("malformed", "stream: event "),
        ("invalid-utf8", "stream: event "),
    ],
)
def test_broken_streams_are_errors_not_partial_rows(sim, fault: str, error: str) -> None:  # type: ignore[no-untyped-def]
    (outcome,) = run(send_all(sim.url, [chat("s")], stream=True, headers={"x-dspark-fault": fault}))
    assert (outcome.status, outcome.body, outcome.attempts) == (200, None, 1)
    assert outcome.error.startswith(error)
    if fault == "invalid-utf8":
        assert "is not valid UTF-8" in outcome.error
    if fault == "malformed":
        assert "is not valid JSON" in outcome.error


def test_stream_cut_mid_way_is_retried(sim) -> None:  # type: ignore[no-untyped-def]
    (outcome,) = run(send_all(sim.url, [chat("s")], stream=True, headers={"x-dspark-fault": "cut*1"}, **FAST))
    assert (outcome.status, outcome.attempts, outcome.error) == (200, 2, None)


def test_stream_assembler_edge_cases() -> None:
    a = StreamAssembler()
    a.feed(b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,')
    a.feed(b'"delta":{"role":"assistant","content":"he"},"finish_reason":null}]}\r\n\r\n: keep-alive\n\n')
    a.feed(b'data: {"choices":[{"index":0,"delta":{"content":"llo"},')
    a.feed(b'"finish_reason":"stop","stop_reason":null}]}\n\n')
    with pytest.raises(StreamError, match=r"without \[DONE\] after 2 events"):
        a.finish()
    a.feed(b"data: [DONE]\n\n")
    assert json.loads(a.finish())["choices"][0]["message"]["content"] == "hello"

    no_finish = StreamAssembler()
    no_finish.feed(b'data: {"object":"text_completion","choices":[{"index":0,"text":"x"}]}\n\ndata: [DONE]\n\n')
    with pytest.raises(StreamError, match=r"without a finish_reason for choice\(s\) \[0\]"):
        no_finish.finish()

    error = StreamAssembler()
    with pytest.raises(StreamError, match="error event 1: boom"):
        error.feed(b'data: {"error":{"message":"boom","type":"InternalServerError","code":500}}\n\n')
    assert error.error_body == b'{"error":{"message":"boom","type":"InternalServerError","code":500}}'


# --- through the deserializer ---


@pytest.mark.parametrize("profile", ["vl", "coder", "math"])
def test_outcomes_parse_into_rows_and_error_rows(profile: str) -> None:
    from connector.decode import parse_batch

    faults = {"truncate": 0.1, "malformed": 0.1, "invalid-utf8": 0.1, "500": 0.1}
    with serve_simulator(profiles=(profile,), seed=5, faults=faults) as running:
        payloads = [chat(f"q{i}", n=1 + i % 2) for i in range(80)]
        outcomes = run(send_all(running.url, payloads, structured_output=profile, concurrency=8))
        stats = running.stats()
    bodies = [o.body for o in outcomes if o.body is not None]
    assert len(bodies) == 80
    result = parse_batch(bodies, profile, backend="cpu")
    broken = stats["fault truncate"] + stats["fault malformed"] + stats["fault invalid-utf8"]
    assert result.errors.num_rows == broken + stats["fault 500"]  # an error body is an error row too
    assert result.table.num_rows == 80 - result.errors.num_rows
    assert result.table.column("content_error").null_count == result.table.num_rows  # structured output parses
    names = [p.name for p in load_profile(profile).content_properties]
    required = load_profile(profile).content_schema["required"]  # type: ignore[index]
    for name in required:
        assert name in names and result.table.column(name).null_count == 0
