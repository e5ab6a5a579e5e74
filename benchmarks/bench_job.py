"""Rows/s of the whole Flink job (replay and request mode) beside the parse-only rate of `parse_batch`.

    python benchmarks/bench_job.py [--bodies 200000] [--requests 5000] [--profile coder] [--batch 10000]

One run prints one table; ratios are against the parse-only rate measured in the same run. Job rates include
the job's fixed start-up (several seconds), so they are shown also net of an empty job of the same shape.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connector.decode import parse_batch  # noqa: E402
from connector.simulator.responses import make_corpus  # noqa: E402

COLUMNS = "id STRING, model STRING, created TIMESTAMP(3), finish_reason STRING, prompt_tokens BIGINT"


def parse_only(bodies: list[bytes], profile: str, batch: int) -> float:
    started = time.perf_counter()
    for i in range(0, len(bodies), batch):
        parse_batch(bodies[i : i + batch], profile, backend="cpu", first_line=i + 1)
    return len(bodies) / (time.perf_counter() - started)


def run_job(options: str, batch: int) -> float:
    """Seconds of one job: a 'dspark-vllm' table -> blackhole."""
    from connector.flink import local_environment

    env, t_env = local_environment()
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE t ({COLUMNS}, WATERMARK FOR created AS created - INTERVAL '5' SECOND) "
        f"WITH ('connector' = 'dspark-vllm', 'parse.backend' = 'cpu', 'parse.batch-size' = '{batch}', {options})"
    )
    t_env.execute_sql(f"CREATE TEMPORARY TABLE sink ({COLUMNS}) WITH ('connector' = 'blackhole')")
    started = time.perf_counter()
    t_env.execute_sql("INSERT INTO sink SELECT * FROM t").wait()
    return time.perf_counter() - started


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bodies", type=int, default=200_000)
    p.add_argument("--requests", type=int, default=5_000)
    p.add_argument("--rate", type=int, default=5_000, help="prompts/s offered in request mode")
    p.add_argument("--concurrency", type=int, default=128)
    p.add_argument("--profile", default="coder")
    p.add_argument("--batch", type=int, default=10_000)
    args = p.parse_args()

    bodies = make_corpus(args.bodies, args.profile, seed=1)
    mb = sum(len(b) for b in bodies) / 1e6
    rows: list[tuple[str, float, str]] = []
    base = parse_only(bodies, args.profile, args.batch)
    rows.append((f"parse_batch only (cpu, {args.batch}/batch)", base, f"{base * mb / len(bodies):.0f} MB/s"))

    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty"
        empty.mkdir()
        (empty / "x.jsonl").write_bytes(bodies[0] + b"\n")
        full = Path(tmp) / "full"
        full.mkdir()
        (full / "bodies.jsonl").write_bytes(b"\n".join(bodies) + b"\n")
        startup = run_job(f"'mode' = 'replay', 'replay.path' = '{empty}', 'profile' = '{args.profile}'", args.batch)
        seconds = run_job(f"'mode' = 'replay', 'replay.path' = '{full}', 'profile' = '{args.profile}'", args.batch)
    rows.append(("replay job, with start-up", args.bodies / seconds, f"{seconds:.1f} s"))
    net = max(seconds - startup, 1e-9)
    rows.append(("replay job, net of an empty job", args.bodies / net, f"start-up {startup:.1f} s"))

    from connector.simulator.testing import serve_simulator

    with serve_simulator(mode="process", profiles=(args.profile,), seed=1) as sim:
        import json
        import urllib.request

        with urllib.request.urlopen(sim.url + "/v1/models", timeout=10) as response:
            model = json.load(response)["data"][0]["id"]
        bundle = max(args.concurrency, 1000)
        request = (
            f"'endpoint' = '{sim.url}', 'model' = '{model}', 'profile' = '{args.profile}', "
            f"'prompts.rate' = '{args.rate}', 'prompts.count' = '{args.requests}', "
            f"'request.concurrency' = '{args.concurrency}', 'python.fn-execution.bundle.size' = '{bundle}', "
            f"'python.fn-execution.arrow.batch.size' = '{min(bundle, args.batch)}'"
        )
        seconds = run_job(request, min(bundle, args.batch))
    rows.append((f"request job vs simulator (c={args.concurrency})", args.requests / seconds, f"{seconds:.1f} s"))
    net = max(seconds - startup, 1e-9)
    rows.append(("request job, net of start-up", args.requests / net, f"offered {args.rate}/s"))

    print(f"{args.bodies} bodies of profile {args.profile} ({mb / len(bodies) * 1000:.2f} KB each), parallelism 1")
    print(f"{'path':<46} {'rows/s':>10} {'x parse-only':>13}  note")
    for name, rate, note in rows:
        print(f"{name:<46} {rate:>10,.0f} {rate / base:>13.3f}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
