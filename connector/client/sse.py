"""Server-sent events from vLLM (`stream: true`) -> the body the same request gives without streaming.

Pure: feed it bytes as they arrive, then `finish()`. A stream that ends without `data: [DONE]`, or with a
choice that never got its `finish_reason`, is an error (never a silent partial body). Lines end with CRLF,
LF or a lone CR, as the SSE format allows; the work is linear in the stream's size however it is chunked.
"""

from __future__ import annotations

import json
import re
from typing import Any

from connector.errors import StreamError

__all__ = ["StreamAssembler"]

_LINE_END = re.compile(rb"\r\n?|\n")


class StreamAssembler:
    def __init__(self) -> None:
        self._buf = bytearray()  # the line being received (consumed lines are cut off the front)
        self._scanned = 0  # bytes of _buf already known to hold no line end
        self._skip_lf = False  # the last chunk ended with CR: a LF opening the next one belongs to it
        self._data: list[bytes] = []
        self.head: dict[str, Any] = {}
        self.choices: dict[int, dict[str, Any]] = {}
        self.usage: Any = None
        self.done = False
        self.events = 0
        self.first_token = False  # set once a chunk carried content, text or reasoning
        self.error_body: bytes | None = None  # an `{"error": ...}` event, as vLLM sends on failure mid-stream

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the response body; raises StreamError on a broken event."""
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
            chunk = json.loads(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise StreamError(f"event {self.events} is not valid UTF-8: {exc.reason} at byte {exc.start}") from None
        except ValueError as exc:
            raise StreamError(f"event {self.events} is not valid JSON: {exc}") from None
        if not isinstance(chunk, dict):
            raise StreamError(f"event {self.events} is not a JSON object")
        if "error" in chunk:
            self.error_body = data
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise StreamError(f"error event {self.events}: {message}")
        try:
            self._merge(chunk)
        except (AttributeError, TypeError, ValueError) as exc:  # a field of the wrong type
            raise StreamError(f"event {self.events} is not a completion chunk: {type(exc).__name__}: {exc}") from None

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
        for part in chunk.get("choices") or ():
            index = int(part.get("index", 0))
            choice = self.choices.setdefault(
                index, {"index": index, "parts": [], "reasoning": [], "tools": {}, "logprobs": {}}
            )
            # Log probabilities come in pieces: each list (chat: content; completions: tokens, ...) grows.
            for key, value in (part.get("logprobs") or {}).items():
                if isinstance(value, list):
                    choice["logprobs"].setdefault(key, []).extend(value)
            delta = part.get("delta")
            if isinstance(delta, dict):
                if delta.get("role"):
                    choice["role"] = delta["role"]
                if delta.get("content"):
                    choice["parts"].append(delta["content"])
                    self.first_token = True
                for field in ("reasoning", "reasoning_content"):
                    if delta.get(field):
                        choice["reasoning_field"] = field
                        choice["reasoning"].append(delta[field])
                        self.first_token = True
                for call in delta.get("tool_calls") or ():
                    slot = choice["tools"].setdefault(int(call.get("index", 0)), {"args": []})
                    for key in ("id", "type"):
                        if call.get(key):
                            slot[key] = call[key]
                    function = call.get("function") or {}
                    if function.get("name"):
                        slot["name"] = function["name"]
                    if function.get("arguments"):
                        slot["args"].append(function["arguments"])
                    self.first_token = True
            elif part.get("text"):
                choice["parts"].append(part["text"])
                self.first_token = True
            if part.get("finish_reason") is not None:
                choice["finish_reason"] = part["finish_reason"]
                choice["stop_reason"] = part.get("stop_reason")

    def finish(self) -> bytes:
        """The assembled body; raises StreamError when the stream was not complete."""
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
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
