"""Three replicas, one killed mid-run: ML_PREDICT at parallelism 2 with 'request.concurrency' = 'auto'.

    python benchmarks/bench_replicas.py [--rows 4000] [--kill-after 1500] [--parallelism 2] [--capacity 16]
                                        [--latency-ms 100]

Three simulators that serve `--capacity` completions at once each (`--latency-ms` each, 429 beyond: 480/s
together by default), one `dspark-vllm sql` job over `--rows` keyed rows in a CSV file for each subtask (a file is
one split, read by one source subtask, which feeds the ML_PREDICT subtask chained to it), the second replica
killed by its pid once the three have answered `--kill-after` completions. Printed: every key once (or not), the
error rows, the answers per second before the kill as a share of the three replicas' capacity, each replica's
share of those answers, and the share of requests answered 429 (all replicas, the killed one's counted at its
kill).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

SQL = """
SET 'parallelism.default' = '{parallelism}';
CREATE TABLE questions (k STRING, question STRING) WITH (
  'connector' = 'filesystem', 'path' = '{questions}', 'format' = 'csv');
CREATE MODEL answerer INPUT (question STRING) OUTPUT (content STRING, `request.replica` STRING, `error.reason` STRING)
  WITH ('provider' = 'dspark-vllm', 'endpoint' = '{endpoint}', 'model' = '{model}', 'request.max-tokens' = '4',
        'request.concurrency' = '{concurrency}');
CREATE TABLE answers (k STRING, replica STRING, reason STRING)
  WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'json');
INSERT INTO answers SELECT k, `request.replica`, `error.reason`
  FROM ML_PREDICT(TABLE questions, MODEL answerer, DESCRIPTOR(question),
                  MAP['async', 'true', 'output-mode', 'ALLOW_UNORDERED', 'max-concurrent-operations', '256']);
"""


def questions_and_replicas(
    stack: ExitStack, tmp: Path, rows: int, files: int, latency_ms: float, capacity: int
) -> tuple[list, str]:
    """The keyed questions in `files` CSV files under tmp/questions (a file is one split: one for each subtask
    that should get rows) and three simulators of `capacity` completions at once, started on `stack`; the
    simulators and the model they serve."""
    from connector.simulator import testing

    (tmp / "questions").mkdir()
    for f in range(files):
        (tmp / "questions" / f"part-{f}.csv").write_text(
            "".join(f"k{i},What is {i} + {i}?\n" for i in range(f, rows, files))
        )
    sims = [
        stack.enter_context(
            testing.serve_simulator(mode="process", seed=i, latency_ms=latency_ms, capacity=capacity)
        )
        for i in range(3)
    ]  # fmt: skip
    with urllib.request.urlopen(sims[0].url + "/v1/models", timeout=10) as response:
        model = json.load(response)["data"][0]["id"]
    return sims, model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--kill-after", type=int, default=1500)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--capacity", type=int, default=16)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    args = parser.parse_args()

    from connector.simulator import testing

    cli = shutil.which("dspark-vllm", path=str(Path(sys.executable).parent))
    if not cli:
        sys.exit("bench_replicas: the dspark-vllm command is not installed beside this Python")
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        tmp = Path(folder)
        sims, model = questions_and_replicas(stack, tmp, args.rows, args.parallelism, args.latency_ms, args.capacity)

        def stats(s: testing.RunningSimulator) -> dict[str, float]:
            try:
                return s.stats()
            except OSError:
                return {}

        before: dict[str, object] = {}

        def watch() -> None:
            first: tuple[float, float] | None = None
            while True:
                now = [stats(s) for s in sims]
                # completions answered: asked less refused at capacity (/metrics answers 200 too)
                answered = [s.get("requests /v1/chat/completions", 0.0) - s.get("throttled", 0.0) for s in now]
                total = sum(answered)
                if first is None and total > 0:
                    first = (time.monotonic(), total)
                if total >= args.kill_after and first is not None:
                    before["rate"] = (total - first[1]) / (time.monotonic() - first[0])
                    before["shares"] = [a / total for a in answered]
                    before["throttled"] = sum(s.get("throttled", 0.0) for s in now)
                    before["asked"] = sum(s.get("requests /v1/chat/completions", 0.0) for s in now)
                    before["victim_throttled"] = now[1].get("throttled", 0.0)
                    before["victim_asked"] = now[1].get("requests /v1/chat/completions", 0.0)
                    assert sims[1].process is not None
                    os.kill(sims[1].process.pid, signal.SIGKILL)
                    return
                time.sleep(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        script = tmp / "run.sql"
        script.write_text(SQL.format(parallelism=args.parallelism, questions=tmp / "questions",
                                     endpoint=",".join(s.url for s in sims), model=model, out=tmp / "out",
                                     concurrency="auto"))  # fmt: skip
        started = time.monotonic()
        run = subprocess.run([cli, "sql", str(script)], capture_output=True, text=True, timeout=3600)
        seconds = time.monotonic() - started
        watcher.join(timeout=10)
        after = [stats(s) for s in (sims[0], sims[2])]
        if run.returncode != 0:
            sys.exit(f"bench_replicas: the job failed:\n{run.stderr[-3000:]}")
        rows = []
        for f in sorted((tmp / "out").rglob("*")):
            if f.is_file() and not f.name.startswith("."):
                rows += [json.loads(line) for line in f.read_text().split("\n") if line]
    keys = sorted(r["k"] for r in rows)
    errors = sum(1 for r in rows if r["reason"])
    capacity = 3 * args.capacity / (args.latency_ms / 1000.0)
    asked = sum(s.get("requests /v1/chat/completions", 0.0) for s in after) + float(before.get("victim_asked", 0.0))
    throttled = sum(s.get("throttled", 0.0) for s in after) + float(before.get("victim_throttled", 0.0))
    print(
        f"rows out {len(rows):,} of {args.rows:,}; every key once: {keys == sorted(f'k{i}' for i in range(args.rows))}"
    )
    print(f"error rows: {errors}")
    if "rate" in before:
        shares = ", ".join(f"{s:.2f}" for s in before["shares"])  # type: ignore[attr-defined]
        print(f"before the kill: {before['rate'] / capacity:.2f} of the replicas' capacity ({capacity:.0f}/s); "
              f"shares of the answers {shares}")  # fmt: skip
    else:
        print("the replica was not killed: the job ended before --kill-after answers")
    print(f"requests answered 429: {throttled / max(asked, 1):.3f} of {asked:,.0f}")
    print(f"the job: {seconds:.1f} s (start included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
