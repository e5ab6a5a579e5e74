"""Time of one degenerate body as it doubles in size: linear time shows as a steady time per KB.

Model output caught in a repetition loop (8k..32k backticks for the coder profile, as many fences, closed or
not; 1k..4k `<|ref|>` for vl) and hostile bodies (deep brackets, a long string), each parsed alone by
`parse_batch` on the cpu backend, best of --repeat. To measure another checkout's parser, put it first on the path:

    python benchmarks/bench_hostile.py [--repeat 3]
    PYTHONPATH=/path/to/other/checkout python benchmarks/bench_hostile.py --repeat 1
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from connector.parse import parse_batch


def _chat(content: str) -> bytes:
    body = {"id": "x", "object": "chat.completion", "created": 1, "model": "m"}
    body["choices"] = [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "length"}]
    return json.dumps(body).encode()


CASES: list[tuple[str, str, Callable[[int], bytes]]] = [
    ("coder: n backticks", "coder", lambda n: _chat("`" * n)),
    ("coder: ```x\\n + n backticks", "coder", lambda n: _chat("```x\n" + "`" * n)),
    ("coder: n/8 x ```x\\n```", "coder", lambda n: _chat("```x\n```" * (n // 8))),
    ("coder: n/5 x ```x\\n, unclosed", "coder", lambda n: _chat("```x\n" * (n // 5))),
    ("vl: n/8 x <|ref|>", "vl", lambda n: _chat("<|ref|>" * (n // 8))),
    ("body: n open brackets", "openai", lambda n: b'{"id":"x","x":' + b"[" * n),
    ("body: n-character string", "openai", lambda n: b'{"id":"x","x":"' + b"a" * n + b'"}'),
]
SIZES = (8_192, 16_384, 32_768)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for _, profile, make in CASES:  # first calls load profiles and compile patterns
        parse_batch([make(16)], profile, "cpu")
    print(f"{'body':<32}" + "".join(f"{f'n={n}':>14}" for n in SIZES) + "   time per KB, last/first")
    for name, profile, make in CASES:
        seconds = []
        for n in SIZES:
            body = make(n)
            best = float("inf")
            for _ in range(args.repeat):
                started = time.perf_counter()
                parse_batch([body], profile, "cpu")
                best = min(best, time.perf_counter() - started)
            seconds.append((best, len(body)))
        per_kb = [s / (size / 1024) for s, size in seconds]
        cells = "".join(f"{s * 1e3:>11.1f} ms" for s, _ in seconds)
        print(f"{name:<32}{cells}   {per_kb[-1] / per_kb[0]:.1f}x", flush=True)


if __name__ == "__main__":
    main()
