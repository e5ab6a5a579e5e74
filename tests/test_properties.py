"""Property tests: random valid bodies parse to exactly the values Python's json gives."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.parse import parse_batch

text = st.text(max_size=30)
maybe = lambda s: st.none() | s  # noqa: E731
ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
floats = st.floats(allow_nan=False, allow_infinity=False)

choice_st = st.fixed_dictionaries(
    {"index": st.integers(0, 8), "finish_reason": maybe(st.sampled_from(["stop", "length", "tool_calls"]))},
    optional={
        "message": st.fixed_dictionaries(
            {"role": st.just("assistant")},
            optional={
                "content": maybe(text),
                "reasoning": maybe(text),
                "reasoning_content": maybe(text),
                "tool_calls": st.lists(
                    st.fixed_dictionaries({"function": st.fixed_dictionaries({"name": text, "arguments": text})}),
                    max_size=3,
                ),
            },
        ),
        "text": maybe(text),
        "stop_reason": maybe(text | st.integers(0, 200_000)),
        "logprobs": st.none(),
    },
)
body_st = st.fixed_dictionaries(
    {"created": st.integers(0, 4_000_000_000)},
    optional={
        "id": text,
        "object": st.sampled_from(["chat.completion", "text_completion"]),
        "model": text,
        "system_fingerprint": maybe(text),
        "choices": st.lists(choice_st, max_size=4),
        "usage": st.fixed_dictionaries(
            {"prompt_tokens": ints, "total_tokens": ints},
            optional={
                "completion_tokens": maybe(ints),
                "prompt_tokens_details": maybe(st.fixed_dictionaries({"cached_tokens": maybe(ints)})),
                "completion_tokens_details": maybe(st.fixed_dictionaries({"reasoning_tokens": maybe(ints)})),
            },
        ),
        "metrics": maybe(st.fixed_dictionaries({"time_to_first_token_ms": floats, "tokens_per_second": floats})),
        "metadata": maybe(st.fixed_dictionaries({"kv_cache_hit_rate": floats | ints})),
        "unknown": st.recursive(st.none() | st.booleans() | text | ints, lambda c: st.lists(c, max_size=3)),
    },
)


def expected_row(body: dict[str, Any]) -> dict[str, Any]:
    """The columns, computed straight from what json.loads gives."""

    def get(obj: Any, *keys: str) -> Any:
        for key in keys:
            obj = obj.get(key) if isinstance(obj, dict) else None
        return obj

    def first(*values: Any) -> Any:
        return next((v for v in values if v is not None), None)

    choices = body.get("choices")
    c0 = choices[0] if choices else None
    usage = body.get("usage")
    stop = get(c0, "stop_reason")
    calls = get(c0, "message", "tool_calls")
    return {
        "id": body.get("id"),
        "object": body.get("object"),
        "created": datetime.fromtimestamp(body["created"], UTC),
        "model": body.get("model"),
        "system_fingerprint": body.get("system_fingerprint"),
        "content": first(get(c0, "message", "content"), get(c0, "text")),
        "reasoning": first(get(c0, "message", "reasoning"), get(c0, "message", "reasoning_content")),
        "refusal": get(c0, "message", "refusal"),
        "finish_reason": get(c0, "finish_reason"),
        "stop_reason": None if stop is None else str(stop),
        "n_choices": None if choices is None else len(choices),
        "choice_contents": None
        if choices is None
        else [first(get(c, "message", "content"), get(c, "text")) for c in choices],
        "choice_finish_reasons": None if choices is None else [c.get("finish_reason") for c in choices],
        "tool_call_names": None if calls is None else [c["function"]["name"] for c in calls],
        "tool_call_arguments": None if calls is None else [c["function"]["arguments"] for c in calls],
        "prompt_tokens": get(usage, "prompt_tokens"),
        "completion_tokens": get(usage, "completion_tokens"),
        "total_tokens": get(usage, "total_tokens"),
        "cached_tokens": get(usage, "prompt_tokens_details", "cached_tokens"),
        "reasoning_tokens": get(usage, "completion_tokens_details", "reasoning_tokens"),
        "time_to_first_token_ms": get(body, "metrics", "time_to_first_token_ms"),
        "generation_time_ms": None,
        "queue_time_ms": None,
        "mean_itl_ms": None,
        "tokens_per_second": get(body, "metrics", "tokens_per_second"),
        "inference_time_ms": None,
        "kv_cache_hit_rate": None
        if get(body, "metadata", "kv_cache_hit_rate") is None
        else float(body["metadata"]["kv_cache_hit_rate"]),
        "gpu_utilization_pct": None,
    }


@settings(
    max_examples=60,
    deadline=None,
    # The backend fixture is the same for every example.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(bodies=st.lists(body_st, min_size=1, max_size=25), ensure_ascii=st.booleans(), shuffle=st.randoms())
def test_random_valid_bodies_equal_json(
    backend: str, bodies: list[dict[str, Any]], ensure_ascii: bool, shuffle: Any
) -> None:
    raw = []
    for body in bodies:
        items = list(body.items())
        shuffle.shuffle(items)
        raw.append(json.dumps(dict(items), ensure_ascii=ensure_ascii).encode())
    result = parse_batch(raw, profile="openai", backend=backend)
    result.table.validate(full=True)
    assert result.errors.num_rows == 0, result.errors.to_pylist()
    rows = result.table.to_pylist()
    for i, (row, raw_body) in enumerate(zip(rows, raw, strict=True)):
        assert row == {"line": i + 1, **expected_row(json.loads(raw_body))}
