"""Requests/s and CPU per request of the client and of bare HTTP engines against the simulator, taking turns.

    python benchmarks/bench_client.py [--requests 2000] [--concurrency 1,16,64,256] [--rounds 3] [--workers 1]

The simulator runs in a subprocess (`--workers` processes); the engines in this process, one after the other
in each round (so a change in the machine's load hits them all alike); each figure is the median over the
rounds. Engines: the client (`VllmClient`: aiohttp, retries, outcomes), a bare aiohttp session, a bare
httpx.AsyncClient (one pool) and httpx with the pool split in shards of 4 connections (as the client did
with httpx); httpx is measured only when installed (`pip install -e '.[bench]'`). "CPU ms/req" is this
process's CPU time per request, the steadier figure on a shared machine: the simulator's CPU is its own.
Table 2: the client with 20 ms simulated latency, against the ideal concurrency / latency. Table 3: SSE
assembly of one large stream fed in one piece and in 4 KiB pieces (it must not grow with the piece count).
Speed belongs here, never in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp  # noqa: E402

from connector.client import StreamAssembler, VllmClient  # noqa: E402
from connector.simulator.server import SimulatorConfig  # noqa: E402
from connector.simulator.testing import serve_simulator  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
PATH = "/v1/chat/completions"
Measured = tuple[int, float, float]  # errors, seconds, CPU seconds of this process
Engine = Callable[[str, list[bytes], int], Awaitable[Measured]]  # (url, bodies, concurrency)


def bodies(n: int, tag: str) -> list[bytes]:
    return [
        json.dumps({"model": MODEL, "messages": [{"role": "user", "content": f"Summarise {tag}{i}"}]}).encode()
        for i in range(n)
    ]


async def client_engine(url: str, sent: list[bytes], concurrency: int) -> Measured:
    payloads = [json.loads(b) for b in sent]
    async with VllmClient(url, concurrency=concurrency, max_attempts=1) as client:
        await client.send_all(payloads[: 2 * concurrency])  # connections open before timing
        return await _timed(lambda: client.send_all(payloads), lambda out: sum(not o.ok for o in out))


async def aiohttp_engine(url: str, sent: list[bytes], concurrency: int) -> Measured:
    slots = asyncio.Semaphore(concurrency)
    headers = {"content-type": "application/json"}
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(body: bytes) -> int:
            async with slots, session.post(url + PATH, data=body, headers=headers) as response:
                await response.read()
                return response.status

        async def all_of(batch: list[bytes]) -> list[int]:
            return await asyncio.gather(*(one(b) for b in batch))

        await all_of(sent[: 2 * concurrency])
        return await _timed(lambda: all_of(sent), lambda out: sum(s != 200 for s in out))


def httpx_engine(shard: int | None) -> Engine:
    async def run(url: str, sent: list[bytes], concurrency: int) -> Measured:
        import httpx

        sizes = [concurrency] if shard is None else [shard] * (concurrency // shard) + [concurrency % shard]
        sizes = [s for s in sizes if s]
        free = list(sizes)
        slots = asyncio.Semaphore(concurrency)
        headers = {"content-type": "application/json"}
        pools = [
            httpx.AsyncClient(base_url=url, limits=httpx.Limits(max_connections=s, max_keepalive_connections=s))
            for s in sizes
        ]

        async def one(body: bytes) -> int:
            async with slots:
                i = max(range(len(free)), key=free.__getitem__)
                free[i] -= 1
                try:
                    return (await pools[i].post(PATH, content=body, headers=headers)).status_code
                finally:
                    free[i] += 1

        async def all_of(batch: list[bytes]) -> list[int]:
            return await asyncio.gather(*(one(b) for b in batch))

        try:
            await all_of(sent[: 2 * concurrency])
            return await _timed(lambda: all_of(sent), lambda out: sum(s != 200 for s in out))
        finally:
            for pool in pools:
                await pool.aclose()

    return run


async def _timed(work, count_errors) -> Measured:  # type: ignore[no-untyped-def]
    start, cpu = time.perf_counter(), time.process_time()
    out = await work()
    return int(count_errors(out)), time.perf_counter() - start, time.process_time() - cpu


def engines() -> dict[str, Engine]:
    found: dict[str, Engine] = {"client (aiohttp)": client_engine, "aiohttp": aiohttp_engine}
    try:
        import httpx  # noqa: F401
    except ImportError:
        print("httpx is not installed: only the aiohttp engines are measured (pip install -e '.[bench]')")
        return found
    found["httpx"] = httpx_engine(None)
    found["httpx x4"] = httpx_engine(4)
    return found


def sse_table(events: int) -> None:
    chunks = []
    for i in range(events):
        delta = {"content": f"token {i} "}
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": []}
        chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": None if i < events - 1 else "stop"}]
        chunks.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    stream = b"".join(chunks) + b"data: [DONE]\n\n"
    print()
    print(f"Table 3: SSE assembly of one stream of {len(stream) / 1e6:.1f} MB ({events:,} events), CPU seconds")
    times = {}
    for piece in (4096, len(stream)):
        start = time.process_time()
        assembler = StreamAssembler()
        for at in range(0, len(stream), piece):
            assembler.feed(stream[at : at + piece])
        assembler.finish()
        times[piece] = time.process_time() - start
    print(f"  in 4 KiB pieces: {times[4096]:.3f} s; in one piece: {times[len(stream)]:.3f} s; "
          f"one piece / 4 KiB pieces: {times[len(stream)] / times[4096]:.2f}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", default="1,16,64,256")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1, help="simulator processes")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--sse-events", type=int, default=20_000)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    print(
        f"machine: {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}, "
        f"aiohttp {aiohttp.__version__}, simulator workers: {args.workers}, requests per point: {args.requests}, "
        f"rounds: {args.rounds} (median)"
    )
    measured = engines()
    names = list(measured)
    config = SimulatorConfig(profiles=("openai",), seed=1)
    with serve_simulator(config, mode="process", workers=args.workers) as sim:
        print()
        print("Table 1: no simulated latency (CPU-bound); ratios against bare aiohttp")
        print(f"{'concurrency':>11} | {'engine':>16} | {'req/s':>7} | {'CPU ms/req':>10} | {'CPU ratio':>9} | errors")
        for c in levels:
            samples: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
            errors = dict.fromkeys(names, 0)
            for r in range(args.rounds):
                for name in names:
                    failed, seconds, cpu_s = asyncio.run(measured[name](sim.url, bodies(args.requests, f"{c}-{r}-"), c))
                    errors[name] += failed
                    samples[name].append((seconds, cpu_s))
            cpu = {n: statistics.median(s[1] for s in samples[n]) * 1000 / args.requests for n in names}
            for name in names:
                rate = args.requests / statistics.median(s[0] for s in samples[name])
                print(
                    f"{c:>11} | {name:>16} | {rate:>7,.0f} | {cpu[name]:>10.3f} | "
                    f"{cpu[name] / cpu['aiohttp']:>9.2f} | {errors[name]}"
                )

    latency = args.latency_ms
    with serve_simulator(SimulatorConfig(seed=1, latency_ms=latency), mode="process", workers=args.workers) as sim:
        print()
        print(f"Table 2: the client, {latency:g} ms simulated latency per request")
        print(f"{'concurrency':>11} | {'req/s':>7} | {'ideal c/lat':>11} | {'ratio':>5} | errors")
        for c in levels:
            n = min(args.requests, max(200, int(c * 1000 / latency * 2)))
            failed, seconds, _ = asyncio.run(client_engine(sim.url, bodies(n, f"l{c}-"), c))
            rate = n / seconds
            ideal = c * 1000.0 / latency
            print(f"{c:>11} | {rate:>7,.0f} | {ideal:>11,.0f} | {rate / ideal:>5.2f} | {failed}")

    sse_table(args.sse_events)
    return 0


if __name__ == "__main__":
    sys.exit(main())
