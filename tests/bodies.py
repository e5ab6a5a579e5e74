"""Test data: vLLM 0.32-shaped response bodies (every field), built from keyword overrides."""

from __future__ import annotations

import copy
import json
from typing import Any

CREATED = 1732950000  # 2024-11-30T07:00:00Z


def choice(content: Any = "Hello!", index: int = 0, **overrides: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "index": index,
        "message": {
            "role": "assistant",
            "content": content,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": [],
            "reasoning": None,
        },
        "logprobs": None,
        "finish_reason": "stop",
        "stop_reason": None,
        "token_ids": None,
    }
    for key, value in overrides.items():
        if key in out["message"] or key in ("reasoning_content",):
            out["message"][key] = value
        else:
            out[key] = value
    return out


def chat(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-0c1d2e3f",
        "object": "chat.completion",
        "created": CREATED,
        "model": "Qwen/Qwen2.5-Coder-7B-Instruct",
        "choices": [choice()],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": {
            "prompt_tokens": 21,
            "total_tokens": 33,
            "completion_tokens": 12,
            "prompt_tokens_details": {"cached_tokens": 16},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "kv_transfer_params": None,
    }
    body.update(copy.deepcopy(overrides))
    return body


def encode(body: Any, **dumps: Any) -> bytes:
    return json.dumps(body, **dumps).encode("utf-8")
