"""The SSE assembler against hostile streams: every bad event is a stream error for its request only, a byte
order mark opening the stream is skipped, and the assembled body counts against the client's size limit."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from connector.client import StreamAssembler, VllmClient
from connector.client import sse as sse_module
from connector.errors import BodyTooLarge, StreamError
from tests.http_support import prompt_of, raw_server

DONE = b"data: [DONE]\n\n"


def event(choice: dict[str, Any], **chunk: Any) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", **chunk, "choices": [choice]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def good_stream(*contents: str) -> bytes:
    events = [event({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None})]
    events += [event({"index": 0, "delta": {"content": c}, "finish_reason": None}) for c in contents]
    events.append(event({"index": 0, "delta": {}, "finish_reason": "stop"}))
    return b"".join(events) + DONE


def assemble(stream: bytes, assembler: StreamAssembler | None = None) -> bytes:
    assembler = StreamAssembler() if assembler is None else assembler
    assembler.feed(stream)
    return assembler.finish()


def content(body: bytes) -> str:
    return json.loads(body)["choices"][0]["message"]["content"]


# --- 1. valid for Python's json, but not for the assembler: a stream error, never another exception ---------

CHAT = '{"object":"chat.completion.chunk","choices":[{"index":0,%s,"finish_reason":"stop"}]}'
TEXT = '{"object":"text_completion","choices":[{"index":0,%s,"finish_reason":"stop"}]}'

HOSTILE = {
    # Before: OverflowError from int(inf), out of the client.
    "index Infinity": ('{"choices":[{"index":Infinity,"delta":{"content":"a"},"finish_reason":"stop"}]}', "Infinity"),
    "index -Infinity": ('{"choices":[{"index":-Infinity,"delta":{},"finish_reason":"stop"}]}', "Infinity"),
    "index NaN": ('{"choices":[{"index":NaN,"delta":{},"finish_reason":"stop"}]}', "NaN"),
    "index 1e400": ('{"choices":[{"index":1e400,"delta":{},"finish_reason":"stop"}]}', "out of range"),
    "usage NaN": ('{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"x":NaN}}', "NaN"),
    # Before: accepted as another index (int("0"), int(1.5), int(True)), or a huge or negative one (null and
    # "a" were stream errors already, with a TypeError or ValueError for a reason).
    "index string": (
        '{"choices":[{"index":"0","delta":{},"finish_reason":"stop"}]}',
        r"choices\[0\]\.index is a string",
    ),
    "index float": ('{"choices":[{"index":1.5,"delta":{},"finish_reason":"stop"}]}', r"choices\[0\]\.index is 1\.5"),
    "index true": ('{"choices":[{"index":true,"delta":{},"finish_reason":"stop"}]}', r"index is true"),
    "index null": ('{"choices":[{"index":null,"delta":{},"finish_reason":"stop"}]}', r"index is null"),
    "index negative": ('{"choices":[{"index":-1,"delta":{},"finish_reason":"stop"}]}', r"index is -1, not an integer"),
    "index 2**31": ('{"choices":[{"index":2147483648,"delta":{},"finish_reason":"stop"}]}', r"not an integer from 0"),
    "tool index": (CHAT % '"delta":{"tool_calls":[{"index":"a"}]}', r"tool_calls\[0\]\.index is a string"),
    # Before: TypeError in "".join() at finish(), out of the client.
    "content 5": (CHAT % '"delta":{"content":5}', r"choices\[0\]\.delta\.content is 5, not a string or null"),
    "content list": (CHAT % '"delta":{"content":["a"]}', r"delta\.content is an array"),
    "content object": (CHAT % '"delta":{"content":{"a":1}}', r"delta\.content is an object"),
    "content 0": (CHAT % '"delta":{"content":0}', r"delta\.content is 0"),  # before: dropped silently
    "content false": (CHAT % '"delta":{"content":false}', r"delta\.content is false"),
    "reasoning": (CHAT % '"delta":{"reasoning":5}', r"delta\.reasoning is 5"),
    "reasoning_content": (CHAT % '"delta":{"reasoning_content":[1]}', r"delta\.reasoning_content is an array"),
    "arguments": (
        CHAT % '"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":{"a":1}}}]}',
        r"tool_calls\[0\]\.function\.arguments is an object",
    ),
    "text": (TEXT % '"text":5', r"choices\[0\]\.text is 5"),
    # Before: UnicodeEncodeError at finish(), when the body with a lone surrogate was encoded.
    "surrogate": (CHAT % '"delta":{"content":"a\\ud800b"}', "unpaired surrogate"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_field_the_assembler_cannot_use_is_a_stream_error(name: str) -> None:
    data, reason = HOSTILE[name]
    stream = good_stream("x").replace(DONE, b"") + b"data: " + data.encode() + b"\n\n" + DONE
    with pytest.raises(StreamError, match=r"^stream: event 4 is not (valid JSON|a completion chunk): .*" + reason):
        assemble(stream)


@pytest.mark.parametrize("opening", [b"[", b'{"a":', b'{"choices":['])
def test_an_event_nested_too_deeply_is_a_stream_error(opening: bytes) -> None:
    # Before: RecursionError from json.loads, out of the client.
    deep = b"data: " + opening * 100_000 + b"\n\n"
    with pytest.raises(StreamError, match=r"^stream: event 1 is not valid JSON: nested too deeply"):
        assemble(deep + DONE)


def test_fields_of_the_right_type_still_assemble() -> None:
    stream = (
        event(
            {"index": 0, "delta": {"role": "assistant", "content": None, "reasoning": "think"}, "finish_reason": None}
        )
        + event({"index": 0, "delta": {"content": "", "reasoning": None}, "finish_reason": None})
        + event({"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f"}}]}})
        + event({"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": None}}]}})
        + event({"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"a":1}'}}]}})
        + event({"index": 0, "delta": {"content": "ok"}, "finish_reason": "tool_calls"})
        + DONE
    )
    message = json.loads(assemble(stream))["choices"][0]["message"]
    assert message["content"] == "ok" and message["reasoning"] == "think"
    assert message["tool_calls"] == [{"id": "t", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}]


# --- 2. a byte order mark opening the stream ----------------------------------------------------------------

BOM_STREAM = (
    b"\xef\xbb\xbf"
    + event({"index": 0, "delta": {"role": "assistant", "content": "IMPORTANT "}, "finish_reason": None})
    + event({"index": 0, "delta": {"content": "rest"}, "finish_reason": "stop"})
    + DONE
)


def test_a_byte_order_mark_opening_the_stream_is_skipped_however_the_stream_is_cut() -> None:
    # Before: the first line's field name was "\ufeffdata", so the first event was lost without a word.
    stream = BOM_STREAM
    for cut in range(8):
        for second in range(cut, 8):
            assembler = StreamAssembler()
            for piece in (stream[:cut], stream[cut:second], stream[second:]):
                assembler.feed(piece)
            body = assembler.finish()
            assert assembler.events == 3, (cut, second)
            assert content(body) == "IMPORTANT rest", (cut, second)
    byte_by_byte = StreamAssembler()
    for i in range(len(stream)):
        byte_by_byte.feed(stream[i : i + 1])
    assert content(byte_by_byte.finish()) == "IMPORTANT rest"


def test_only_one_byte_order_mark_and_only_at_the_start_is_skipped() -> None:
    # As the SSE format says: a second one is part of the first field's name (here "\ufeffdata", ignored).
    first = event({"index": 0, "delta": {"content": "lost"}, "finish_reason": None})
    assembler = StreamAssembler()
    assembler.feed(b"\xef\xbb\xbf\xef\xbb\xbf" + first + good_stream("kept"))
    assert content(assembler.finish()) == "kept"
    # Bytes that only begin like one are kept.
    with pytest.raises(StreamError, match=r"without \[DONE\] after 0 events"):
        assemble(b"\xef\xbb")
    not_a_bom = StreamAssembler()
    not_a_bom.feed(b"\xef")
    not_a_bom.feed(b"\n" + good_stream("x"))
    assert content(not_a_bom.finish()) == "x"


# --- 3. the assembled body counts against max_body_bytes ----------------------------------------------------


def tool_flood(calls: int) -> bytes:
    """One event with `calls` tool calls of a few bytes each: each becomes ~70 bytes of body."""
    tools = ",".join(f'{{"index":{i}}}' for i in range(calls))
    return (
        b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[%s]},'
        b'"finish_reason":"tool_calls"}]}\n\n' % tools.encode() + DONE
    )


def test_many_tool_calls_stop_with_too_large_as_they_are_assembled() -> None:
    # Before (s7): 31 MB of {"index":N} under the 32 MB limit assembled into a 120 MB body and 1.6 GB of RSS.
    limit = 64 << 10
    stream = tool_flood(20_000)
    assert len(stream) > limit  # (the transport bounds the stream itself by the same limit)
    assembler = StreamAssembler(max_body_bytes=limit)
    with pytest.raises(BodyTooLarge, match=r"^too-large: the streamed body passed the limit of 65,536 bytes"):
        assembler.feed(stream)  # during the event, before finish()
    assert len(assembler.choices[0]["tools"]) <= limit // sse_module._TOOL_CALL + 1  # state bounded too


def test_many_choices_stop_with_too_large() -> None:
    parts = [event({"index": i, "delta": {"content": "x"}, "finish_reason": "stop"}) for i in range(2_000)]
    assembler = StreamAssembler(max_body_bytes=16 << 10)
    with pytest.raises(BodyTooLarge, match="too-large: "):
        assembler.feed(b"".join(parts) + DONE)
    assert len(assembler.choices) <= (16 << 10) // sse_module._CHAT_CHOICE + 1


def test_the_limit_is_exact_on_the_assembled_body() -> None:
    stream = (
        event(
            {"index": 0, "delta": {"role": "assistant", "content": "hello "}, "finish_reason": None}, model="m" * 3000
        )
        + event({"index": 1, "delta": {"content": "world"}, "finish_reason": "length"})
        + event({"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "1"}]}, "finish_reason": "stop"})
        + DONE
    )
    body = assemble(stream)
    assert assemble(stream, StreamAssembler(max_body_bytes=len(body))) == body
    with pytest.raises(BodyTooLarge, match=rf"assembled into {len(body):,} bytes, more than the limit of"):
        assemble(stream, StreamAssembler(max_body_bytes=len(body) - 1))


@pytest.mark.parametrize(
    "stream",
    [
        # the smallest body each tool call and choice can become: one-character values
        b'data: {"object":"chat.completion.chunk","choices":['
        + b",".join(
            b'{"index":%d,"delta":{"role":1,"tool_calls":[%s]},"finish_reason":1,"stop_reason":1}'
            % (i, b",".join(b'{"index":%d,"id":1,"type":1,"function":{"name":1}}' % k for k in range(5)))
            for i in range(50)
        )
        + b"]}\n\n"
        + DONE,
        b'data: {"object":"text_completion","choices":['
        + b",".join(b'{"index":%d,"text":"","finish_reason":1,"stop_reason":1}' % i for i in range(50))
        + b"]}\n\n"
        + DONE,
        b'data: {"object":"text_completion","choices":[{"index":0,"text":"\\u00e9\\ud83d\\ude00","finish_reason":1,'
        b'"logprobs":{"tokens":[1,2,3],"top_logprobs":[{},{},{}]}}]}\n\n' + DONE,
    ],
    ids=["chat tool calls", "text choices", "escapes and logprobs"],
)
def test_the_size_counted_as_it_grows_never_exceeds_the_body(stream: bytes) -> None:
    # So stopping early never refuses a body that would have fit.
    assembler = StreamAssembler()
    body = assemble(stream, assembler)
    assert 0 < assembler._size <= len(body)


def test_without_a_limit_the_default_or_the_stream_size_bounds_the_body(monkeypatch: pytest.MonkeyPatch) -> None:
    # The client builds its assembler without a limit: the client's default applies, or the stream's own
    # size when larger (the transport has held that to the client's limit).
    monkeypatch.setattr(sse_module, "DEFAULT_MAX_BODY_BYTES", 64 << 10, raising=False)
    with pytest.raises(BodyTooLarge, match="65,536 bytes"):
        assemble(tool_flood(4_000))  # ~60 KB of stream -> ~280 KB of body
    long_stream = good_stream(*(f"token {i} " for i in range(10_000)))  # ~1.4 MB of stream -> ~90 KB of body
    assert len(content(assemble(long_stream))) > 64 << 10


def test_the_normal_path_is_unchanged() -> None:
    stream = good_stream(*(f"token {i} " for i in range(2_000)))
    body = json.loads(assemble(stream))
    assert body["object"] == "chat.completion" and body["choices"][0]["finish_reason"] == "stop"
    assert body["choices"][0]["message"]["content"] == "".join(f"token {i} " for i in range(2_000))


# --- end to end: one hostile stream among several, through the client ---------------------------------------

GOOD = good_stream("o", "k")
E2E = {
    "index Infinity": (
        b'data: {"choices":[{"index":Infinity,"delta":{"content":"a"},"finish_reason":"stop"}]}\n\n' + DONE,
        "stream",
        "stream: event 1 is not valid JSON: Infinity (JSON has no NaN or Infinity)",
    ),
    "content 5": (
        b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":5},"finish_reason":"stop"}]}'
        b"\n\n" + DONE,
        "stream",
        "stream: event 1 is not a completion chunk: choices[0].delta.content is 5, not a string or null",
    ),
    "deep": (
        b"data: " + b"[" * 50_000 + b"\n\n",  # (under the test's 64 KiB limit)
        "stream",
        "stream: event 1 is not valid JSON: nested too deeply: more than 64 levels of arrays and objects",
    ),
    "too large": (tool_flood(4_000), "too-large", "too-large: the streamed body passed the limit of 65,536 bytes"),
    "bom": (BOM_STREAM, None, None),
}


@pytest.mark.parametrize("name", list(E2E))
def test_one_hostile_stream_fails_only_its_own_request(name: str) -> None:
    # Before: send_all raised (OverflowError, TypeError, RecursionError) and every other outcome was lost; a
    # BOM lost the first event; the tool-call flood came back as a body several times the limit.
    hostile, kind, error = E2E[name]

    def answer(head: bytes, body: bytes) -> bytes:  # "p3" gets `hostile`, every other prompt a good stream
        stream = hostile if prompt_of(body) == "p3" else GOOD
        return (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(stream) + stream
        )

    async def main() -> list[Any]:
        payloads = [{"messages": [{"role": "user", "content": f"p{i}"}]} for i in range(8)]
        limits = {"max_body_bytes": 64 << 10, "timeout_s": 10, "deadline_s": 20}
        async with raw_server(answer) as (url, _), VllmClient(url, stream=True, concurrency=4, **limits) as client:
            return await client.send_all(payloads)

    outcomes = asyncio.run(main())
    assert [o.index for o in outcomes] == list(range(8))
    for outcome in outcomes[:3] + outcomes[4:]:
        assert outcome.ok and content(outcome.body) == "ok"
    bad = outcomes[3]
    if kind is None:
        assert bad.ok and content(bad.body) == "IMPORTANT rest"
    else:
        assert (bad.status, bad.body, bad.attempts, bad.error_kind) == (200, None, 1, kind)
        assert bad.error.startswith(error)
