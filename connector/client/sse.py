"""Server-sent events from vLLM (`stream: true`) -> the body the same request gives without streaming.

Pure: feed it bytes as they arrive, then `finish()`. A stream that ends without `data: [DONE]`, or with a
choice that never got its `finish_reason`, is an error (never a silent partial body).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["StreamAssembler", "StreamError"]


class StreamError(Exception):
    """The stream broke the protocol (bad UTF-8 or JSON in a chunk, an error event, no [DONE])."""


class StreamAssembler:
    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []
        self.head: dict[str, Any] = {}
        self.choices: dict[int, dict[str, Any]] = {}
        self.usage: Any = None
        self.done = False
        self.events = 0
        self.first_token = False  # set once a chunk carried content, text or reasoning
        self.error_body: bytes | None = None  # an `{"error": ...}` event, as vLLM sends on failure mid-stream

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the response body; raises StreamError on a broken chunk."""
        self._buf += data
        while True:
            cut = self._buf.find(b"\n")
            if cut < 0:
                return
            line, self._buf = self._buf[:cut].rstrip(b"\r"), self._buf[cut + 1 :]
            if not line:
                self._dispatch()
            elif line.startswith(b"data:"):
                self._data.append(line[5:].lstrip(b" "))
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
        self._merge(chunk)

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
            choice = self.choices.setdefault(index, {"index": index, "parts": [], "reasoning": [], "tools": {}})
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
        if self._buf.strip() or self._data:
            self._buf += b"\n\n"
            self.feed(b"")
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
                        "logprobs": None,
                        "finish_reason": c["finish_reason"],
                        "stop_reason": c["stop_reason"],
                    }
                )
            else:
                choices.append(
                    {
                        "index": index,
                        "text": text,
                        "logprobs": None,
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
