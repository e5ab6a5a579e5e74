"""What the Flink tests share (not a test module): the replay corpus's bodies, SQL quoting and the sinks' reader.

Test modules import from here, never from one another (a test module that imports another runs the
other's collection and couples their fixtures).
"""

from __future__ import annotations

import json
from pathlib import Path

T0 = 1_700_000_000  # 2023-11-14 22:13:20 UTC


def good_body(i: int, model: str = "coder-7b") -> dict:
    content = {"language": "python", "code": f"print({i})", "explanation": "prints", "code_blocks": 1 + i % 2}
    body = {
        "id": f"cmpl-{i}",
        "object": "chat.completion",
        "created": T0 + 10 * i,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": json.dumps(content)},
                "finish_reason": "length" if i % 5 == 0 else "stop",
            }
        ],
        "usage": {"prompt_tokens": 10 + i, "completion_tokens": 2 * i, "total_tokens": 10 + 3 * i},
    }
    if i % 3 == 0:
        body["metrics"] = {"time_to_first_token_ms": float(i), "tokens_per_second": 100.0 + i}
    return body


BAD = [
    (b"not json", "not JSON"),
    (b'{"id": "cut", "object": "chat.completion", "created": 17', "truncated"),
    (b'{"error": {"message": "model overloaded", "type": "ServiceUnavailable", "code": 503}}', "error"),
    (b"\xff\xfe invalid utf-8", "UTF-8"),
]


def mixed_bodies(good: int) -> list[bytes]:
    """`good` good bodies, the first of them each followed by one of `BAD`."""
    out = []
    for i in range(good):
        out.append(json.dumps(good_body(i)).encode())
        if i < len(BAD):
            out.append(BAD[i][0])
    return out


# The columns a 'format' = 'dspark-vllm' table declares in tests/test_kafka.py, as parse_batch names them.
FORMAT_COLUMNS = [
    "id", "model", "created", "prompt_tokens", "total_tokens", "choice_finish_reasons", "language", "code_blocks",
]  # fmt: skip


def quoted(columns: str) -> str:
    """'a STRING, b INT' -> '`a` STRING, `b` INT' (column names that are SQL words)."""
    return ", ".join("`{}` {}".format(*c.strip().split(" ", 1)) for c in columns.split(","))


def read_json_dir(path: Path) -> list[dict]:
    """Every row a filesystem sink with 'format' = 'json' wrote under `path`."""
    rows = []
    for file in sorted(path.rglob("*")):
        if file.is_file() and not file.name.startswith("."):
            # (Lines end at "\n" only: a JSON string may hold U+2028 or U+0085 as they are, which splitlines splits.)
            rows += [json.loads(line) for line in file.read_text().split("\n") if line]
    return rows


# The model both route suites use (tests/test_flink_request.py's job, tests/test_flink_model.py's refusals).
TEMPLATE = "Review this code: {question}"
SYSTEM = "You review code."
MODEL_OUTPUT = """
    `language` STRING, code STRING, completion_tokens BIGINT, model STRING,
    usage ROW<prompt_tokens BIGINT, completion_tokens BIGINT>,
    `request.latency-ms` DOUBLE, `request.http-status` INT, `request.attempts` INT,
    `request.prompt` STRING, `error.reason` STRING
"""
PREDICT = (
    "ML_PREDICT(TABLE questions, MODEL reviewer, DESCRIPTOR(question, max_tokens), "
    "MAP['async', 'true', 'output-mode', 'ALLOW_UNORDERED', 'max-concurrent-operations', '32'])"
)


def model_ddl(name: str, endpoint: str, model: str, output: str = MODEL_OUTPUT, **options: str) -> str:
    """CREATE TEMPORARY MODEL `name` (INPUT question, max_tokens) of profile coder, the template and the system
    prompt above, structured output, no retries; `options` over those."""
    given = {
        "provider": "dspark-vllm", "endpoint": endpoint, "model": model, "profile": "coder",
        "prompt.template": TEMPLATE, "system-prompt": SYSTEM, "request.structured-output": "true",
        "request.retry.max-attempts": "1", **options,
    }  # fmt: skip
    with_ = ", ".join(f"'{k}' = '{v}'" for k, v in given.items())
    return f"CREATE TEMPORARY MODEL {name} INPUT (question STRING, max_tokens INT) OUTPUT ({output}) WITH ({with_})"
