"""ML_PREDICT on the standalone cluster with 2 TaskManagers: parallelism 4 against parallelism 1, same replicas.

    python benchmarks/bench_cluster_parallelism.py [--rows 3000] [--parallelisms 1,4] [--capacity 16]
                                                   [--latency-ms 100] [--concurrency auto]

Three simulators that serve `--capacity` completions at once each (`--latency-ms` each, 429 beyond: 480/s
together by default) and a standalone cluster from jobs/standalone_cluster.sh (its own directory, 2 slots a
TaskManager, a second TaskManager started with `start-taskmanager`: 4 slots). The same `--rows` keyed rows go
through one `submit-sql` job (the connector jar's SQL runner) per parallelism, one after the other, with
`'request.concurrency'` = `--concurrency`. Printed for each: every key once (or not), the error rows, the
answers per second from the first answer to the last (the simulators' counters, read every 50 ms), the job's
own duration (the REST API's, scheduling included) with its rows/s, the subtasks' TaskManagers, each replica's
share of the answers and the share answered 429; then each parallelism's answers/s over the first's. The
cluster and the simulators are stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "jobs" / "standalone_cluster.sh"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_replicas import SQL, questions_and_replicas  # noqa: E402  (the same job, at each parallelism)


def rest(base: str, path: str) -> dict:
    with urllib.request.urlopen(base + path, timeout=10) as response:
        return json.load(response)


def answered(now: list[dict[str, float]], start: list[dict[str, float]]) -> float:
    """Completions answered between two reads of the simulators' counters (asked less refused at capacity)."""
    return sum(
        (n.get("requests /v1/chat/completions", 0.0) - n.get("throttled", 0.0))
        - (b.get("requests /v1/chat/completions", 0.0) - b.get("throttled", 0.0))
        for n, b in zip(now, start, strict=True)
    )


def watch(sims: list, start: list[dict[str, float]], marks: list[tuple[float, float]], done: threading.Event) -> None:
    """Appends (time, answered so far) to `marks` each time the count changes, every 50 ms until `done`."""
    last = -1.0
    while not done.is_set():
        n = answered([s.stats() for s in sims], start)
        if n != last:
            marks.append((time.monotonic(), n))
            last = n
        time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--parallelisms", default="1,4")
    parser.add_argument("--capacity", type=int, default=16)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--concurrency", default="auto", help="'request.concurrency' of the model")
    args = parser.parse_args()

    if not shutil.which("java"):
        sys.exit("bench_cluster_parallelism: the cluster needs java on PATH")
    parallelisms = [int(p) for p in args.parallelisms.split(",")]
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        tmp = Path(folder)
        # One file is one split, read by one source subtask, which feeds the ML_PREDICT subtask chained to it: a
        # file for each of the most parallel subtasks, so that every subtask gets rows.
        files = max(parallelisms)
        sims, model = questions_and_replicas(stack, tmp, args.rows, files, args.latency_ms, args.capacity)
        env = {
            **os.environ,
            "DSPARK_PYTHON": sys.executable,
            "DSPARK_CLUSTER_DIR": str(tmp / "cluster"),
            "DSPARK_SLOTS": "2",
            "DSPARK_DETACHED": "0",
        }

        def script(*more: str) -> str:
            run = subprocess.run([str(SCRIPT), *more], env=env, capture_output=True, text=True, timeout=600)
            if run.returncode != 0:
                sys.exit(f"bench_cluster_parallelism: {' '.join(more)} failed:\n{(run.stdout + run.stderr)[-3000:]}")
            return run.stdout + run.stderr

        stack.callback(lambda: print(script("stop").strip()))
        print(script("start").strip(), flush=True)
        print(script("start-taskmanager").strip(), flush=True)
        base = f"http://127.0.0.1:{(tmp / 'cluster' / 'rest.port').read_text().strip()}"
        deadline = time.monotonic() + 120
        while (overview := rest(base, "/overview"))["taskmanagers"] < 2 and time.monotonic() < deadline:
            time.sleep(1)  # `start-taskmanager` returns once any TaskManager has registered
        print(f"cluster: {overview['taskmanagers']} TaskManagers, {overview['slots-total']} slots", flush=True)

        rates = {}
        for p in parallelisms:
            start = [s.stats() for s in sims]
            marks: list[tuple[float, float]] = []  # (time, completions answered so far) at each change
            done = threading.Event()
            watcher = threading.Thread(target=watch, args=(sims, start, marks, done), daemon=True)
            watcher.start()
            sql = tmp / f"p{p}.sql"
            out = tmp / f"out{p}"
            endpoint = ",".join(s.url for s in sims)
            sql.write_text(SQL.format(parallelism=p, questions=tmp / "questions", model=model, out=out,
                                      endpoint=endpoint, concurrency=args.concurrency))  # fmt: skip
            printed = script("submit-sql", str(sql))
            done.set()
            watcher.join(timeout=10)
            end = [s.stats() for s in sims]
            job = re.findall(r"submitted job ([0-9a-f]{32})", printed)[-1]
            info = rest(base, f"/jobs/{job}")
            hosts = sorted({
                f"{s['taskmanager-id']}"
                for v in info["vertices"]
                for s in rest(base, f"/jobs/{job}/vertices/{v['id']}/taskmanagers")["taskmanagers"]
            })  # fmt: skip
            rows = []
            for f in sorted(out.rglob("*")):
                if f.is_file() and not f.name.startswith("."):
                    rows += [json.loads(line) for line in f.read_text().split("\n") if line]
            keys = sorted(r["k"] for r in rows)
            asked = [e.get("requests /v1/chat/completions", 0.0) - b.get("requests /v1/chat/completions", 0.0)
                     for e, b in zip(end, start, strict=True)]  # fmt: skip
            throttled = [e.get("throttled", 0.0) - b.get("throttled", 0.0) for e, b in zip(end, start, strict=True)]
            ok = [a - t for a, t in zip(asked, throttled, strict=True)]
            first = next(t for t, n in marks if n > 0)
            last = marks[-1][0]
            rate = (marks[-1][1] - next(n for _, n in marks if n > 0)) / max(last - first, 1e-9)
            rates[p] = rate
            seconds = info["duration"] / 1000.0
            print(f"parallelism {p}: rows out {len(rows):,} of {args.rows:,}; every key once: "
                  f"{keys == sorted(f'k{i}' for i in range(args.rows))}; error rows "
                  f"{sum(1 for r in rows if r['reason'])}", flush=True)  # fmt: skip
            print(f"parallelism {p}: {rate:,.0f} answers/s from the first answer to the last; the job "
                  f"{seconds:.1f} s ({args.rows / seconds:,.0f} rows/s, scheduling included); TaskManagers "
                  f"{len(hosts)}", flush=True)  # fmt: skip
            print(f"parallelism {p}: shares of the answers "
                  f"{', '.join(f'{a / max(sum(ok), 1):.2f}' for a in ok)}; answered 429: "
                  f"{sum(throttled) / max(sum(asked), 1):.3f} of {sum(asked):,.0f}", flush=True)  # fmt: skip
    for p in parallelisms[1:]:
        ratio = rates[p] / rates[parallelisms[0]]
        print(f"parallelism {p} / parallelism {parallelisms[0]}: {ratio:.2f}x the answers/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
