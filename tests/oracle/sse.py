"""Server-sent events from vLLM (`stream: true`) -> the body the same request gives without streaming.

Pure: feed it bytes as they arrive, then `finish()`. A stream that ends without `data: [DONE]`, or with a
choice that never got its `finish_reason`, is an error (never a silent partial body). Lines end with CRLF,
LF or a lone CR, as the SSE format allows, and one byte order mark opening the stream is skipped; the work is
linear in the stream's size however it is cut.

A bad event is a `StreamError` that says why, never another exception: each event is read under the
project's JSON rules (`connector.strict`: no NaN or Infinity, at most 64 levels deep, no unpaired
surrogate), and the fields assembled are checked (an index is an integer from 0 to 2**31 - 1; content, text,
reasoning and arguments are strings or null). The assembled state counts against `max_body_bytes` as it
grows, and the body against it at the end: past it, `BodyTooLarge` (a stream of many tiny tool calls or
choices would otherwise assemble into a body several times the size of the stream).
"""

from __future__ import annotations

import json
import re
from typing import Any

from connector.errors import BodyTooLarge, StreamError
from connector.strict import Rejected
from connector.strict import loads as strict_loads

__all__ = ["DEFAULT_MAX_BODY_BYTES", "StreamAssembler"]

_LINE_END = re.compile(rb"\r\n?|\n")
_BOM = b"\xef\xbb\xbf"
# The client's default `max_body_bytes`: the limit of an assembler that was not given one, unless the stream
# it was fed is longer (the transport holds that to the client's own limit).
DEFAULT_MAX_BODY_BYTES = 32 << 20
_MAX_INDEX = (1 << 31) - 1


def _skeleton(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")))


# What a choice or a tool call adds to the body at the least (its strings and log probabilities are counted
# apart, a character and an element as one byte): so the size counted as the state grows never exceeds the
# size of the chat body it becomes, and stopping early never refuses a body that would have fit. (A text
# completion's body leaves out the tool calls and reasoning its state may hold: they count all the same.)
_CHAT_CHOICE = _skeleton(
    {
        "index": 0,
        "message": {"role": 1, "content": None, "tool_calls": []},
        "logprobs": None,
        "finish_reason": 1,
        "stop_reason": 1,
    }
)
_TEXT_CHOICE = _skeleton({"index": 0, "text": "", "logprobs": None, "finish_reason": 1, "stop_reason": 1})
_TOOL_CALL = _skeleton({"id": 1, "type": 1, "function": {"name": 1, "arguments": ""}})


class _BadField(Exception):
    """A field the assembler uses has the wrong type or value; the message says which and why."""


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        text = repr(value)
        return text if len(text) <= 24 else f"a number of {len(text)} characters"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"  # (nothing else comes out of JSON)


def _bad_index(value: Any, where: str) -> _BadField:
    return _BadField(f"{where} is {_describe(value)}, not an integer from 0 to {_MAX_INDEX:,}")


def _not_text(value: Any, where: str) -> _BadField:
    return _BadField(f"{where} is {_describe(value)}, not a string or null")


class StreamAssembler:
    def __init__(self, max_body_bytes: int | None = None) -> None:
        """`max_body_bytes`: the client's limit; None: DEFAULT_MAX_BODY_BYTES, or the bytes fed if more."""
        self.max_body_bytes = max_body_bytes
        self._buf = bytearray()  # the line being received (consumed lines are cut off the front)
        self._scanned = 0  # bytes of _buf already known to hold no line end
        self._skip_lf = False  # the last chunk ended with CR: a LF opening the next one belongs to it
        self._at_start = True  # no byte past a possible byte order mark seen yet (_buf holds its first bytes)
        self._fed = 0  # bytes fed
        self._size = 0  # the assembled size so far (see _CHAT_CHOICE)
        self._data: list[bytes] = []
        self.head: dict[str, Any] = {}
        self.choices: dict[int, dict[str, Any]] = {}
        self.usage: Any = None
        self.done = False
        self.events = 0
        self.first_token = False  # set once a chunk carried content, text or reasoning
        self.error_body: bytes | None = None  # an `{"error": ...}` event, as vLLM sends on failure mid-stream

    def limit(self) -> int:
        """The most bytes the assembled body may have."""
        if self.max_body_bytes is not None:
            return self.max_body_bytes
        return max(DEFAULT_MAX_BODY_BYTES, self._fed)

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the response body; raises StreamError on a broken event, BodyTooLarge when
        the assembled state passes the limit."""
        self._fed += len(data)
        if self._at_start:  # one byte order mark opening the stream is skipped (WHATWG SSE), however cut
            if not data:
                return
            head = bytes(self._buf) + data
            self._buf.clear()
            if len(head) < len(_BOM) and _BOM.startswith(head):
                self._buf += head  # maybe the start of one: wait for more
                return
            self._at_start = False
            data = head[len(_BOM) :] if head.startswith(_BOM) else head
        if self._skip_lf and data:
            self._skip_lf = False
            if data[:1] == b"\n":
                data = data[1:]
        buf = self._buf
        buf += data
        start = 0
        while match := _LINE_END.search(buf, self._scanned):
            line = bytes(buf[start : match.start()])
            start = self._scanned = match.end()
            if match.end() == len(buf) and match.group() == b"\r":
                self._skip_lf = True
            self._line(line)
        del buf[:start]
        self._scanned = len(buf)

    def _line(self, line: bytes) -> None:
        if not line:
            self._dispatch()
            return
        name, colon, value = line.partition(b":")
        if name == b"data":
            self._data.append(value[1:] if colon and value[:1] == b" " else value)
        # Comments (":"), `event:`, `id:`, `retry:` carry nothing vLLM uses.

    def _dispatch(self) -> None:
        if not self._data:
            return
        data, self._data = b"\n".join(self._data), []
        self.events += 1
        if data == b"[DONE]":
            self.done = True
            return
        if self.done:
            raise StreamError(f"event {self.events} after [DONE]")
        try:
            chunk = strict_loads(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise StreamError(f"event {self.events} is not valid UTF-8: {exc.reason} at byte {exc.start}") from None
        except Rejected as exc:
            reason = str(exc).removeprefix("not JSON: ")
            raise StreamError(f"event {self.events} is not valid JSON: {reason}") from None
        if not isinstance(chunk, dict):
            raise StreamError(f"event {self.events} is not a JSON object")
        if "error" in chunk:
            self.error_body = data
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise StreamError(f"error event {self.events}: {message}")
        try:
            self._merge(chunk)
        except _BadField as exc:
            raise StreamError(f"event {self.events} is not a completion chunk: {exc}") from None
        except (ArithmeticError, AttributeError, LookupError, TypeError, ValueError) as exc:  # a wrong shape
            raise StreamError(f"event {self.events} is not a completion chunk: {type(exc).__name__}: {exc}") from None
        if self._size > self.limit():
            self._too_large()

    def _too_large(self) -> None:
        raise BodyTooLarge(
            f"the streamed body passed the limit of {self.limit():,} bytes as it was assembled "
            f"(event {self.events}); the rest was not read"
        )

    def _merge(self, chunk: dict[str, Any]) -> None:
        if not self.head:
            for key in ("id", "created", "model", "system_fingerprint", "service_tier"):
                if key in chunk:
                    self.head[key] = chunk[key]
            self.head["chat"] = chunk.get("object") == "chat.completion.chunk"
        if chunk.get("system_fingerprint") is not None:  # vLLM 0.32 puts it on the last chunks only
            self.head["system_fingerprint"] = chunk["system_fingerprint"]
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        limit = self.limit()
        for at, part in enumerate(chunk.get("choices") or ()):
            index = part.get("index", 0)
            if type(index) is not int or not 0 <= index <= _MAX_INDEX:
                raise _bad_index(index, f"choices[{at}].index")
            choice = self.choices.get(index)
            if choice is None:
                self._size += _CHAT_CHOICE if self.head["chat"] else _TEXT_CHOICE
                if self._size > limit:
                    self._too_large()
                choice = self.choices[index] = {
                    "index": index,
                    "parts": [],
                    "reasoning": [],
                    "tools": {},
                    "logprobs": {},
                }
            # Log probabilities come in pieces: each list (chat: content; completions: tokens, ...) grows.
            for key, value in (part.get("logprobs") or {}).items():
                if isinstance(value, list):
                    choice["logprobs"].setdefault(key, []).extend(value)
                    self._size += len(value)
            delta = part.get("delta")
            if isinstance(delta, dict):
                if delta.get("role"):
                    choice["role"] = delta["role"]
                self._text(delta.get("content"), f"choices[{at}].delta.content", choice["parts"])
                for field in ("reasoning", "reasoning_content"):
                    if self._text(delta.get(field), f"choices[{at}].delta.{field}", choice["reasoning"]):
                        choice["reasoning_field"] = field
                for k, call in enumerate(delta.get("tool_calls") or ()):
                    call_index = call.get("index", 0)
                    if type(call_index) is not int or not 0 <= call_index <= _MAX_INDEX:
                        raise _bad_index(call_index, f"choices[{at}].delta.tool_calls[{k}].index")
                    slot = choice["tools"].get(call_index)
                    if slot is None:
                        self._size += _TOOL_CALL
                        if self._size > limit:
                            self._too_large()
                        slot = choice["tools"][call_index] = {"args": []}
                    for key in ("id", "type"):
                        if call.get(key):
                            slot[key] = call[key]
                    function = call.get("function") or {}
                    if function.get("name"):
                        slot["name"] = function["name"]
                    where = f"choices[{at}].delta.tool_calls[{k}].function.arguments"
                    self._text(function.get("arguments"), where, slot["args"])
                    self.first_token = True
            else:
                self._text(part.get("text"), f"choices[{at}].text", choice["parts"])
            if part.get("finish_reason") is not None:
                choice["finish_reason"] = part["finish_reason"]
                choice["stop_reason"] = part.get("stop_reason")

    def _text(self, value: Any, where: str, into: list[str]) -> bool:
        """A text field of a chunk: a string or null, else `_BadField`; a non-empty one is added to `into` and
        counted. Whether it was added."""
        if value is not None and type(value) is not str:
            raise _not_text(value, where)
        if not value:
            return False
        into.append(value)
        self._size += len(value)
        self.first_token = True
        return True

    def finish(self) -> bytes:
        """The assembled body; raises StreamError when the stream was not complete, BodyTooLarge when the body
        is larger than the limit."""
        if self._buf:  # a last line without its line end
            line = bytes(self._buf)
            self._buf.clear()
            self._line(line)
        self._dispatch()
        if not self.done:
            raise StreamError(f"the stream ended without [DONE] after {self.events} events")
        missing = sorted(i for i, c in self.choices.items() if "finish_reason" not in c)
        if not self.choices or missing:
            raise StreamError(f"the stream ended without a finish_reason for choice(s) {missing or [0]}")
        chat = self.head.get("chat", True)
        choices = []
        for index in sorted(self.choices):
            c = self.choices[index]
            text = "".join(c["parts"])
            if chat:
                message: dict[str, Any] = {"role": c.get("role", "assistant"), "content": text or None}
                if c["reasoning"]:
                    message[c["reasoning_field"]] = "".join(c["reasoning"])
                message["tool_calls"] = [
                    {
                        "id": t.get("id"),
                        "type": t.get("type", "function"),
                        "function": {"name": t.get("name"), "arguments": "".join(t["args"])},
                    }
                    for _, t in sorted(c["tools"].items())
                ]
                choices.append(
                    {
                        "index": index,
                        "message": message,
                        "logprobs": c["logprobs"] or None,
                        "finish_reason": c["finish_reason"],
                        "stop_reason": c["stop_reason"],
                    }
                )
            else:
                choices.append(
                    {
                        "index": index,
                        "text": text,
                        "logprobs": c["logprobs"] or None,
                        "finish_reason": c["finish_reason"],
                        "stop_reason": c["stop_reason"],
                    }
                )
        body: dict[str, Any] = {
            "id": self.head.get("id"),
            "object": "chat.completion" if chat else "text_completion",
            "created": self.head.get("created"),
            "model": self.head.get("model"),
            "choices": choices,
            "usage": self.usage,
        }
        for key in ("system_fingerprint", "service_tier"):
            if key in self.head:
                body[key] = self.head[key]
        encoded = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        if len(encoded) > self.limit():
            raise BodyTooLarge(
                f"the streamed body assembled into {len(encoded):,} bytes, more than the limit of {self.limit():,}"
            )
        return encoded
