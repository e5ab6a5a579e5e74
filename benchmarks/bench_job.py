"""The Flink paths side by side: the 'dspark-vllm' table against Flink's own formats, a trivial UDF, the parser.

    python benchmarks/bench_job.py                      # all sections (about 15 minutes on 2 cores)
    python benchmarks/bench_job.py --sections replay --small 20000 --large 60000 --parallelism 1

Replay (~1.1 KB coder bodies from the simulator's corpus): each path is a whole job in a fresh process, run
on a small and a large file, the paths taking turns; `rows/s steady` = (large - small) / (time(large) -
time(small)), so the fixed start-up of a job cancels out. Ratios are against `parse_batch` alone in one
process (all columns) measured in the same run.

Request mode (the simulator at zero latency): the table's rows/s against the client alone sending the same
prompts; head-of-line blocking (1% of requests hang past the timeout); and the latency the pipeline adds
(response received -> row at the sink) at 1,000 rows/s, as p50/p99.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROFILE = "coder"


# ---------------------------------------------------------------- the jobs, each run in its own process
def _t_env(parallelism: int, batch: bool = False):  # type: ignore[no-untyped-def]
    from pyflink.table import EnvironmentSettings, TableEnvironment

    from connector.flink import use_connector

    settings = EnvironmentSettings.in_batch_mode() if batch else EnvironmentSettings.in_streaming_mode()
    t_env = TableEnvironment.create(settings)
    config = t_env.get_config()
    config.set("parallelism.default", str(parallelism))
    config.set("python.executable", sys.executable)
    use_connector(t_env)
    return t_env


def _flat_columns(count: int | None = None) -> list[tuple[str, str]]:
    from connector.profiles import load_profile
    from connector.schema.columns import output_schema
    from connector.schema.flink_types import arrow_to_flink_sql

    columns = [(f.name, arrow_to_flink_sql(f.type)) for f in output_schema(load_profile(PROFILE)) if f.name != "line"]
    return columns[:count] if count else columns


def _ddl(columns: list[tuple[str, str]]) -> str:
    return ", ".join(f"`{n}` {t}" for n, t in columns)


RAW_SOURCE = "CREATE TABLE src (body BYTES) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'raw')"


def job_raw(path: str, parallelism: int) -> None:
    t = _t_env(parallelism)
    t.execute_sql(
        f"CREATE TABLE src (body BYTES) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'raw')"
    )
    t.execute_sql("CREATE TABLE sink_out (body BYTES) WITH ('connector' = 'blackhole')")
    t.execute_sql("INSERT INTO sink_out SELECT body FROM src").wait()


def job_json(path: str, parallelism: int) -> None:
    """Flink's json format, every column it can give (the body's fields and JSON_VALUE of the content)."""
    t = _t_env(parallelism)
    t.execute_sql(f"""CREATE TABLE src (
      id STRING, `object` STRING, created BIGINT, model STRING, system_fingerprint STRING,
      choices ARRAY<ROW<message ROW<content STRING, reasoning STRING>, text STRING, finish_reason STRING,
                        stop_reason STRING>>,
      usage ROW<prompt_tokens BIGINT, completion_tokens BIGINT, total_tokens BIGINT,
                prompt_tokens_details ROW<cached_tokens BIGINT>>,
      metrics ROW<time_to_first_token_ms DOUBLE, generation_time_ms DOUBLE, queue_time_ms DOUBLE,
                  mean_itl_ms DOUBLE, tokens_per_second DOUBLE>
    ) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'json', 'json.ignore-parse-errors' = 'true')""")
    content = "COALESCE(choices[1].message.content, choices[1].text)"
    t.execute_sql(f"""CREATE TEMPORARY VIEW v AS SELECT id, `object`,
      CAST(TO_TIMESTAMP_LTZ(created, 0) AS TIMESTAMP(3)) AS created, model, system_fingerprint, {content} AS content,
      choices[1].message.reasoning AS reasoning, choices[1].finish_reason AS finish_reason,
      choices[1].stop_reason AS stop_reason, CARDINALITY(choices) AS n_choices,
      usage.prompt_tokens, usage.completion_tokens, usage.total_tokens, usage.prompt_tokens_details.cached_tokens,
      metrics.time_to_first_token_ms, metrics.generation_time_ms, metrics.queue_time_ms, metrics.mean_itl_ms,
      metrics.tokens_per_second, JSON_VALUE({content}, '$.language') AS `language`,
      JSON_VALUE({content}, '$.code') AS code, JSON_VALUE({content}, '$.explanation') AS explanation,
      TRY_CAST(JSON_VALUE({content}, '$.code_blocks') AS BIGINT) AS code_blocks FROM src""")
    t.execute_sql("CREATE TABLE sink_out WITH ('connector' = 'blackhole') AS SELECT * FROM v").wait()


def job_udf(path: str, parallelism: int) -> None:
    """A pandas UDF that parses nothing and returns the same flat columns (batch = bundle = 10k)."""
    import pandas as pd
    from pyflink.table.udf import udf

    columns = _flat_columns()
    values = {"STRING": "x", "BIGINT": 1, "DOUBLE": 1.0, "TIMESTAMP(3)": pd.Timestamp(0)}

    def trivial(body: pd.Series) -> pd.DataFrame:
        n = len(body)
        return pd.DataFrame(
            {name: ([["x"]] * n if kind.startswith("ARRAY") else [values[kind]] * n) for name, kind in columns}
        )

    t = _t_env(parallelism)
    config = t.get_config()
    for key in ("python.fn-execution.bundle.size", "python.fn-execution.arrow.batch.size"):
        config.set(key, "10000")
    t.create_temporary_function("trivial", udf(trivial, result_type=f"ROW<{_ddl(columns)}>", func_type="pandas"))
    t.execute_sql(
        f"CREATE TABLE src (body BYTES) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'raw')"
    )
    t.execute_sql(f"CREATE TABLE sink_out ({_ddl(columns)}) WITH ('connector' = 'blackhole')")
    select = ", ".join(f"p.`{n}`" for n, _ in columns)
    t.execute_sql(f"INSERT INTO sink_out SELECT {select} FROM (SELECT trivial(body) AS p FROM src)").wait()


def job_dspark(path: str, parallelism: int, count: int | None, reuse: bool = False) -> None:
    columns = _flat_columns(count)
    t = _t_env(parallelism)
    if reuse:  # a job-wide setting, the user's to choose (docs/flink.md): no copy of each row between operators
        t.get_config().set("pipeline.object-reuse", "true")
    t.execute_sql(
        f"CREATE TABLE responses ({_ddl(columns)}) WITH ('connector' = 'dspark-vllm', 'mode' = 'replay', "
        f"'replay.path' = '{path}', 'profile' = '{PROFILE}', 'parse.backend' = 'cpu')"
    )
    t.execute_sql(f"CREATE TABLE sink_out ({_ddl(columns)}) WITH ('connector' = 'blackhole')")
    t.execute_sql("INSERT INTO sink_out SELECT * FROM responses").wait()


def job_parse_only(path: str, parallelism: int) -> None:
    """`parse_batch` alone in this process, every column, batches of 10,000 (the table's default)."""
    from connector.decode import parse_batch
    from connector.profiles import load_profile

    profile = load_profile(PROFILE)
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")[:-1]
    for start in range(0, len(lines), 10_000):
        parse_batch(lines[start : start + 10_000], profile, backend="cpu", first_line=start + 1)


def job_request(endpoint: str, model: str, prompts: int, rate: int, output: str, extra: str) -> None:
    t = _t_env(1)
    t.execute_sql(f"""CREATE TABLE responses (
        id STRING, model STRING, usage ROW<completion_tokens BIGINT>,
        rid STRING METADATA FROM 'request.id' VIRTUAL,
        received TIMESTAMP_LTZ(3) METADATA FROM 'request.received-at' VIRTUAL,
        error STRING METADATA FROM 'error.reason' VIRTUAL
    ) WITH ('connector' = 'dspark-vllm', 'endpoint' = '{endpoint}', 'model' = '{model}', 'profile' = '{PROFILE}',
            'prompts.rate' = '{rate}', 'prompts.count' = '{prompts}', 'parse.backend' = 'cpu' {extra})""")
    t.execute_sql(
        f"CREATE TABLE sink_out (rid STRING, received STRING, at_sink STRING, error STRING) WITH "
        f"('connector' = 'filesystem', 'path' = '{output}', 'format' = 'csv')"
    )
    t.execute_sql(
        "INSERT INTO sink_out SELECT rid, CAST(received AS STRING), CAST(NOW() AS STRING), error FROM responses"
    ).wait()


def _received(output: Path) -> list[tuple[float, float]]:
    """(received, at the sink) of each row, seconds since the epoch, from the request job's sink."""
    from datetime import datetime

    def seconds(text: str) -> float:
        return datetime.fromisoformat(text.strip('"').replace("Z", "")).timestamp()

    stamps = []
    for f in output.rglob("part-*"):
        for line in f.read_text().splitlines():
            _rid, received, at_sink, _error = line.split(",", 3)
            stamps.append((seconds(received), seconds(at_sink)))
    return stamps


def steady_rate(stamps: list[tuple[float, float]]) -> float:
    """Rows/s between the 10th and the 90th percentile of arrival: the job's start and drain left out."""
    times = sorted(r for r, _ in stamps)
    a, b = times[len(times) // 10], times[9 * len(times) // 10]
    return 0.8 * len(times) / max(b - a, 1e-9)


def client_alone(endpoint: str, model: str, prompts: int, concurrency: int) -> None:
    from connector.client import BlockingClient

    client = BlockingClient(endpoint, model=model, concurrency=concurrency)
    payloads = [{"messages": [{"role": "user", "content": f"Request {n}: answer briefly."}]} for n in range(prompts)]
    outcomes = client.send_all(payloads)
    client.close()
    assert all(o.error is None for o in outcomes)


# ---------------------------------------------------------------- the driver
def timed(*args: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--run", *args], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{args[0]} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def write_corpus(folder: Path, small: int, large: int) -> tuple[Path, Path, float]:
    from connector.simulator.responses import make_corpus

    bodies = make_corpus(large, PROFILE, seed=1)
    paths = []
    for n in (small, large):
        path = folder / f"bodies-{n}.jsonl"
        path.write_bytes(b"\n".join(bodies[:n]) + b"\n")
        paths.append(path)
    return paths[0], paths[1], sum(len(b) for b in bodies) / len(bodies)


def replay_section(args: argparse.Namespace, folder: Path) -> list[tuple[str, float, str]]:
    small, large, size = write_corpus(folder, args.small, args.large)
    print(f"corpus: {args.small:,} and {args.large:,} bodies of profile {PROFILE}, {size / 1000:.2f} KB each")
    paths = [("parse_batch alone, one process, all columns", "parse-only", "1")]
    for p in args.parallelism:
        paths += [
            (f"Flink filesystem 'raw' -> blackhole (p={p})", "raw", p),
            (f"Flink json format, all columns -> blackhole (p={p})", "json", p),
            (f"trivial pandas UDF, {len(_flat_columns())} flat columns (p={p})", "udf", p),
            (f"'dspark-vllm' replay, all {len(_flat_columns())} columns (p={p})", "dspark", p),
            (f"'dspark-vllm' replay, 3 columns (p={p})", "dspark3", p),
        ]
        if p == "1":
            paths.append((f"'dspark-vllm' replay, all, pipeline.object-reuse (p={p})", "dspark-reuse", p))
    times: dict[tuple[str, str, str], list[float]] = {}
    for _ in range(args.repeat):
        for file in (small, large):  # the paths take turns on each file
            for _name, kind, p in paths:
                times.setdefault((kind, p, file.name), []).append(timed(kind, str(file), p))
    rows = []
    for name, kind, p in paths:
        t_small, t_large = min(times[(kind, p, small.name)]), min(times[(kind, p, large.name)])
        steady = (args.large - args.small) / max(t_large - t_small, 1e-9)
        rows.append((name, steady, f"{t_small:.1f} s / {t_large:.1f} s"))
    return rows


def request_section(args: argparse.Namespace, folder: Path) -> list[tuple[str, float, str]]:
    from connector.simulator.testing import serve_simulator

    rows = []
    with serve_simulator(mode="process", profiles=(PROFILE,), seed=1, latency_ms=0.0, workers=2) as sim:
        model = json.loads(subprocess.check_output(["curl", "-s", sim.url + "/v1/models"]))["data"][0]["id"]
        concurrency = "64"
        for _ in range(args.repeat):
            alone = timed("client", sim.url, model, str(args.requests), concurrency)
            timed("request", sim.url, model, str(args.requests), "100000", str(folder / "r"), "")
        stamps = _received(folder / "r")
        rows.append(("client alone (asyncio + aiohttp), c=64", args.requests / alone, f"{alone:.1f} s"))
        rows.append(("'dspark-vllm' request mode, steady, c=64", steady_rate(stamps), f"{len(stamps)} rows"))

        # Added latency at 1,000 rows/s: response received -> row at the sink (NOW() in the sink's Calc).
        out = folder / "latency"
        timed("request", sim.url, model, "10000", "1000", str(out), "")
        added = sorted((sink - received) * 1000 for received, sink in _received(out))
        p50, p99 = statistics.median(added), added[int(0.99 * (len(added) - 1))]
        rows.append(("added latency at 1k rows/s: p50", p50, f"p99 {p99:.0f} ms over {len(added)} rows"))
        fast = ", 'python.fn-execution.bundle.time' = '100 ms', 'python.fn-execution.arrow.batch.size' = '100'"
        timed("request", sim.url, model, "10000", "1000", str(folder / "latency-fast"), fast)
        added = sorted((sink - received) * 1000 for received, sink in _received(folder / "latency-fast"))
        p50, p99 = statistics.median(added), added[int(0.99 * (len(added) - 1))]
        rows.append(("  same, bundle.time 100 ms, arrow batch 100: latency p50", p50, f"p99 {p99:.0f} ms"))

    # Head-of-line blocking: 600 prompts, the same with 1% of them hanging until the client's 10 s timeout.
    spans = {}
    for label, faults in (("no hang", {}), ("1% hang", {"hang": 0.01})):
        with serve_simulator(mode="process", profiles=(PROFILE,), seed=1, latency_ms=0.0, faults=faults,
                             hang_s=3600.0) as sim:  # fmt: skip
            out = folder / f"hol-{len(faults)}"
            timed("request", sim.url, model, "600", "100000", str(out), ", 'request.timeout' = '10 s'")
            received = [r for r, _ in _received(out)]
            spans[label] = max(received) - min(received)
    rows.append(("600 prompts, no hang: seconds first -> last response", spans["no hang"], ""))
    rows.append(("600 prompts, 1% hang (timeout 10 s): seconds", spans["1% hang"], "the 6 hung attempts retried"))
    return rows


def main() -> int:
    if sys.argv[1:2] == ["--run"]:
        kind, rest = sys.argv[2], sys.argv[3:]
        jobs = {
            "raw": lambda: job_raw(rest[0], int(rest[1])),
            "json": lambda: job_json(rest[0], int(rest[1])),
            "udf": lambda: job_udf(rest[0], int(rest[1])),
            "dspark": lambda: job_dspark(rest[0], int(rest[1]), None),
            "dspark3": lambda: job_dspark(rest[0], int(rest[1]), 3),
            "dspark-reuse": lambda: job_dspark(rest[0], int(rest[1]), None, reuse=True),
            "parse-only": lambda: job_parse_only(rest[0], int(rest[1])),
            "request": lambda: job_request(rest[0], rest[1], int(rest[2]), int(rest[3]), rest[4], rest[5]),
            "client": lambda: client_alone(rest[0], rest[1], int(rest[2]), int(rest[3])),
        }
        jobs[kind]()
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sections", default="replay,request")
    p.add_argument("--small", type=int, default=100_000)
    p.add_argument("--large", type=int, default=600_000)
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--parallelism", default="1,2", type=lambda s: s.split(","))
    p.add_argument("--repeat", type=int, default=1, help="rounds; the best time of each path counts")
    args = p.parse_args()
    os.environ.setdefault("PYTHONHASHSEED", "0")
    with tempfile.TemporaryDirectory(prefix="dspark-bench-") as tmp:
        rows: list[tuple[str, float, str]] = []
        if "replay" in args.sections:
            rows += replay_section(args, Path(tmp))
        if "request" in args.sections:
            rows += request_section(args, Path(tmp))
    base = next((rate for name, rate, _ in rows if name.startswith("parse_batch alone")), None)
    client = next((rate for name, rate, _ in rows if name.startswith("client alone")), None)
    print(f"{'path':<58} {'rows/s':>10} {'ratio':>7}  note")
    for name, rate, note in rows:
        ref = client if "request mode" in name else base
        plain = "latency" in name or "600 prompts" in name or name.startswith("client alone")
        ratio = f"{rate / ref:.2f}x" if ref and not plain else ""
        value = f"{rate:.0f} ms" if "latency" in name else f"{rate:.1f} s" if "600 prompts" in name else f"{rate:,.0f}"
        print(f"{name:<58} {value:>10} {ratio:>7}  {note}")
    print("ratios: replay rows against 'parse_batch alone'; request mode against 'client alone'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
