"""What prefix-aware routing buys: ML_PREDICT over two replicas with a prefix cache, 'prefix' against 'least-loaded'.

    python benchmarks/bench_routing.py [--rows 2000] [--heads 8] [--head-tokens 500] [--cache-tokens 2048]
                                       [--rounds 2] [--endpoints URL,URL]

Each prompt is one of `--heads` system-prompt-like heads of about `--head-tokens` tokens, then a question of its
own (`'prompt.template' = '{head} ... {question}'`). Two simulators (`dspark-vllm simulate --prefix-cache-tokens
2048 --block-size 32 --prefill-ms-per-token 0.05 --latency-ms 20`: a prefix cache that holds about half of the
heads' tokens, as vLLM's with `--num-gpu-blocks-override 64 --block-size 32`) are started fresh for each run, and
the same rows go through one ML_PREDICT job per routing mode, in turns (`--rounds`): 'least-loaded', 'prefix'
(load bound 1.25) and 'prefix:2' ('request.routing.load-bound' = '2'). Printed for each run: the requests each
replica got and the hit rate that /metrics reports (`vllm:prefix_cache_hits_total` /
`vllm:prefix_cache_queries_total`, summed over the replicas); then, over all rounds, each prefix mode's hits and
rows/s over least-loaded's. The simulators' ports are new each round, and with them which replica each head hashes
to: with 8 heads over 2 replicas an even split (4 and 4) comes in about a quarter of the rounds.

`--endpoints URL,URL`: replicas already running (two real vLLM servers, each with its prefix cache; the model name
from the first one's /v1/models) instead of simulators; their counters are read before and after each run, so
they need not be restarted, but then a run starts with what the previous one left in their caches: run each mode
once per fresh start of the servers (`--rounds 1 --modes prefix`, restart, `--modes least-loaded`) for a clean
comparison.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

WORDS = [
    "review",
    "answer",
    "careful",
    "concise",
    "policy",
    "customer",
    "order",
    "refund",
    "shipping",
    "account",
    "invoice",
    "product",
    "support",
    "context",
    "detail",
    "example",
    "format",
    "summary",
    "language",
    "polite",
    "formal",
    "question",
    "reply",
    "guideline",
    "rule",
    "tone",
]


def heads(n: int, tokens: int, seed: int) -> list[str]:
    """`n` distinct heads of about `tokens` simulator tokens (4 characters each), without commas (CSV)."""
    rng = random.Random(seed)
    out = []
    for h in range(n):
        words = [f"You are assistant number {h}."]
        while sum(len(w) + 1 for w in words) < tokens * 4:
            words.append(rng.choice(WORDS))
        out.append(" ".join(words)[: tokens * 4])
    return out


def counters(url: str) -> tuple[float, float]:
    """(queries, hits) of a server's /metrics, summed over its series."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        text = response.read().decode()
    found = {"queries": 0.0, "hits": 0.0}
    for line in text.splitlines():
        m = re.match(r"vllm:prefix_cache_(queries|hits)_total(\{[^}]*\})? (\S+)$", line)
        if m:
            found[m.group(1)] += float(m.group(3))
    return found["queries"], found["hits"]


def run(t_env, endpoints: list[str], model: str, mode: str, rows_csv: Path, tag: str) -> tuple[float, float, float]:
    """One ML_PREDICT job over the rows; (queries, hits, seconds)."""
    before = [counters(u) for u in endpoints]
    t_env.execute_sql(f"DROP TEMPORARY MODEL IF EXISTS answerer_{tag}")
    routing, _, bound = mode.partition(":")  # 'prefix:2': 'request.routing.load-bound' = '2'
    bound_option = f", 'request.routing.load-bound' = '{bound}'" if bound else ""
    t_env.execute_sql(f"""
        CREATE TEMPORARY MODEL answerer_{tag} INPUT (head STRING, question STRING) OUTPUT (content STRING)
        WITH ('provider' = 'dspark-vllm', 'endpoint' = '{",".join(endpoints)}', 'model' = '{model}',
              'prompt.template' = '{{head}} Question: {{question}}', 'request.max-tokens' = '8',
              'request.concurrency' = 'auto', 'request.routing' = '{routing}',
              'request.routing.prefix-length' = '1000'{bound_option})""")
    started = time.perf_counter()
    t_env.execute_sql(f"""
        INSERT INTO answers SELECT k, content FROM ML_PREDICT(TABLE questions, MODEL answerer_{tag},
            DESCRIPTOR(head, question), MAP['async', 'true', 'output-mode', 'ALLOW_UNORDERED',
            'max-concurrent-operations', '256'])""").wait()
    seconds = time.perf_counter() - started
    after = [counters(u) for u in endpoints]
    queries = sum(a[0] - b[0] for a, b in zip(after, before, strict=True))
    hits = sum(a[1] - b[1] for a, b in zip(after, before, strict=True))
    return queries, hits, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-tokens", type=int, default=500)
    parser.add_argument("--cache-tokens", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--modes", default="least-loaded,prefix,prefix:2", help="routings; 'prefix:B': 'request.routing.load-bound' B"
    )
    parser.add_argument("--endpoints", default=None, help="replicas already running, separated by commas")
    args = parser.parse_args()

    from connector.flink import local_environment
    from connector.simulator import testing

    modes = args.modes.split(",")
    texts = heads(args.heads, args.head_tokens, seed=11)
    rng = random.Random(5)
    results: dict[str, list[tuple[float, float, float]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as folder:
        rows_csv = Path(folder) / "questions.csv"
        rows_csv.write_text("".join(f"k{i},{rng.choice(texts)},What is {i} + {i}?\n" for i in range(args.rows)))
        _, t_env = local_environment()
        t_env.get_config().set("parallelism.default", "1")
        t_env.execute_sql(f"""
            CREATE TEMPORARY TABLE questions (k STRING, head STRING, question STRING) WITH (
                'connector' = 'filesystem', 'path' = '{rows_csv}', 'format' = 'csv')""")
        t_env.execute_sql("CREATE TEMPORARY TABLE answers (k STRING, content STRING) WITH ('connector' = 'blackhole')")
        n = 0
        for _ in range(args.rounds):
            for mode in modes:
                n += 1
                with ExitStack() as stack:
                    if args.endpoints:
                        endpoints = args.endpoints.split(",")
                    else:
                        sims = [
                            stack.enter_context(
                                testing.serve_simulator(
                                    mode="process", seed=i, latency_ms=20, prefix_cache_tokens=args.cache_tokens,
                                    block_size=32, prefill_ms_per_token=0.05,
                                )
                            )
                            for i in range(2)
                        ]  # fmt: skip
                        endpoints = [s.url for s in sims]
                    with urllib.request.urlopen(endpoints[0] + "/v1/models", timeout=30) as response:
                        model = json.load(response)["data"][0]["id"]
                    queries, hits, seconds = run(t_env, endpoints, model, mode, rows_csv, str(n))
                    if not args.endpoints:
                        shares = [s.stats().get("requests /v1/chat/completions", 0) for s in sims]
                        print(f"{mode:>12}: requests per replica {shares}", flush=True)
                results[mode].append((queries, hits, seconds))
                print(
                    f"{mode:>12}: hit rate {hits / max(queries, 1):.3f} ({hits:,.0f} of {queries:,.0f} prompt tokens), "
                    f"{args.rows / seconds:,.0f} rows/s",
                    flush=True,
                )
    if "least-loaded" in modes:
        hits = {m: sum(r[1] for r in results[m]) for m in modes}
        rate = {m: sum(args.rows / r[2] for r in results[m]) / len(results[m]) for m in modes}
        for m in modes:
            if m != "least-loaded":
                print(f"{m} / least-loaded: {hits[m] / max(hits['least-loaded'], 1):.2f}x the hits, "
                      f"{rate[m] / rate['least-loaded']:.2f}x the rows/s (job start included)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
