"""Requests/s the client sustains against the simulator, beside the simulator's own maximum (wrk).

    python benchmarks/bench_client.py [--requests 3000] [--concurrency 1,4,16,64,256] [--workers 1]

The simulator runs in a subprocess (`--workers` processes); the client in this process. Table 1: no simulated
latency, so both sides are CPU-bound (on a 2-core machine they share the cores); the ratio is the client's
rate over the simulator's maximum measured with wrk in the same run. Table 2: 20 ms simulated latency, the
ratio against the ideal concurrency / latency, which shows the concurrency bound at work. Speed belongs here,
never in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connector.client import VllmClient  # noqa: E402
from connector.simulator.server import SimulatorConfig  # noqa: E402
from connector.simulator.testing import serve_simulator  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LUA = """
counter = 0
request = function()
  counter = counter + 1
  local body = '{"model":"MODEL","messages":[{"role":"user","content":"Summarise the text below. #'
    .. counter .. '"}]}'
  return wrk.format("POST", "/v1/chat/completions", {["Content-Type"] = "application/json"}, body)
end
""".replace("MODEL", MODEL)


def payloads(n: int, tag: str) -> list[dict[str, object]]:
    return [
        {"model": MODEL, "messages": [{"role": "user", "content": f"Summarise the text below. {tag}{i}"}]}
        for i in range(n)
    ]


async def client_rate(url: str, n: int, concurrency: int, stream: bool = False) -> tuple[float, float, int]:
    """(requests/s, client CPU ms per request, errors). CPU time is this process's: the simulator runs in
    another, so it is the client's own cost, and it moves less than wall time on a shared machine."""
    async with VllmClient(url, concurrency=concurrency, stream=stream, max_attempts=1) as client:
        await client.send_all(payloads(min(n, 2 * concurrency), "warm"))  # connections open before timing
        start, cpu = time.perf_counter(), time.process_time()
        outcomes = await client.send_all(payloads(n, f"c{concurrency}-"))
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return n / elapsed, cpu * 1000 / n, sum(not o.ok for o in outcomes)


async def httpx_rate(url: str, n: int, concurrency: int) -> tuple[float, float]:
    """Baseline: a bare httpx.AsyncClient (one pool), a semaphore and gather; no retries, no outcomes."""
    import httpx

    slots = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits) as http:

        async def one(payload: dict[str, object]) -> int:
            async with slots:
                return (await http.post("/v1/chat/completions", json=payload)).status_code

        await asyncio.gather(*(one(p) for p in payloads(min(n, 2 * concurrency), "warm")))
        start, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one(p) for p in payloads(n, f"h{concurrency}-")))
        return n / (time.perf_counter() - start), (time.process_time() - cpu) * 1000 / n


def wrk_rate(url: str, connections: int, seconds: int) -> float | None:
    if shutil.which("wrk") is None:
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(LUA)
    try:
        out = subprocess.run(
            ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", f.name, url],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        os.unlink(f.name)
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        print(f"  (wrk saw {errors.group(1)} non-2xx responses)")
    return float(m.group(1)) if m else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", default="1,4,16,64,256")
    parser.add_argument("--workers", type=int, default=1, help="simulator processes (wrk runs against the same)")
    parser.add_argument("--wrk-seconds", type=int, default=5)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    print(
        f"machine: {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}, "
        f"simulator workers: {args.workers}, requests per point: {args.requests}"
    )

    config = SimulatorConfig(profiles=("openai",), seed=1)
    with serve_simulator(config, mode="process", workers=args.workers) as sim:
        sim_max = wrk_rate(sim.url, 64, args.wrk_seconds)
        sim_max_1 = wrk_rate(sim.url, 1, max(2, args.wrk_seconds // 2))
        print(
            f"simulator max (wrk -t1 -c64, POST /v1/chat/completions, distinct prompts): "
            f"{sim_max if sim_max is None else f'{sim_max:,.0f}'} req/s; with -c1: "
            f"{sim_max_1 if sim_max_1 is None else f'{sim_max_1:,.0f}'} req/s"
        )
        print()
        print("Table 1: no simulated latency (CPU-bound)")
        print(
            f"{'concurrency':>11} | {'client req/s':>12} | {'CPU ms/req':>10} | {'bare httpx':>10} | "
            f"{'CPU ms/req':>10} | {'client/httpx':>12} | {'stream req/s':>12} | {'sim max':>8} | "
            f"{'client/sim':>10} | errors"
        )
        for c in levels:
            rate, cpu, errors = asyncio.run(client_rate(sim.url, args.requests, c))
            bare, bare_cpu = asyncio.run(httpx_rate(sim.url, args.requests, c))
            srate, _, serrors = asyncio.run(client_rate(sim.url, args.requests // 2, c, stream=True))
            ratio = f"{rate / sim_max:.2f}" if sim_max else "n/a"
            print(
                f"{c:>11} | {rate:>12,.0f} | {cpu:>10.2f} | {bare:>10,.0f} | {bare_cpu:>10.2f} | "
                f"{rate / bare:>12.2f} | {srate:>12,.0f} | {sim_max or 0:>8,.0f} | {ratio:>10} | "
                f"{errors + serrors}"
            )

    latency = args.latency_ms
    with serve_simulator(SimulatorConfig(seed=1, latency_ms=latency), mode="process", workers=args.workers) as sim:
        print()
        print(f"Table 2: {latency:g} ms simulated latency per request")
        print(f"{'concurrency':>11} | {'client req/s':>12} | {'ideal c/lat':>11} | {'ratio':>5} | errors")
        for c in levels:
            n = min(args.requests, max(200, int(c * 1000 / latency * 2)))
            rate, _, errors = asyncio.run(client_rate(sim.url, n, c))
            ideal = c * 1000.0 / latency
            print(f"{c:>11} | {rate:>12,.0f} | {ideal:>11,.0f} | {rate / ideal:>5.2f} | {errors}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
