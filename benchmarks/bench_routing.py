"""What prefix-aware routing buys: ML_PREDICT over two replicas with a prefix cache, 'prefix' against 'least-loaded'.

    python benchmarks/bench_routing.py [--rows 2000] [--heads 8] [--head-tokens 500] [--cache-tokens 2048]
                                       [--rounds 2] [--modes least-loaded,prefix,prefix:2] [--slower 1]
                                       [--endpoints URL,URL]

Each prompt is one of `--heads` system-prompt-like heads of about `--head-tokens` tokens, then a question of its
own (`'prompt.template' = '{head} ... {question}'`). Two simulators (`dspark-vllm simulate --prefix-cache-tokens
2048 --block-size 32 --prefill-ms-per-token 0.05 --latency-ms 20`: a prefix cache that holds about half of the
heads' tokens, as vLLM's with `--num-gpu-blocks-override 64 --block-size 32`) are started fresh for each run, and
the same rows go through one ML_PREDICT job per routing mode, in turns (`--rounds`): 'least-loaded', 'prefix'
(load bound 1.25) and 'prefix:2' ('request.routing.load-bound' = '2'). The routing key is the prompt's first bytes
within its head ('request.routing.prefix-length': the shortest head's bytes, at most 1,000). Printed for each run:
every key once (or not) and the error rows; the requests each replica got, per head (the model's
`request.replica` column: which replica each head went to); the hit rate that /metrics reports
(`vllm:prefix_cache_hits_total` / `vllm:prefix_cache_queries_total`, summed over the replicas); then, over all
rounds, each prefix mode's hits and rows/s over least-loaded's. The simulators' ports are new each round; each
replica takes an even share of the heads whatever the ports (docs/flink.md, "Replicas and routing").
`--slower F`: the second simulator answers F times slower (its latency and its prefill per token), as a replica on
a busier machine. `--parallelism N`: the job at parallelism N (up to 4: the rows are 4 files), each subtask routing
on its own.

`--endpoints URL,URL`: replicas already running (two real vLLM servers, each with its prefix cache; the model name
from the first one's /v1/models) instead of simulators. The heads are then cut to `--head-tokens` tokens as the
first server's /tokenize counts them (a real tokenizer is not the simulator's 4 characters a token). Their
counters are read before and after each run, so they need not be restarted, but then a run starts with what the
previous one left in their caches: run each mode once per fresh start of the servers (`--rounds 1 --modes prefix`,
restart, `--modes least-loaded`) for a clean comparison.
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


def sized_heads(n: int, tokens: int, seed: int, url: str, model: str) -> list[str]:
    """`n` distinct heads of about `tokens` tokens as the server at `url` counts them (its /tokenize): a real
    model's tokenizer is not the simulator's 4 characters a token."""

    def count(text: str) -> int:
        body = json.dumps({"model": model, "prompt": text, "add_special_tokens": False}).encode()
        request = urllib.request.Request(url + "/tokenize", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(json.load(response)["count"])

    out = []
    for text in heads(n, tokens * 2, seed):  # long enough for any tokenizer that takes >= 2 characters a token
        lo, hi = 1, len(text)
        while lo < hi:  # the shortest cut of `text` with `tokens` tokens
            mid = (lo + hi) // 2
            if count(text[:mid]) >= tokens:
                hi = mid
            else:
                lo = mid + 1
        out.append(text[:lo])
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


def run(
    t_env, endpoints: list[str], model: str, mode: str, prefix_length: int, out: Path, tag: str
) -> tuple[float, float, float, list[dict]]:
    """One ML_PREDICT job over the rows; (queries, hits, seconds, the rows out: key, head, replica, error)."""
    before = [counters(u) for u in endpoints]
    t_env.execute_sql(f"DROP TEMPORARY MODEL IF EXISTS answerer_{tag}")
    routing, _, bound = mode.partition(":")  # 'prefix:2': 'request.routing.load-bound' = '2'
    bound_option = f", 'request.routing.load-bound' = '{bound}'" if bound else ""
    t_env.execute_sql(f"""
        CREATE TEMPORARY MODEL answerer_{tag} INPUT (head STRING, question STRING)
          OUTPUT (content STRING, `request.replica` STRING, `error.reason` STRING)
        WITH ('provider' = 'dspark-vllm', 'endpoint' = '{",".join(endpoints)}', 'model' = '{model}',
              'prompt.template' = '{{head}} Question: {{question}}', 'request.max-tokens' = '8',
              'request.concurrency' = 'auto', 'request.routing' = '{routing}',
              'request.routing.prefix-length' = '{prefix_length}'{bound_option})""")
    t_env.execute_sql(f"""
        CREATE TEMPORARY TABLE answers_{tag} (k STRING, h INT, replica STRING, reason STRING)
        WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'json')""")
    started = time.perf_counter()
    t_env.execute_sql(f"""
        INSERT INTO answers_{tag} SELECT k, h, `request.replica`, `error.reason`
          FROM ML_PREDICT(TABLE questions, MODEL answerer_{tag}, DESCRIPTOR(head, question),
            MAP['async', 'true', 'output-mode', 'ALLOW_UNORDERED', 'max-concurrent-operations', '256'])""").wait()
    seconds = time.perf_counter() - started
    after = [counters(u) for u in endpoints]
    queries = sum(a[0] - b[0] for a, b in zip(after, before, strict=True))
    hits = sum(a[1] - b[1] for a, b in zip(after, before, strict=True))
    rows = []
    for f in sorted(out.rglob("*")):
        if f.is_file() and not f.name.startswith("."):
            rows += [json.loads(line) for line in f.read_text().split("\n") if line]
    return queries, hits, seconds, rows


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
    parser.add_argument("--parallelism", type=int, default=1, help="the job's parallelism (each subtask routes)")
    parser.add_argument("--slower", type=float, default=1.0, help="the second simulator this many times slower")
    parser.add_argument("--endpoints", default=None, help="replicas already running, separated by commas")
    args = parser.parse_args()

    from connector.flink import local_environment
    from connector.simulator import testing

    modes = args.modes.split(",")
    if args.endpoints:
        with urllib.request.urlopen(args.endpoints.split(",")[0] + "/v1/models", timeout=30) as response:
            served = json.load(response)["data"][0]["id"]
        texts = sized_heads(args.heads, args.head_tokens, 11, args.endpoints.split(",")[0], served)
    else:
        texts = heads(args.heads, args.head_tokens, seed=11)
    # The routing key: the start of the prompt, within its head (the rest is each row's own question).
    prefix_length = min(1000, min(len(t.encode()) for t in texts))
    rng = random.Random(5)
    results: dict[str, list[tuple[float, float, float]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as folder:
        rows_csv = Path(folder) / "questions"
        rows_csv.mkdir()
        chosen = [rng.randrange(len(texts)) for _ in range(args.rows)]
        for part in range(4):  # 4 files: a split for each source subtask, up to parallelism 4
            (rows_csv / f"part{part}.csv").write_text(
                "".join(f"k{i},{h},{texts[h]},What is {i} + {i}?\n" for i, h in enumerate(chosen) if i % 4 == part)
            )
        print(f"{args.rows:,} rows over {len(texts)} heads of {min(map(len, texts))}-{max(map(len, texts))} "
              f"characters; rows per head {[chosen.count(h) for h in range(len(texts))]}", flush=True)  # fmt: skip
        _, t_env = local_environment()
        t_env.get_config().set("parallelism.default", str(args.parallelism))
        t_env.execute_sql(f"""
            CREATE TEMPORARY TABLE questions (k STRING, h INT, head STRING, question STRING) WITH (
                'connector' = 'filesystem', 'path' = '{rows_csv}', 'format' = 'csv')""")
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
                                    mode="process", seed=i, latency_ms=20 * (args.slower if i else 1),
                                    prefix_cache_tokens=args.cache_tokens, block_size=32,
                                    prefill_ms_per_token=0.05 * (args.slower if i else 1),
                                )
                            )
                            for i in range(2)
                        ]  # fmt: skip
                        endpoints = [s.url for s in sims]
                    with urllib.request.urlopen(endpoints[0] + "/v1/models", timeout=30) as response:
                        model = json.load(response)["data"][0]["id"]
                    out = Path(folder) / f"out{n}"
                    queries, hits, seconds, rows = run(t_env, endpoints, model, mode, prefix_length, out, str(n))
                keys = sorted(r["k"] for r in rows)
                print(f"{mode:>12}: every key once: {keys == sorted(f'k{i}' for i in range(args.rows))}, "
                      f"error rows {sum(1 for r in rows if r['reason'])}", flush=True)  # fmt: skip
                for rep in sorted({r["replica"] or "none" for r in rows}):
                    mine = [r["h"] for r in rows if (r["replica"] or "none") == rep]
                    print(f"{mode:>12}: {rep}: {len(mine)} requests; per head "
                          f"{[mine.count(h) for h in range(len(texts))]}", flush=True)  # fmt: skip
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
