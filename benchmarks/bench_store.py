"""Answers paid twice after a killed TaskManager, without and with the response store ('request.store').

    python benchmarks/bench_store.py                     # 8,000 prompts at 100/s, checkpoints every 30 s
    python benchmarks/bench_store.py --prompts 3000 --checkpoint-interval 10 --kill-after 8
    python benchmarks/bench_store.py --kafka             # also the Kafka store, on a broker of its own
    python benchmarks/bench_store.py --route ml_predict  # the same through ML_PREDICT (jobs/enrich.py)

On a standalone cluster (jobs/standalone_cluster.sh) jobs/responses.py (or, with `--route ml_predict`,
jobs/enrich.py: the prompts as rows through ML_PREDICT with a 'dspark-vllm' model, the same options) sends
`--prompts` distinct prompts from a file ('request.rate-limit' = `--rate`, 64 in flight) to the simulator
(answers in 200-500 ms), with EXACTLY_ONCE checkpoints every `--checkpoint-interval` s. `--kill-after` s after
the first completed checkpoint the TaskManager is SIGKILLed and a new one started; the job restarts from that
checkpoint. Three runs, each a fresh cluster and simulator process: without a store; with 'request.store' (a
fresh folder); and the same job again, not killed, over that store with 'request.cache' = '1 h' (its "paid
twice" is every request it sent: 0 expected). The simulator listens on the same port in every run: the
endpoint's URL is part of the request key. Each run prints the requests the server received, those paid twice
(received minus prompts), the committed rows and the prompts missing or duplicated among them (0 and 0), and the
requests in flight when the TaskManager died (vLLM's `num_requests_running` gauge on the simulator, read just
before the kill): with the store, paid twice is about those. The ratio line compares the two killed runs; the
store's bytes per response are read from its folder. With `--kafka` a fourth run, killed like the second, keeps
the answers in a topic of a Kafka broker that the benchmark starts (deploy/kafka/start.sh, on a free 127.0.0.1
port) and stops.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from connector.simulator.testing import serve_simulator  # noqa: E402
from tests.cluster import SCRIPT, rest, wait_for, wait_for_job_end  # noqa: E402
from tests.request_ids import request_ids_of  # noqa: E402

REQUESTS = "requests /v1/chat/completions"
ROUTES = {"table": "responses.py", "ml_predict": "enrich.py"}  # the job of each route (same arguments, same rows)


def committed(out: Path) -> list[list[str]]:
    rows: list[list[str]] = []
    for file in sorted(out.rglob("part-*")):
        rows += list(csv.reader(file.open(newline="")))
    return rows


def running(url: str) -> float:
    """Requests the server holds now: vLLM's own gauge `vllm:num_requests_running` on the simulator's /metrics."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("vllm:num_requests_running"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_run(
    work: Path, args: argparse.Namespace, port: int, store: str | None, cache: bool, kill: bool
) -> dict[str, float]:
    prompts = work / "prompts.txt"
    out = work / f"out-{time.monotonic_ns()}"
    env = {
        **os.environ,
        "DSPARK_PYTHON": sys.executable,
        "DSPARK_CLUSTER_DIR": str(work / f"cluster-{time.monotonic_ns()}"),
        "DSPARK_JOB": str(ROOT / "jobs" / ROUTES[args.route]),
        "DSPARK_DETACHED": "1",
    }

    def script(*a: str) -> str:
        run = subprocess.run([str(SCRIPT), *a], env=env, capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            raise SystemExit(f"bench_store: {a[0]} failed: {(run.stdout + run.stderr)[-2000:]}")
        return run.stdout + run.stderr

    options = ["--option", f"request.rate-limit={args.rate}"]
    if store is not None:
        options += ["--option", f"request.store={store}"]
    if cache:
        options += ["--option", "request.cache=1 h"]
    in_flight = 0.0
    # The same port in every run: the endpoint's URL is part of the request key and of the cache key.
    with serve_simulator(mode="process", seed=7, latency_ms=350.0, jitter_ms=150.0, port=port) as sim:
        try:
            script("start")
            base = "http://127.0.0.1:" + (Path(env["DSPARK_CLUSTER_DIR"]) / "rest.port").read_text().strip()
            submitted = script(
                "submit", "--endpoint", sim.url, "--prompts", str(prompts), "--output", str(out),
                "--concurrency", "64", "--checkpoint-interval", str(args.checkpoint_interval), "--detached", *options,
            )  # fmt: skip
            name = ROUTES[args.route].removesuffix(".py")
            job = next(line.split()[-1] for line in submitted.splitlines() if line.startswith(f"{name}: job "))
            if kill:
                wait_for(
                    "a completed checkpoint",
                    lambda: rest(base, f"/jobs/{job}/checkpoints")["latest"]["completed"],
                    timeout=args.checkpoint_interval * 3 + 120,
                )
                time.sleep(args.kill_after)
                in_flight = running(sim.url)
                script("kill-taskmanager")
                script("start-taskmanager")
            state = wait_for_job_end(base, job, timeout=args.prompts / args.rate * 3 + 300)
            sent = sim.stats().get(REQUESTS, 0.0)
        finally:
            script("stop")
    ids = Counter(r[0] for r in committed(out))
    if args.route == "table":  # a line's request id: its file, line number and line
        expected = set(request_ids_of(prompts))
    else:  # jobs/enrich.py keys a question by the MD5 of its line
        expected = {hashlib.md5(line.encode()).hexdigest() for line in prompts.read_text().splitlines()}
    return {
        "state": state,
        "sent": sent,
        "paid twice": sent - args.prompts if kill else sent,
        "rows": sum(ids.values()),
        "missing": len(expected - set(ids)),
        "duplicated": sum(n - 1 for n in ids.values()),
        "in flight at the kill": in_flight,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=8000)
    p.add_argument("--rate", type=int, default=100, help="prompts per second ('request.rate-limit')")
    p.add_argument("--checkpoint-interval", type=float, default=30.0)
    p.add_argument("--kill-after", type=float, default=25.0, help="seconds after the first completed checkpoint")
    p.add_argument("--kafka", action="store_true", help="also a killed run with the Kafka store")
    p.add_argument("--route", choices=sorted(ROUTES), default="table", help="a request-mode table, or ML_PREDICT")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="dspark-bench-store-") as tmp:
        work = Path(tmp)
        (work / "prompts.txt").write_text("".join(f"Prompt {i}: answer briefly.\n" for i in range(args.prompts)))
        store = work / "store"
        port = free_port()
        runs = {
            "no store, killed": one_run(work, args, port, None, False, True),
            "store, killed": one_run(work, args, port, store.as_uri(), False, True),
            "store + cache, same job again": one_run(work, args, port, store.as_uri(), True, False),
        }
        if args.kafka:
            from tests.kafka_broker import Broker

            broker = Broker.start(work / "kafka")
            try:
                topic = f"kafka://{broker.bootstrap}/bench-answers"
                runs["kafka store, killed"] = one_run(work, args, port, topic, False, True)
            finally:
                broker.stop()
        stored = sum(f.stat().st_size for f in store.iterdir())
    print(
        f"{args.route}: {args.prompts} prompts at {args.rate}/s, 64 in flight, answers in 200-500 ms, "
        f"checkpoints every {args.checkpoint_interval:g} s, TaskManager killed {args.kill_after:g} s after the first "
        "checkpoint"
    )
    head = f"{'received':>9} {'paid twice':>11} {'in flight':>10} {'rows':>6} {'lost':>5} {'dup':>4}"
    print(f"{'run':32} {'state':9} {head}")
    for name, r in runs.items():
        print(
            f"{name:32} {r['state']:9} {r['sent']:9.0f} {r['paid twice']:11.0f} {r['in flight at the kill']:10.0f} "
            f"{r['rows']:6d} {r['missing']:5d} {r['duplicated']:4d}"
        )
    without, with_ = runs["no store, killed"]["paid twice"], runs["store, killed"]["paid twice"]
    print(f"store: {stored / args.prompts:.0f} bytes per response on disk")
    print(f"paid twice with the store / without: {with_:.0f} / {without:.0f} = {with_ / max(without, 1):.3f}")
    if args.kafka:
        kafka = runs["kafka store, killed"]["paid twice"]
        print(f"paid twice with the Kafka store / without: {kafka:.0f} / {without:.0f} = {kafka / max(without, 1):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
