"""Pure generation of vLLM 0.32-shaped response bodies (no I/O), for the simulator and for benchmarks.

A body is a function of a `random.Random` and the request: the same seed and request give the same body.
Content follows the profile: free text the profile's `x-extract` patterns can read (vl grounding tags, coder
fenced blocks, math steps and `\\boxed{}`), or what the request holds the answer to, read as vLLM 0.32 reads
it: `response_format` (`json_schema`, `json_object`), else `structured_outputs` (`json`, `json_object`,
`choice`, `regex`); a JSON Schema's values come from `connector.simulator.answers`. `max_tokens` cuts content
like vLLM does (JSON included, `finish_reason: "length"`); `n > 1` gives independent choices. The answer faults
(`refusal`, `ignore-schema`) are made here too.

    >>> import random
    >>> from connector.simulator.responses import make_body
    >>> body = make_body(random.Random(1), "coder", {"messages": [{"role": "user", "content": "hi"}]})
    >>> body["object"], body["choices"][0]["finish_reason"]
    ('chat.completion', 'stop')
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connector.profiles import Profile, load_profile
from connector.simulator.answers import break_answer, pattern_string, value_for

__all__ = [
    "ANSWER_FAULTS",
    "DEFAULT_MODELS",
    "BodyOptions",
    "corpus_requests",
    "count_prompt_tokens",
    "error_body",
    "make_body",
    "make_corpus",
    "request_rng",
    "stream_chunks",
    "to_bytes",
]

# The model a simulated server serves for each built-in profile (names of real models of that kind).
DEFAULT_MODELS = {
    "openai": "meta-llama/Llama-3.1-8B-Instruct",
    "vl": "deepseek-ai/deepseek-vl2-tiny",
    "coder": "Qwen/Qwen2.5-Coder-7B-Instruct",
    "math": "Qwen/Qwen2.5-Math-7B-Instruct",
}
CHARS_PER_TOKEN = 4
DEFAULT_MAX_TOKENS = 4096
CORPUS_START = 1_760_000_000  # created of the first body of a corpus (2025-10-09), Unix seconds
# Faults that change the answer itself (a 200 with a well-formed body): a refusal, JSON that ignores the schema.
ANSWER_FAULTS = ("refusal", "ignore-schema")
# vLLM 0.12 removed the request fields `guided_json`, `guided_choice` and `guided_regex` (PR #29326): a newer
# server takes them as unknown fields, ignores them (a warning in its log) and answers unconstrained.
GUIDED_FIELDS_UNTIL = (0, 12)


@dataclass(frozen=True)
class BodyOptions:
    """What the server adds around the content: the clock, per-request metrics, the reasoning field's name."""

    created: int | None = None  # Unix seconds; None: the current time
    metrics: bool = True  # vLLM --enable-per-request-metrics (else `"metrics": null`)
    reasoning_field: str = "reasoning"  # vLLM < 0.10 says "reasoning_content"
    system_fingerprint: str = "vllm-0.32.0-5eed5eed"  # vLLM 0.32: "vllm-<version>-<build hash>"
    guided_fields: bool = False  # read guided_json/guided_choice/guided_regex (a vLLM before 0.12)


def to_bytes(body: Mapping[str, Any]) -> bytes:
    """Serialise like vLLM (pydantic): compact, UTF-8, non-ASCII kept as is."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def request_rng(seed: int, request: Mapping[str, Any]) -> random.Random:
    """The generator for one request: depends on the seed and the request, not on `stream`."""
    key = {k: v for k, v in request.items() if k not in ("stream", "stream_options")}
    digest = hashlib.blake2b(f"{seed}|{json.dumps(key, sort_keys=True, default=str)}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def error_body(message: str, type_: str, code: int, param: str | None = None) -> dict[str, Any]:
    """vLLM's ErrorResponse."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


# --- words -------------------------------------------------

_SUBJECTS = [
    "a red car",
    "two dogs",
    "a cyclist",
    "an old lighthouse",
    "a market stall",
    "three children",
    "a white cat",
    "a delivery van",
    "a street musician",
    "a café terrace",
    "a fishing boat",
    "a traffic light",
    "a man in a blue coat",
    "a stack of books",
    "a bridge at dusk",
]
_PLACES = [
    "on a rainy street",
    "beside a river",
    "in a crowded square",
    "under bright sunlight",
    "near the harbour",
    "in front of a brick wall",
    "on a snowy hill",
    "inside a train station",
    "at the edge of a park",
    "à côté d'une fontaine",
    "在城市街道上",
]
_LABELS = [
    "car",
    "dog",
    "person",
    "bicycle",
    "tree",
    "cat",
    "bus",
    "traffic light",
    "boat",
    "bench",
    "umbrella",
    "bird",
    "truck",
    "sign",
    "window",
    "backpack",
]
_SENTENCES = [
    "The results suggest a steady improvement over the baseline.",
    "Throughput depends mostly on batch size and on the length of the prompts.",
    "Kafka topics are partitioned, so ordering holds only within a partition.",
    "A watermark tells the engine how far event time has progressed.",
    "Caching the schema avoids a round trip for every batch.",
    "Retries with jitter keep clients from hammering a recovering server.",
    "GPU parsing pays off on large batches; small ones are faster on the CPU.",
    "Structured output constrains the model to a JSON Schema.",
    "The summary is short: everything worked, with one exception.",
    "Voilà le résumé — tout s'est bien passé. 👍",
    "这个结果说明批处理的大小很重要。",
]
_FUNCS = [
    ("python", "reverse a string", "def reverse(s: str) -> str:\n    return s[::-1]\n"),
    (
        "python",
        "compute a moving average",
        "def moving_average(xs: list[float], k: int) -> list[float]:\n"
        "    out = []\n    for i in range(len(xs) - k + 1):\n        out.append(sum(xs[i:i + k]) / k)\n"
        "    return out\n",
    ),
    (
        "python",
        "count words in a file",
        "from collections import Counter\n\n\ndef count_words(path):\n    with open(path) as f:\n"
        "        return Counter(f.read().split())\n",
    ),
    ("rust", "sum a vector", "fn sum(xs: &[i64]) -> i64 {\n    xs.iter().sum()\n}\n"),
    (
        "go",
        "check whether a number is prime",
        "func isPrime(n int) bool {\n\tif n < 2 {\n\t\treturn false\n\t}\n"
        "\tfor i := 2; i*i <= n; i++ {\n\t\tif n%i == 0 {\n\t\t\treturn false\n\t\t}\n\t}\n"
        "\treturn true\n}\n",
    ),
    (
        "sql",
        "find the top customers",
        "SELECT customer_id, SUM(amount) AS total\nFROM orders\nGROUP BY customer_id\nORDER BY total DESC\nLIMIT 10;\n",
    ),
    (
        "typescript",
        "debounce a function",
        "export function debounce<T extends (...a: any[]) => void>(f: T, ms: number) {\n"
        "  let t: ReturnType<typeof setTimeout>;\n"
        "  return (...a: Parameters<T>) => { clearTimeout(t); t = setTimeout(() => f(...a), ms); };\n}\n",
    ),
    ("c++", "swap two integers", "void swap(int& a, int& b) {\n    int t = a;\n    a = b;\n    b = t;\n}\n"),
]


def _pick(rng: random.Random, seq: Sequence[str]) -> str:
    return seq[int(rng.random() * len(seq))]


def _ri(rng: random.Random, a: int, b: int) -> int:
    """rng.randint(a, b), several times faster (randint dominates body generation otherwise)."""
    return a + int(rng.random() * (b - a + 1))


def _prose(rng: random.Random, sentences: int) -> str:
    return " ".join(_pick(rng, _SENTENCES) for _ in range(sentences))


# --- per-profile content: (free text, the same facts as a JSON object) ---


def _vl(rng: random.Random) -> tuple[str, dict[str, Any]]:
    caption = f"{_pick(rng, _SUBJECTS).capitalize()} {_pick(rng, _PLACES)}."
    labels = rng.sample(_LABELS, _ri(rng, 1, 4))
    boxes = []
    for _ in labels:
        per_label = []
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            x1, y1 = _ri(rng, 0, 800), _ri(rng, 0, 800)
            per_label.append([x1, y1, _ri(rng, x1 + 10, 999), _ri(rng, y1 + 10, 999)])
        boxes.append(per_label)
    text = (
        caption
        + "\n"
        + "\n".join(
            f"<|ref|>{label}<|/ref|><|det|>{json.dumps(b, separators=(',', ':'))}<|/det|>"
            for label, b in zip(labels, boxes, strict=True)
        )
    )
    data = {"caption": caption, "labels": labels, "boxes": boxes, "objects": sum(len(b) for b in boxes)}
    return text, data


def _coder(rng: random.Random) -> tuple[str, dict[str, Any]]:
    language, task, code = _FUNCS[int(rng.random() * len(_FUNCS))]
    explanation = f"Here is a {language} function to {task}."
    blocks = [f"```{language}\n{code}```"]
    if rng.random() < 0.25:
        blocks.append(f"```{language}\n# usage\n{task.split()[0]}(...)\n```")
    text = explanation + "\n\n" + "\n\nYou can call it like this:\n\n".join(blocks)
    if rng.random() < 0.5:
        text += "\n\n" + _prose(rng, 1)
    data = {"language": language, "code": code, "explanation": explanation, "code_blocks": len(blocks)}
    return text, data


def _math(rng: random.Random) -> tuple[str, dict[str, Any]]:
    a, b, c = _ri(rng, 2, 99), _ri(rng, 2, 99), _ri(rng, 2, 9)
    kind = _ri(rng, 0, 2)
    if kind == 0:
        steps = [f"Add {a} and {b} to get {a + b}.", f"Multiply {a + b} by {c} to get {(a + b) * c}."]
        answer = str((a + b) * c)
    elif kind == 1:
        steps = [
            f"Write the equation {c}x + {a} = {b + a}.",
            f"Subtract {a} from both sides: {c}x = {b}.",
            f"Divide by {c}: x = \\frac{{{b}}}{{{c}}}.",
        ]
        answer = f"\\frac{{{b}}}{{{c}}}"
    else:
        steps = [f"The area of a circle of radius {c} is \\pi r^2.", f"So the area is {c * c}\\pi."]
        answer = f"{c * c}\\pi"
    confidence = round(rng.uniform(0.5, 1.0), 2)
    lines = ["Let's solve this step by step."]
    numbered = rng.random() < 0.5
    lines += [f"{i}. {s}" if numbered else f"Step {i}: {s}" for i, s in enumerate(steps, 1)]
    lines.append(f"Therefore, the final answer is \\boxed{{{answer}}}.")
    data: dict[str, Any] = {"steps": steps, "answer": answer}
    if rng.random() < 0.7:
        lines.append(f"Confidence: {confidence}")
        data["confidence"] = confidence
    return "\n".join(lines), data


def _plain(rng: random.Random) -> tuple[str, dict[str, Any]]:
    text = _prose(rng, _ri(rng, 1, 6))
    return text, {"answer": text}


_CONTENT = {"vl": _vl, "coder": _coder, "math": _math}


def _dump_json_content(rng: random.Random, data: Any, compact: bool = False) -> str:
    # Guided decoding lets the model choose JSON whitespace: mostly compact, sometimes \n, \t, \r\n runs
    # (none with `disable_any_whitespace`).
    r = rng.random()
    if r < 0.7 or compact:
        return json.dumps(data, ensure_ascii=False)
    if r < 0.85:
        return json.dumps(data, ensure_ascii=False, indent=2)
    if r < 0.95:
        return json.dumps(data, ensure_ascii=False, indent="\t").replace("\n", "\r\n")
    return "\n\n" + json.dumps(data, ensure_ascii=False, indent=1) + "\n\n\n"


def _profile_of(profile: Profile | str) -> Profile:
    return profile if isinstance(profile, Profile) else load_profile(profile)


_OWN_SCHEMA: dict[tuple[str, str], Any] = {}


def _own_schema(profile: Profile) -> Any:
    key = (profile.source, profile.name)
    if key not in _OWN_SCHEMA:
        own = profile.response_format()
        _OWN_SCHEMA[key] = own["json_schema"]["schema"] if own else None
    return _OWN_SCHEMA[key]


def _constraint(request: Mapping[str, Any], options: BodyOptions) -> tuple[str, Any] | None:
    """What the request holds the answer to, as vLLM 0.32 reads it (`structured_outputs_from_response_format`):
    `response_format` (`json_schema`, `json_object`) wins over `structured_outputs` (`json`, a schema or its
    JSON text; `json_object`; `choice`; `regex`); the guided_* fields only for a vLLM before 0.12."""
    fmt = request.get("response_format")
    if isinstance(fmt, Mapping):
        if fmt.get("type") == "json_schema":
            spec = fmt.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, Mapping) else None
            return "json", schema if isinstance(schema, Mapping) else {}
        if fmt.get("type") == "json_object":
            return "json_object", None
    sources = [request.get("structured_outputs")]
    if options.guided_fields:
        sources.append({k[7:]: v for k, v in request.items() if k in ("guided_json", "guided_choice", "guided_regex")})
    for source in sources:
        if not isinstance(source, Mapping):
            continue
        if source.get("json") is not None:
            schema = source["json"]
            if isinstance(schema, str):
                try:
                    schema = json.loads(schema)
                except ValueError:
                    schema = {}
            return "json", schema if isinstance(schema, Mapping) else {}
        if source.get("json_object"):
            return "json_object", None
        if isinstance(source.get("choice"), list):
            return "choice", source["choice"]
        if isinstance(source.get("regex"), str):
            return "regex", source["regex"]
    return None


def _content(
    rng: random.Random, profile: Profile, request: Mapping[str, Any], options: BodyOptions, fault: str | None
) -> str:
    generate = _CONTENT.get(profile.name, _plain)
    constraint = _constraint(request, options)
    # ignore-schema: a JSON Schema's answer is broken below; any other constraint is simply not kept.
    if constraint is None or (fault == "ignore-schema" and constraint[0] != "json"):
        return generate(rng)[0]
    kind, spec = constraint
    outputs = request.get("structured_outputs")
    compact = isinstance(outputs, Mapping) and bool(outputs.get("disable_any_whitespace"))
    if kind == "json":
        own = profile.name in _CONTENT and spec == _own_schema(profile)
        data = generate(rng)[1] if own else value_for(rng, spec)
        if fault == "ignore-schema":
            data = break_answer(rng, spec, data)[1]
        return _dump_json_content(rng, data, compact)
    if kind == "json_object":
        return _dump_json_content(rng, generate(rng)[1], compact)
    if kind == "choice":
        return str(spec[int(rng.random() * len(spec))]) if spec else ""
    text = pattern_string(rng, spec)
    return text if text is not None else generate(rng)[0]


_REFUSALS = (
    "I'm sorry, but I can't help with that request.",
    "I can't assist with that.",
    "I'm unable to provide that information.",
    "Sorry, I can't comply with this request.",
)


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN)) if text else 0


def count_prompt_tokens(request: Mapping[str, Any]) -> int:
    if "messages" in request:
        total = 0
        for m in request.get("messages") or ():
            content = m.get("content") if isinstance(m, Mapping) else None
            if isinstance(content, list):  # multimodal parts: text parts count, an image ~ 576 tokens
                for part in content:
                    if isinstance(part, Mapping):
                        total += _tokens(str(part.get("text", ""))) if part.get("type") == "text" else 576
            else:
                total += _tokens(str(content or ""))
            total += 4  # chat template tokens around each message
        return total + 2
    prompt = request.get("prompt", "")
    if isinstance(prompt, list):
        return sum(_tokens(str(p)) if isinstance(p, str) else 1 for p in prompt) or 1
    return _tokens(str(prompt)) or 1


def _id(rng: random.Random, prefix: str, bits: int = 64) -> str:
    return f"{prefix}{rng.getrandbits(bits):0{bits // 4}x}"


def _tool_call(rng: random.Random, tools: Sequence[Any]) -> dict[str, Any] | None:
    functions: list[Mapping[str, Any]] = [
        t["function"] for t in tools if isinstance(t, Mapping) and isinstance(t.get("function"), Mapping)
    ]
    if not functions:
        return None
    fn = rng.choice(functions)
    args = value_for(rng, fn.get("parameters") or {"type": "object", "properties": {}})
    return {
        "id": _id(rng, "chatcmpl-tool-", 128),
        "type": "function",
        "function": {"name": str(fn.get("name", "f")), "arguments": json.dumps(args, ensure_ascii=False)},
    }


def make_body(
    rng: random.Random,
    profile: Profile | str,
    request: Mapping[str, Any],
    options: BodyOptions | None = None,
    fault: str | None = None,
) -> dict[str, Any]:
    """A successful vLLM 0.32 body for `request` (chat if it has `messages`, else completions).

    Honours `n`, `max_tokens` (cut content, `finish_reason: "length"`), `response_format` and
    `structured_outputs`, `tools`, `stop_token_ids` and `model`. The caller validates the request (see
    `connector.simulator.server`). `fault`, one of ANSWER_FAULTS: "refusal" gives chat choices a
    `message.refusal` sentence and null content (a completions request is answered as without it);
    "ignore-schema" answers JSON that breaks the request's JSON Schema (`answers.break_answer`), or free text
    where the request holds the answer to another constraint.
    """
    import time

    options = options or BodyOptions()
    profile = _profile_of(profile)
    chat = "messages" in request
    n = int(request.get("n") or 1)
    max_tokens = request.get("max_tokens") or request.get("max_completion_tokens") or DEFAULT_MAX_TOKENS
    max_chars = int(max_tokens) * CHARS_PER_TOKEN
    tools = request.get("tools") if chat and request.get("tool_choice") != "none" else None
    stop_ids = request.get("stop_token_ids") or ()
    prompt_tokens = count_prompt_tokens(request)
    created = options.created if options.created is not None else int(time.time())
    model = str(request.get("model") or DEFAULT_MODELS.get(profile.name, profile.name))

    choices = []
    completion_tokens = reasoning_tokens = 0
    for index in range(n):
        refusal: str | None = None
        if fault == "refusal" and chat:
            content, refusal = None, _REFUSALS[int(rng.random() * len(_REFUSALS))]
        else:
            content = _content(rng, profile, request, options, fault)
        reasoning = None
        if chat and profile.name == "math" and rng.random() < 0.3:
            reasoning = f"Let me think. {_prose(rng, 1)} I will write the steps."
            reasoning_tokens += _tokens(reasoning)
        tool_calls: list[dict[str, Any]] = []
        finish_reason = "stop"
        stop_reason: int | str | None = None
        if refusal is not None:
            if len(refusal) > max_chars:
                refusal, finish_reason = refusal[:max_chars], "length"
        elif tools and rng.random() < 0.5 and (call := _tool_call(rng, tools)) is not None:
            tool_calls.append(call)
            content, finish_reason = None, "tool_calls"
        elif content is not None and len(content) > max_chars:
            content, finish_reason = content[:max_chars], "length"
        elif stop_ids:
            stop_reason = stop_ids[0]
        used = _tokens(content or "") + _tokens(refusal or "")
        used += sum(_tokens(c["function"]["arguments"]) for c in tool_calls)
        completion_tokens += used + (_tokens(reasoning) if reasoning else 0)
        if chat:
            message: dict[str, Any] = {
                "role": "assistant",
                "content": content,
                "refusal": refusal,
                "annotations": None,
                "audio": None,
                "function_call": None,
            }
            if tool_calls:  # vLLM 0.32 leaves the key out when there are none
                message["tool_calls"] = tool_calls
            message[options.reasoning_field] = reasoning
            choices.append(
                {
                    "index": index,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": finish_reason,
                    "stop_reason": stop_reason,
                    "token_ids": None,
                    "routed_experts": None,
                }
            )
        else:
            choices.append(
                {
                    "index": index,
                    "text": content,
                    "logprobs": None,
                    "finish_reason": finish_reason,
                    "stop_reason": stop_reason,
                    "token_ids": None,
                    "prompt_logprobs": None,
                    "prompt_token_ids": None,
                    "routed_experts": None,
                }
            )

    cached = rng.choice((0, 0, 16, 32, 64)) if prompt_tokens > 64 else 0
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": min(cached, prompt_tokens)} if cached else None,
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens} if reasoning_tokens else None,
    }
    # Field order and presence as vLLM 0.32 sends them (checked against a real server).
    body: dict[str, Any] = {
        "id": _id(rng, "chatcmpl-" if chat else "cmpl-"),
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": options.system_fingerprint,
        "usage": usage,
    }
    if chat:
        body.update(prompt_logprobs=None, prompt_token_ids=None, prompt_text=None)
    body.update(kv_transfer_params=None, ec_transfer_params=None, metrics=None)
    if options.metrics:
        # Modelled like a busy GPU server (queueing, prefill, ~10-25 ms per output token), not the sleep.
        queue = round(rng.random() * 50.0, 3)
        ttft = round(queue + 15.0 + prompt_tokens * 0.05 + rng.random() * 60.0, 3)
        itl = round(8.0 + rng.random() * 17.0, 3)
        generation = round(itl * max(completion_tokens - 1, 1), 3)
        body["metrics"] = {
            "time_to_first_token_ms": ttft,
            "generation_time_ms": generation,
            "queue_time_ms": queue,
            "mean_itl_ms": itl,
            "tokens_per_second": round(completion_tokens * 1000.0 / (ttft + generation), 3),
        }
    return body


def stream_chunks(body: Mapping[str, Any], rng: random.Random, include_usage: bool = False) -> list[dict[str, Any]]:
    """The SSE chunks (before `data: [DONE]`) vLLM 0.32 sends for `body` with `stream: true`: per choice a
    role chunk, content pieces, the last piece carrying `finish_reason`; then the usage chunk if asked."""
    chat = body["object"] == "chat.completion"
    head = {
        "id": body["id"],
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": body["created"],
        "model": body["model"],
    }
    chunks: list[dict[str, Any]] = []
    for choice in body["choices"]:
        index = choice["index"]
        deltas: list[dict[str, Any]] = []
        if chat:
            message = choice["message"]
            chunks.append(
                {
                    **head,
                    "choices": [
                        {
                            "index": index,
                            "delta": {"role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ],
                    "prompt_token_ids": None,
                    "prompt_text": None,
                }
            )
            for field in ("reasoning", "reasoning_content"):
                if message.get(field):
                    deltas.append({field: message[field]})
            deltas += [{"tool_calls": [{"index": i, **c}]} for i, c in enumerate(message.get("tool_calls") or ())]
            if message.get("refusal"):
                deltas.append({"refusal": message["refusal"]})
            text = message.get("content") or ""
        else:
            text = choice["text"] or ""
        pos = 0
        while pos < len(text):
            step = _ri(rng, 1, 4) * CHARS_PER_TOKEN
            deltas.append({"content": text[pos : pos + step]})
            pos += step
        if not deltas:
            deltas.append({"content": ""})
        for n, delta in enumerate(deltas):
            last = n == len(deltas) - 1
            if chat:
                c: dict[str, Any] = {"index": index, "delta": delta, "logprobs": None}
            else:
                c = {"index": index, "text": delta.get("content", ""), "logprobs": None}
            c["finish_reason"] = choice["finish_reason"] if last else None
            if last or not chat:
                c["stop_reason"] = choice["stop_reason"] if last else None
            if not chat:
                c["prompt_token_ids"] = None
            c["token_ids"] = None
            chunk = {**head, "choices": [c]}
            if last and not include_usage:  # else it comes with the usage chunk (vLLM 0.32)
                chunk["system_fingerprint"] = body["system_fingerprint"]
            chunks.append(chunk)
    if include_usage:
        usage = {k: body["usage"][k] for k in ("prompt_tokens", "total_tokens", "completion_tokens")}
        chunks.append({**head, "choices": [], "usage": usage, "system_fingerprint": body["system_fingerprint"]})
    return chunks


_PROMPTS = {
    "vl": "Describe the image and ground every object.",
    "coder": "Write a function for the task below.",
    "math": "Solve the problem and put the final answer in \\boxed{}.",
    "openai": "Summarise the text below.",
}


def corpus_requests(n: int, profile: Profile | str, seed: int = 0, json_share: float = 0.8) -> list[dict[str, Any]]:
    """The requests behind `make_corpus`: chat requests, `json_share` of them with structured output."""
    profile = _profile_of(profile)
    rng = random.Random(seed)
    fmt = profile.response_format() or {"type": "json_object"}
    requests = []
    for i in range(n):
        request: dict[str, Any] = {
            "model": DEFAULT_MODELS.get(profile.name, profile.name),
            "messages": [{"role": "user", "content": f"{_PROMPTS.get(profile.name, _PROMPTS['openai'])} #{i}"}],
        }
        if rng.random() < json_share:
            request["response_format"] = fmt
        r = rng.random()
        if r < 0.05:
            request["max_tokens"] = _ri(rng, 3, 30)  # cut: finish_reason "length", invalid JSON
        elif r < 0.15:
            request["n"] = 2
        requests.append(request)
    return requests


def make_corpus(n: int, profile: Profile | str, seed: int = 0, json_share: float = 0.8) -> list[bytes]:
    """`n` response bodies as vLLM would send them, deterministic for `seed`.

    `json_share` of them answer a structured-output request (content is JSON; about 5% of all are cut by a
    small `max_tokens`); the rest hold the profile's free text. `created` starts at CORPUS_START and
    advances one second every 20 bodies.

        >>> len(make_corpus(3, "vl", seed=7)) == 3
        True
    """
    profile = _profile_of(profile)
    out = []
    for i, request in enumerate(corpus_requests(n, profile, seed, json_share)):
        options = BodyOptions(created=CORPUS_START + i // 20)
        out.append(to_bytes(make_body(request_rng(seed, request), profile, request, options)))
    return out
