"""The client against the simulator on 127.0.0.1: real sockets, every fault kind, retries and their limits."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import random
import re
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

import connector.client
from connector.client import (
    BlockingClient,
    ClientConfig,
    RateLimiter,
    StreamAssembler,
    VllmClient,
    backoff_delay,
    parse_retry_after,
    run_sync,
)
from connector.errors import OptionsError, StreamError
from connector.profiles import load_profile
from connector.simulator.responses import BodyOptions, make_body, request_rng, to_bytes
from connector.simulator.server import system_fingerprint
from connector.simulator.testing import serve_simulator
from tests.http_support import http, prompt_of, raw_server

CREATED = 1_760_000_555
# Retries without the gate, at once (the gate has its own tests).
FAST = {"backoff_initial_s": 0.001, "backoff_max_s": 0.002, "hold_while_down": False}


def gave_up(attempts: int) -> str:
    """The end of a given-up request's error; with why, when the next wait would end past the deadline."""
    plural = "attempt" if attempts == 1 else "attempts"
    why = r"(: the (Retry-After|backoff) wait of \d+\.\d s ends past the deadline, \d+\.\d s away)?"
    return rf" \(gave up after {attempts} {plural} in \d+\.\d s{why}\)$"


def chat(text: str = "hi", **extra: object) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": text}], **extra}


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


@contextlib.asynccontextmanager
async def capture_server() -> AsyncIterator[tuple[str, list[tuple[str, dict[str, str], Any]]]]:
    """A server (aiohttp.web, on this loop) that answers every completion with one fixed body and keeps what
    it was sent: (path, headers with lower-case names, JSON body)."""
    seen: list[tuple[str, dict[str, str], Any]] = []

    async def handle(request: web.Request) -> web.Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        seen.append((request.path, headers, await request.json()))
        return web.Response(body=b'{"id":"c","choices":[]}', content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    app.router.add_post("/v1/completions", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def send_all(url: str, payloads: list[dict[str, object]], **options: object) -> list[connector.client.Outcome]:
    async with VllmClient(url, **options) as client:
        return await client.send_all(payloads)


@pytest.fixture(scope="module")
def sim():  # type: ignore[no-untyped-def]
    with serve_simulator(profiles=("openai", "math"), seed=2, created=CREATED, retry_after_s=0.01) as running:
        yield running


def test_public_names() -> None:
    public = {n for n in vars(connector.client) if not n.startswith("_")}
    modules = {"annotations", "cli", "client", "discovery", "gate", "outcome", "params", "ratelimit", "retry", "sse"}
    public -= modules | {"sync", "transport"}
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
    assert (outcomes[0].attempts, outcomes[0].error_kind) == (0, "request")
    assert outcomes[0].error == "request: the request has neither 'messages' nor 'prompt'"
    assert outcomes[1].ok


def test_a_request_that_is_not_a_mapping_is_an_outcome(sim) -> None:  # type: ignore[no-untyped-def]
    # Each of these raised out of send_all (a str holding "messages" passed the check, then dict() of it
    # failed; a number is not searchable; stream_options of 5 is not a mapping): every prompt was lost.
    payloads = [5, "messages", ["prompt"], None, {"messages": [], "stream": True, "stream_options": 5}, chat()]
    outcomes = run(send_all(sim.url, payloads))  # type: ignore[arg-type]
    for outcome in outcomes[:5]:
        assert (outcome.attempts, outcome.error_kind, outcome.body) == (0, "request", None)
    assert [o.error for o in outcomes[:4]] == ["request: the request is not a JSON object (a mapping)"] * 4
    assert outcomes[4].error == "request: 'stream_options' is not a JSON object (a mapping)"
    assert outcomes[5].ok
    assert [o.index for o in outcomes] == list(range(6))


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
    assert (outcome.status, outcome.attempts, outcome.error_kind) == (503, 3, "status")
    assert re.fullmatch("status: HTTP 503: Service Unavailable" + gave_up(3), outcome.error)
    assert json.loads(outcome.body)["error"]["code"] == 503


def test_retry_after_is_capped(sim) -> None:  # type: ignore[no-untyped-def]
    headers = {"x-dspark-fault": "429*1"}
    # (the backoff, 0.001-0.002 s here, is shorter: the Retry-After of 0.01 s, cut to 0.005 s, is the wait)
    options = {"backoff_initial_s": 0.001, "backoff_max_s": 0.002, "hold_while_down": False}
    (outcome,) = run(send_all(sim.url, [chat()], headers=headers, max_retry_after_s=0.005, **options))
    assert (outcome.attempts, outcome.backoff_s) == (2, 0.005)


@pytest.mark.parametrize(
    ("fault", "status", "message"),
    [
        ("500", 500, "status: HTTP 500: simulated 500 (Internal Server Error)"),
    ],
)
def test_500_is_not_retried(sim, fault: str, status: int, message: str) -> None:  # type: ignore[no-untyped-def]
    (outcome,) = run(send_all(sim.url, [chat()], headers={"x-dspark-fault": fault}, **FAST))
    assert (outcome.status, outcome.attempts, outcome.error) == (status, 1, message)


def test_client_errors_are_not_retried(sim) -> None:  # type: ignore[no-untyped-def]
    outcomes = run(send_all(sim.url, [chat(model="nope"), chat(n=0), chat("x" * 40_000)], **FAST))
    assert [(o.status, o.attempts) for o in outcomes] == [(404, 1), (400, 1), (400, 1)]
    assert outcomes[0].error == (
        "status: HTTP 404: The model `nope` does not exist. Valid aliases: meta-llama/Llama-3.1-8B-Instruct, "
        "Qwen/Qwen2.5-Math-7B-Instruct."
    )
    assert outcomes[2].error.startswith("status: HTTP 400: This model's maximum context length is 8192 tokens.")


@pytest.mark.parametrize("fault", ["reset", "cut"])
def test_broken_connections_are_retried(sim, fault: str) -> None:  # type: ignore[no-untyped-def]
    once = run(send_all(sim.url, [chat(fault)], headers={"x-dspark-fault": f"{fault}*1"}, **FAST))[0]
    assert (once.status, once.attempts, once.error) == (200, 2, None)
    always = run(send_all(sim.url, [chat(fault)], headers={"x-dspark-fault": fault}, max_attempts=2, **FAST))[0]
    # A reset comes before the response head; a cut after it (the head promised the whole body).
    assert (always.status, always.body, always.attempts, always.error_kind) == (
        None if fault == "reset" else 200,
        None,
        2,
        "stream",
    )
    # (a reset reads as the connection reset, or closed, depending on when the RST arrives)
    message = {
        "reset": "the (server closed the connection|connection broke): .+",
        "cut": "the response body broke off: .+",
    }[fault]
    assert re.fullmatch("stream: " + message + gave_up(2), always.error)


def test_a_hang_times_out_and_is_retried(sim) -> None:  # type: ignore[no-untyped-def]
    once = run(send_all(sim.url, [chat()], headers={"x-dspark-fault": "hang*1"}, timeout_s=0.5, **FAST))[0]
    assert (once.status, once.attempts, once.error) == (200, 2, None)
    always = run(
        send_all(sim.url, [chat()], headers={"x-dspark-fault": "hang"}, timeout_s=0.2, max_attempts=2, **FAST)
    )[0]
    assert (always.status, always.attempts, always.error_kind) == (None, 2, "timeout")
    assert re.fullmatch(r"timeout: no complete response within 0\.2 s" + gave_up(2), always.error)


def test_connect_errors_are_retried() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    (outcome,) = run(send_all(f"http://127.0.0.1:{port}", [chat()], max_attempts=3, **FAST))
    assert (outcome.status, outcome.attempts, outcome.error_kind) == (None, 3, "connect")
    assert re.fullmatch(
        rf"connect: cannot connect to the server: 127\.0\.0\.1:{port}: \[Errno 111\] .+" + gave_up(3),
        outcome.error,
    )


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
        outcomes = run(
            send_all(running.url, [chat(f"q{i}") for i in range(120)], concurrency=16, max_attempts=1, **FAST)
        )
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
        outcomes = run(send_all(running.url, [chat(f"q{i}") for i in range(100)], concurrency=10))
        stats = running.stats()
    assert all(o.ok for o in outcomes)
    assert stats["in_flight_max"] == 10
    assert stats["connections_total"] == 10  # the pool keeps its connections alive


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
    with pytest.raises(OptionsError, match="'deadline_s' must be > 0"):
        ClientConfig("http://x", deadline_s=0)
    with pytest.raises(OptionsError, match="'max_body_bytes' must be at least 1024"):
        ClientConfig("http://x", max_body_bytes=10)
    with pytest.raises(OptionsError, match="'ca_bundle' must be unset when verify=False"):
        ClientConfig("https://x", verify=False, ca_bundle="ca.pem")
    with pytest.raises(OptionsError, match="'client_key' must be given with client_cert"):
        ClientConfig("https://x", client_key="key.pem")
    with pytest.raises(OptionsError, match="'headers' must be strings without line breaks"):
        ClientConfig("https://x", headers={"x-a": "1\r\nx-b: 2"})


# --- secrets and TLS ---


def test_api_key_never_appears_in_logs_errors_or_reprs(caplog) -> None:  # type: ignore[no-untyped-def]
    secret = "sk-very-secret-0123456789"
    caplog.set_level(logging.DEBUG)
    with serve_simulator(api_key=secret, faults={"503": 0.3}, retry_after_s=0.001) as running:
        payloads = [chat(f"q{i}") for i in range(10)]
        good = run(send_all(running.url, payloads, api_key=secret, max_attempts=5, hold_while_down=False))
        gated = run(send_all(running.url, payloads, api_key=secret, backoff_initial_s=0.01))
        config = ClientConfig(running.url, api_key="sk-wrong-key-987")
        bad = run(send_all(running.url, [chat()], config=config))
        client = VllmClient(running.url, api_key=secret)
        texts = [repr(client), repr(client.config), repr(config), *(repr(o) for o in good + gated + bad)]
        run(client.aclose())
    assert all(o.ok for o in good + gated)
    assert any(o.attempts > 1 for o in good)  # retries were logged, and the gate's closing
    assert "retrying" in caplog.text and "the server looks down (status: HTTP 503" in caplog.text
    assert (bad[0].status, bad[0].error) == (401, "status: HTTP 401: Unauthorized")
    for text in [caplog.text, *texts]:
        assert secret not in text and "sk-wrong-key-987" not in text


def test_an_api_key_is_sent_only_when_the_config_has_one(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Before: $DSPARK_VLLM_API_KEY went to whatever server the client was pointed at.
    monkeypatch.setenv("DSPARK_VLLM_API_KEY", "sk-from-the-environment")

    async def go() -> list[dict[str, str]]:
        async with capture_server() as (url, seen):
            await send_all(url, [chat()])
            await send_all(url, [chat()], api_key="sk-asked-for")
        return [headers for _, headers, _ in seen]

    unasked, asked = run(go())
    assert "authorization" not in unasked
    assert asked["authorization"] == "Bearer sk-asked-for"


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


# --- outages: retries up to a deadline, and the gate ---


@pytest.mark.slow
def test_a_restart_on_the_same_port_costs_no_request_and_few_attempts() -> None:
    # Before: 3 retries within ~2-3.5 s, then "ConnectError ... gave up after 4 attempts" for every request
    # sent while the server was down. Now requests wait at the gate (one probe per backoff step) and go on.
    n, concurrency = 60, 4
    stack = contextlib.ExitStack()
    first = stack.enter_context(serve_simulator(latency_ms=20))
    url, port = first.url, first.port

    async def go() -> tuple[list[connector.client.Outcome], int]:
        outcomes = []
        async with VllmClient(url, concurrency=concurrency, backoff_initial_s=0.05, backoff_max_s=0.2) as client:
            async for outcome in client.iter_outcomes(chat(f"q{i}") for i in range(n)):
                outcomes.append(outcome)
                if len(outcomes) == 10:  # down for longer than the old retry budget, back on the same port
                    await asyncio.to_thread(stack.close)
                    await asyncio.sleep(4.0)
                    second = await asyncio.to_thread(stack.enter_context, serve_simulator(port=port))
                    restarted.append(second)
            assert client.gate is not None
            return outcomes, client.gate.probes

    restarted: list[Any] = []
    with stack:
        outcomes, probes = run(go())
        served = first.stats()["status_200"] + restarted[0].stats()["status_200"]
    assert sorted(o.index for o in outcomes) == list(range(n))
    assert [o.error for o in outcomes if not o.ok] == []
    assert probes >= 1
    # The requests in flight when it went down and those that tried before the gate closed: no more.
    assert sum(o.attempts for o in outcomes) - n <= 4 * concurrency
    assert served >= n  # (an answer the first server wrote as it went down may never have arrived)


def test_the_deadline_bounds_a_request_while_the_server_stays_down() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed

    async def go() -> tuple[list[connector.client.Outcome], int]:
        options = {"deadline_s": 0.5, "backoff_initial_s": 0.01, "backoff_max_s": 0.05, "concurrency": 2}
        async with VllmClient(f"http://127.0.0.1:{port}", **options) as client:  # type: ignore[arg-type]
            outcomes = await client.send_all([chat(f"q{i}") for i in range(6)])
            assert client.gate is not None
            return outcomes, client.gate.probes

    outcomes, probes = run(go())
    assert {o.error_kind for o in outcomes} == {"connect"}
    # The gate held them back: one attempt each at most (the first ones, before it closed), then probes only.
    assert all(o.attempts <= 1 for o in outcomes) and sum(o.attempts for o in outcomes) >= 1
    assert probes >= 2
    for o in outcomes:
        assert re.fullmatch(
            rf"connect: cannot connect to the server: 127\.0\.0\.1:{port}: .+" + gave_up(o.attempts), o.error
        )


def test_without_the_gate_each_request_retries_until_its_deadline() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options = {"deadline_s": 0.3, "backoff_initial_s": 0.01, "backoff_max_s": 0.02, "hold_while_down": False}
    (outcome,) = run(send_all(f"http://127.0.0.1:{port}", [chat()], **options))
    assert outcome.error_kind == "connect" and outcome.attempts > 3
    assert re.fullmatch(r"connect: .+" + gave_up(outcome.attempts), outcome.error)


# --- every failure says its kind ---


@pytest.mark.parametrize(
    ("fault", "kind", "message"),
    [
        ("reset", "stream", "the (server closed the connection|connection broke): .+"),
        ("cut", "stream", "the response body broke off: .+"),
        ("hang", "timeout", r"no complete response within 0\.2 s"),
        ("500", "status", r"HTTP 500: simulated 500 \(Internal Server Error\)"),
        ("503", "status", "HTTP 503: Service Unavailable"),
    ],
)
def test_every_failure_reason_names_its_kind_and_says_what_happened(sim, fault: str, kind: str, message: str) -> None:  # type: ignore[no-untyped-def]
    # Before: "ReadError: " with nothing after it, and no kind to count errors by.
    headers = {"x-dspark-fault": fault}
    (outcome,) = run(send_all(sim.url, [chat(fault)], headers=headers, timeout_s=0.2, max_attempts=1, **FAST))
    assert outcome.error_kind == kind
    assert re.match(rf"{kind}: {message}", outcome.error), outcome.error


def test_a_reason_is_never_empty() -> None:
    from connector.errors import StreamError as Broken

    assert (
        str(Broken(""))
        == "stream: The response broke off before its end, or a server-sent event stream broke its rules"
    )
    assert str(Broken("  ")).startswith("stream: The response")


# --- request parameters ---


def test_request_parameters_are_defaults_of_every_payload() -> None:
    params = {"n": 2, "temperature": 0.3, "top_p": 0.9, "stop": ["\n\n"], "seed": 7, "logprobs": 2, "max_tokens": 64}

    async def go() -> list[tuple[str, dict[str, str], Any]]:
        async with capture_server() as (url, seen):
            await send_all(
                url,
                [chat(), {"prompt": "p"}, chat(temperature=1.5), chat(logprobs=False)],
                params=params,
                concurrency=1,
            )
        return seen

    seen = run(go())
    bodies = {i: body for i, (_, _, body) in enumerate(seen)}
    common = {"n": 2, "top_p": 0.9, "stop": ["\n\n"], "seed": 7, "max_tokens": 64}
    assert bodies[0] == {**chat(), **common, "temperature": 0.3, "logprobs": True, "top_logprobs": 2}
    assert bodies[1] == {"prompt": "p", **common, "temperature": 0.3, "logprobs": 2}
    assert bodies[2] == {**chat(), **common, "temperature": 1.5, "logprobs": True, "top_logprobs": 2}
    assert bodies[3] == {**chat(), **common, "temperature": 0.3, "logprobs": False}


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


# --- server-sent events ---


def _events(*contents: str) -> list[bytes]:
    events = []
    for i, text in enumerate(contents):
        last = i == len(contents) - 1
        chunk = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop" if last else None}],
        }
        events.append(json.dumps(chunk).encode())
    return events


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
def test_sse_lines_end_with_lf_crlf_or_cr_however_the_stream_is_cut(end: bytes) -> None:
    # Before: a lone CR did not end a line, so a CR-only stream never produced an event.
    stream = b"".join(b"data: " + e + end + end for e in _events("he", "llo")) + b": ping" + end + end
    stream += b"data: [DONE]" + end + end
    for cut in range(len(stream) + 1):
        assembler = StreamAssembler()
        assembler.feed(stream[:cut])
        assembler.feed(stream[cut:])
        assert json.loads(assembler.finish())["choices"][0]["message"]["content"] == "hello", cut
    byte_by_byte = StreamAssembler()
    for i in range(len(stream)):
        byte_by_byte.feed(stream[i : i + 1])
    assert byte_by_byte.events == 3 and json.loads(byte_by_byte.finish())["choices"][0]["message"]["content"] == "hello"


def test_sse_strips_one_space_after_data() -> None:
    # Before: every leading space was stripped, so "data:  x" lost a space that is part of the data.
    assembler = StreamAssembler()
    assembler._line(b"data:  two spaces")
    assembler._line(b"data:none")
    assembler._line(b"data")
    assert assembler._data == [b" two spaces", b"none", b""]


def test_sse_keeps_streamed_logprobs() -> None:
    def chunk(token: str, finish: str | None) -> bytes:
        logprobs = {"content": [{"token": token, "logprob": -0.5, "bytes": list(token.encode()), "top_logprobs": []}]}
        choice = {"index": 0, "delta": {"content": token}, "logprobs": logprobs, "finish_reason": finish}
        return b"data: " + json.dumps({"object": "chat.completion.chunk", "choices": [choice]}).encode() + b"\n\n"

    assembler = StreamAssembler()
    assembler.feed(chunk("a", None) + chunk("b", "stop") + b"data: [DONE]\n\n")
    logprobs = json.loads(assembler.finish())["choices"][0]["logprobs"]
    assert [t["token"] for t in logprobs["content"]] == ["a", "b"]


def test_sse_a_chunk_of_the_wrong_shape_is_a_stream_error() -> None:
    assembler = StreamAssembler()
    with pytest.raises(StreamError, match=r"event 1 is not a completion chunk: AttributeError: "):
        assembler.feed(b'data: {"choices": [1]}\n\n')


# --- hostile servers: one bad answer is one outcome, retries stay paced ---


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        # Before: RecursionError out of json.loads in _error_message, and send_all raised it.
        (http(500, b"[" * 100_000), r"status: HTTP 500: \[{200}"),
        # Before: OverflowError out of parse_retry_after (a year, an offset beyond what datetime holds).
        (http(429, b"{}", b"retry-after: Mon, 01 Jan 99999999999 00:00:00 GMT\r\n"), "status: HTTP 429: {}"),
        (http(429, b"{}", b"retry-after: Mon, 01 Jan 2024 00:00:00 +9999999999999999\r\n"), "status: HTTP 429: {}"),
    ],
    ids=["deep-500-body", "retry-after-year", "retry-after-offset"],
)
def test_a_hostile_error_answer_is_that_requests_outcome(bad: bytes, message: str) -> None:
    async def go() -> list[connector.client.Outcome]:
        async with raw_server(lambda head, body: bad if prompt_of(body) == "p3" else http(200)) as (url, _):
            return await send_all(url, [chat(f"p{i}") for i in range(10)], max_attempts=2, deadline_s=5, **FAST)

    outcomes = run(go())
    assert [o.index for o in outcomes] == list(range(10))
    assert [o.ok for o in outcomes] == [i != 3 for i in range(10)]
    assert outcomes[3].error_kind == "status" and re.match(message, outcomes[3].error), outcomes[3].error


def test_an_unexpected_exception_is_a_protocol_outcome_and_cancellation_passes(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    # Before: whatever _attempt did not foresee left send_all, and every other request's outcome was lost.
    judge = connector.client.client._judge

    def flaky_judge(status: int, body: bytes, headers: Any) -> Any:
        if b'"p1"' in body or b'"p3"' in body:
            raise ZeroDivisionError("the unforeseen")
        if b'"cancel"' in body:
            raise asyncio.CancelledError
        return judge(status, body, headers)

    monkeypatch.setattr(connector.client.client, "_judge", flaky_judge)
    caplog.set_level(logging.DEBUG, logger="connector.client")

    async def go() -> list[connector.client.Outcome]:
        async with raw_server(lambda head, body: http(200, body)) as (url, seen):  # an echo: the body is the request
            outcomes = await send_all(url, [chat(f"p{i}") for i in range(5)], deadline_s=5, **FAST)
            assert len(seen) == 5  # not retried
            async with VllmClient(url, **FAST) as client:  # type: ignore[arg-type]
                with pytest.raises(asyncio.CancelledError):
                    await client.send(chat("cancel"))
            return outcomes

    outcomes = run(go())
    assert [o.ok for o in outcomes] == [True, False, True, False, True]
    for o in (outcomes[1], outcomes[3]):
        assert (o.error_kind, o.status, o.attempts) == ("protocol", 200, 1)
        assert o.error == "protocol: the client could not handle the response: ZeroDivisionError: the unforeseen"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info and "ZeroDivisionError" in caplog.text  # once, with traceback


def test_backoff_never_overflows_and_the_gate_reopens_after_a_long_outage() -> None:
    # Before: initial_s * 2 ** (n - 1) raised OverflowError from step 1026 on; the gate's prober died with it
    # ("Task exception was never retrieved") and the gate never opened again.
    rng = random.Random(0)
    assert 5.0 <= backoff_delay(10**9, 0.5, 10.0, rng) <= 10.0
    assert backoff_delay(2000, 0.0, 0.0, rng) == 0.0

    async def go() -> tuple[bool, int]:
        calls = [0]

        async def probe() -> bool:
            calls[0] += 1
            if calls[0] <= 3:
                raise RuntimeError("a bug in a probe")  # must not end the probing either
            return calls[0] > 1100

        gate = connector.client.Gate(probe, 0.0, 0.0, random.Random(0))
        gate.close(StreamError("down"))
        opened = await gate.wait(20.0)
        await gate.aclose()
        return opened, gate.probes

    assert run(go()) == (True, 1101)


def test_a_request_given_up_for_a_wait_past_its_deadline_says_so() -> None:
    # Before: "status: HTTP 429: slow down (gave up after 1 attempts in 0.0 s)", with no word of why.
    async def go(**options: object) -> connector.client.Outcome:
        answer = http(429, b'{"error":{"message":"slow down"}}', b"retry-after: 30\r\n")
        async with raw_server(lambda head, body: answer) as (url, seen):
            (outcome,) = await send_all(url, [chat()], hold_while_down=False, deadline_s=10.0, **options)
            return outcome

    outcome = run(go(max_retry_after_s=60.0))
    assert outcome.attempts == 1
    assert re.fullmatch(
        r"status: HTTP 429: slow down \(gave up after 1 attempt in \d+\.\d s: the Retry-After wait of 30\.0 s ends past the "
        r"deadline, \d+\.\d s away\)",
        outcome.error,
    )
    outcome = run(go(max_retry_after_s=0.01, backoff_initial_s=40.0, backoff_max_s=40.0))
    assert re.fullmatch(
        r"status: HTTP 429: slow down \(gave up after 1 attempt in \d+\.\d s: the backoff wait of \d+\.\d s ends past the "
        r"deadline, \d+\.\d s away\)",
        outcome.error,
    )


@pytest.mark.parametrize("retry_after", ["0", "-10", "Wed, 21 Oct 2015 07:28:00 GMT", "0.0001"])
def test_a_retry_after_of_nothing_falls_back_to_the_backoff(retry_after: str) -> None:
    # Before: each 429 was retried at once: ~78,000 requests in 16 s from 4 prompts.
    async def go() -> tuple[connector.client.Outcome, int]:
        answer = http(429, b"{}", b"retry-after: %s\r\n" % retry_after.encode())
        async with raw_server(lambda head, body: answer) as (url, seen):
            options = {"backoff_initial_s": 0.04, "backoff_max_s": 0.04, "hold_while_down": False, "deadline_s": 0.5}
            (outcome,) = await send_all(url, [chat()], **options)
            return outcome, len(seen)

    outcome, served = run(go())
    assert outcome.error_kind == "status" and outcome.status == 429
    assert served == outcome.attempts <= 1 + 0.5 / 0.02  # each wait at least half a step
    assert outcome.backoff_s >= 0.02 * (outcome.attempts - 1)


def test_a_503_waits_its_retry_after_even_when_health_answers() -> None:
    # Before: a 503 closed the gate, the request skipped its Retry-After and backoff, and /health reopened the
    # gate after the first probe step: a POST every probe step (40 in 15 s with the defaults).
    def answer(head: bytes, body: bytes) -> bytes:
        if head.startswith(b"GET /health"):
            return http(200, b"")
        return http(503, b'{"error":{"message":"overloaded"}}', b"retry-after: 0.25\r\n")

    async def go() -> tuple[connector.client.Outcome, list[float]]:
        async with raw_server(answer) as (url, seen):
            options = {"backoff_initial_s": 0.01, "backoff_max_s": 0.02, "deadline_s": 1.0}
            (outcome,) = await send_all(url, [chat()], **options)
            return outcome, [t for t, head, _ in seen if head.startswith(b"POST")]

    outcome, posts = run(go())
    assert outcome.status == 503 and outcome.attempts == len(posts) <= 4
    assert all(b - a >= 0.24 for a, b in itertools.pairwise(posts)), posts


def test_the_gate_step_grows_while_only_probes_get_through() -> None:
    # Before: every close started the probes again at the first (shortest) step.
    async def go() -> list[float]:
        async def probe() -> bool:
            return True  # /health answers, but each attempt closes the gate again

        gate = connector.client.Gate(probe, 0.02, 0.32, random.Random(0))
        loop = asyncio.get_running_loop()
        took = []
        for i in range(6):
            if i == 5:
                gate.open()  # an attempt reached the server: back to the first step
            gate.close(StreamError("503"))
            start = loop.time()
            assert await gate.wait(5.0)
            took.append(loop.time() - start)
        await gate.aclose()
        return took

    took = run(go())
    steps = [0.02, 0.04, 0.08, 0.16, 0.32, 0.02]
    assert all(s / 2 - 0.005 <= t <= s + 0.1 for t, s in zip(took, steps, strict=True)), took


def test_error_texts_are_valid_utf8() -> None:
    # Before: a lone surrogate from a JSON escape, or from a header byte that is not UTF-8, made an error that
    # neither .encode("utf-8") nor Arrow (so no Flink row) takes.
    import pyarrow as pa

    def answer(head: bytes, body: bytes) -> bytes:
        if prompt_of(body) == "json":
            return http(400, b'{"error":{"message":"prompt contains \\ud83d, not \\ud83d\\ude00"}}')
        return http(302, b"", b"location: http://h/\xff\xfe\xc3(\r\n")

    async def go() -> list[connector.client.Outcome]:
        async with raw_server(answer) as (url, _):
            return await send_all(url, [chat("json"), chat("header")], **FAST)

    outcomes = run(go())
    assert [o.error for o in outcomes] == [
        "status: HTTP 400: prompt contains \\ud83d, not \U0001f600",
        "status: HTTP 302: redirects are not followed: point base_url at http://h/\\udcff\\udcfe\\udcc3(",
    ]
    assert pa.array([o.error for o in outcomes], pa.string()).to_pylist() == [o.error for o in outcomes]
    made = connector.client.Outcome(0, None, None, 0.0, 1, "r", "stream: a \udc80 b", error_kind="stream")
    assert made.error == "stream: a \\udc80 b"


def test_a_408_is_retried_on_a_new_connection() -> None:
    # A server that closes a kept-alive connection just as a request goes out on it answers 408 to a request
    # it never read (HTTP lets the client repeat it). Before: the 408 was the request's error.
    tries: dict[str, int] = {}

    def answer(head: bytes, body: bytes) -> bytes:
        tries[prompt_of(body)] = tries.get(prompt_of(body), 0) + 1
        if tries[prompt_of(body)] == 1:
            return http(408, b"", b"connection: close\r\n", b"Request Timeout")
        return http(200)

    async def go() -> list[connector.client.Outcome]:
        async with raw_server(answer) as (url, _):
            return await send_all(url, [chat(f"p{i}") for i in range(3)], concurrency=1, **FAST)

    outcomes = run(go())
    assert [(o.ok, o.attempts, o.status) for o in outcomes] == [(True, 2, 200)] * 3
