"""`dspark-vllm bench parse`: deserializer throughput beside the baselines, measured in one process.

Every row parses the same corpus (the simulator's bodies) into the same fields, content JSON included, and
the table prints its bodies/s, MB/s, the row it is compared with (its baseline, named on the row) and how
many times that baseline's rate it reaches. The baseline of most rows is "what teams do today"
(json.loads + pandas); a row on the orjson script's columns is compared with the orjson script, the
free-text rows with today's path on free text. Every row runs on one core, so rates are per CPU second
(user + system of the process: a shared, busy machine inflates them far less than the wall clock, which the
JSON output keeps too), best of N, the rows taking turns; read the ratios, not the absolute numbers. A row
whose best run took under `TOO_SHORT_S` of CPU is flagged: its ratio is mostly noise; a row whose pass over the
corpus is shorter than --min-cpu makes several passes in each run (its rate stays per pass), so by default no row is.
With `--cli`, two more rows time whole processes on a file of the corpus, `dspark-vllm parse` against a
script doing today's path and writing Parquet with pandas. The Flink row is wall clock (the JVM runs
several threads).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["TOO_SHORT_S", "run_parse_benchmark", "today_script"]

# A row whose best run took less CPU than this is flagged: timer and scheduler noise is then a good part of it.
TOO_SHORT_S = 0.5

FIELDS = ("id", "model", "finish_reason", "prompt_tokens", "completion_tokens", "total_tokens")


def _extract(d: Any, props: Sequence[str], loads: Callable[[Any], Any]) -> dict[str, Any] | None:
    """The hand-written extraction teams write today: body dict -> flat row, content parsed a second time."""
    if not isinstance(d, dict) or "error" in d:
        return None
    choices = d.get("choices") or [{}]
    c0 = choices[0]
    message = c0.get("message") or {}
    content = message.get("content") if message else c0.get("text")
    usage = d.get("usage") or {}
    metrics = d.get("metrics") or {}
    row = {
        "id": d.get("id"),
        "created": datetime.fromtimestamp(d["created"], UTC),
        "model": d.get("model"),
        "content": content,
        "finish_reason": c0.get("finish_reason"),
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "total_tokens": usage.get("total_tokens"),
        "time_to_first_token_ms": metrics.get("time_to_first_token_ms"),
        "tokens_per_second": metrics.get("tokens_per_second"),
    }
    parsed = None
    if content:
        try:
            parsed = loads(content)
        except ValueError:
            parsed = None
    for p in props:
        row[p] = parsed.get(p) if isinstance(parsed, dict) else None
    return row


def _today_rows(bodies: Iterable[bytes], props: Sequence[str]) -> list[dict[str, Any]]:
    """Today's path: each body through json.loads and `_extract`; what it cannot read is dropped."""
    rows = []
    for body in bodies:
        try:
            row = _extract(json.loads(body), props, json.loads)
        except ValueError:
            continue
        if row is not None:
            rows.append(row)
    return rows


def _json_pandas(bodies: Sequence[bytes], props: Sequence[str]) -> int:
    import pandas as pd

    return len(pd.DataFrame(_today_rows(bodies, props)))


def _orjson_arrow(bodies: Sequence[bytes], props: Sequence[str]) -> int:
    import orjson
    import pyarrow as pa

    rows = []
    for body in bodies:
        try:
            row = _extract(orjson.loads(body), props, orjson.loads)
        except orjson.JSONDecodeError:
            continue
        if row is not None:
            rows.append(row)
    return pa.Table.from_pylist(rows).num_rows


# Today's path as a whole process: the same extraction, every row kept, a DataFrame written as Parquet.
_TODAY_PROCESS = """
from __future__ import annotations
import json, sys
from datetime import UTC, datetime
from typing import Any
import pandas as pd
{functions}
path, out, props = sys.argv[1], sys.argv[2], [p for p in sys.argv[3].split(",") if p]
with open(path, "rb") as lines:
    pd.DataFrame(_today_rows(lines, props)).to_parquet(out)
"""


def _process(command: list[str], output: Path, cpu: list[float]) -> int:
    """Runs one whole process; its CPU seconds (user + system) go to `cpu`; the rows it wrote are returned."""
    import pyarrow.parquet as pq

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, check=True, capture_output=True, timeout=3600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return int(pq.read_metadata(output).num_rows)


def _ours(
    bodies: Sequence[bytes],
    profile: str,
    backend: Any,
    batch: int,
    phases: dict[str, float],
    columns: Sequence[str] | None = None,
) -> int:
    """Rows parsed; `phases` gets the seconds of this run's phases (see ParseResult.stats)."""
    from connector.parse import parse_batch
    from connector.parse.batch import PHASES

    rows = 0
    phases.clear()
    for start in range(0, len(bodies), batch):
        result = parse_batch(bodies[start : start + batch], profile, backend, columns=columns)
        rows += result.table.num_rows
        for name in PHASES:
            phases[name] = phases.get(name, 0.0) + result.stats.get(name, 0.0)
    return rows


# parse_batch's stages (connector.parse.batch.PHASES), in a reader's words.
_PHASE_WORDS = {
    "screen_s": "the JSON check before libcudf",
    "read_s": "reading the bodies",
    "flatten_s": "making the columns",
    "content_s": "reading the contents",
    "core_s": "the native core on what libcudf left",
}


def _phase_note(phases: dict[str, float], bodies: int) -> str:
    """Where a run's time went, in words: the stages that took any, their shares, and the contents' read per 10k
    bodies (the figure x-extract moves) where it is a stage of its own."""
    total = sum(phases.values()) or 1.0
    spent = [name for name in phases if phases[name] >= 0.005 * total]
    if spent == ["read_s"]:
        # The cpu backend: the native core reads each body and its content in one pass, with no other stage.
        return "all in the native core's one pass over each body (its content included)"
    shares = ", ".join(f"{_PHASE_WORDS.get(name, name[:-2])} {phases[name] / total:.0%}" for name in spent)
    if phases.get("content_s"):
        shares += f"; contents {phases['content_s'] * 1e3 * 10_000 / max(bodies, 1):.0f} ms per 10k bodies"
    return shares


_FLINK_JOB = r"""
import sys, time
from pyflink.table import EnvironmentSettings, TableEnvironment
path, props = sys.argv[1], sys.argv[2].split(",")
t = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
t.get_config().set("parallelism.default", "1")
t.execute_sql(f'''CREATE TABLE src (
  id STRING, `object` STRING, created BIGINT, model STRING,
  choices ARRAY<ROW<message ROW<content STRING>, text STRING, finish_reason STRING>>,
  usage ROW<prompt_tokens BIGINT, completion_tokens BIGINT, total_tokens BIGINT>,
  metrics ROW<time_to_first_token_ms DOUBLE, tokens_per_second DOUBLE>
) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'json', 'json.ignore-parse-errors' = 'true')''')
text = "COALESCE(choices[1].message.content, choices[1].text)"
content_cols = "".join(f", JSON_VALUE({text}, '$.{p}') AS `{p}`" for p in props)
t.execute_sql(f'''CREATE TEMPORARY VIEW v AS SELECT id, CAST(TO_TIMESTAMP_LTZ(created, 0) AS TIMESTAMP(3)) AS ts, model,
  COALESCE(choices[1].message.content, choices[1].text) AS content, choices[1].finish_reason AS finish_reason,
  usage.prompt_tokens, usage.completion_tokens, usage.total_tokens,
  metrics.time_to_first_token_ms, metrics.tokens_per_second {content_cols} FROM src''')
t.execute_sql("CREATE TABLE sink_out WITH ('connector' = 'blackhole') AS SELECT * FROM v").wait()
"""


def _flink_seconds(path: Path, props: Sequence[str]) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", _FLINK_JOB, str(path), ",".join(props)],
        check=True,
        capture_output=True,
        timeout=900,
    )
    return time.perf_counter() - started


@dataclass
class _Path:
    """One way of parsing the corpus, timed best-of-N."""

    name: str
    run: Callable[[], int]  # parses, returns the rows it made
    bodies: int
    size: int
    phases: dict[str, float] | None = None  # filled by the run, for the note
    cpu: list[float] | None = None  # a whole process's CPU seconds, one per run
    versus: str | None = None  # the row its ratio is to, when not the first
    note: str = ""
    seconds: float = float("inf")  # CPU seconds of one pass over the corpus, best run
    wall: float = float("inf")
    rows: int = 0
    passes: int = 1  # passes over the corpus in one timed run (`--min-cpu`)


def _time_round_robin(paths: list[_Path], repeat: int, min_cpu: float = 0.0) -> None:
    """Best of `repeat` runs of each path, the paths taking turns: the machine's drift hits them all alike.

    A path whose pass over the corpus takes less than `min_cpu` of CPU makes that many passes in each timed run
    that the run takes `min_cpu` and a fifth more (and more passes where a run still took less): a run of
    milliseconds is mostly timer and scheduler noise. Its rate stays per pass. The pass is timed first, after one
    that warms the path up (imports, the profile), over passes that add up to a fifth of `min_cpu`. Whole
    processes (`cpu`) are timed as they run."""
    if min_cpu > 0:
        for path in paths:
            if path.cpu is None:
                path.run()
                cpu_started, made = time.process_time(), 0
                while (spent := time.process_time() - cpu_started) < min_cpu / 5:
                    path.run()
                    made += 1
                path.passes = max(1, min(100_000, math.ceil(1.2 * min_cpu / max(spent / made, 1e-7))))
    for _ in range(repeat):
        for path in paths:
            started, cpu_started = time.perf_counter(), time.process_time()
            for _ in range(path.passes):
                path.rows = path.run()
            made = path.passes
            # A run the calibration misjudged (its passes warmer, or the machine busier, than these) goes on until
            # it took `min_cpu`; later runs make at least as many passes.
            while path.cpu is None and time.process_time() - cpu_started < min_cpu:
                path.rows = path.run()
                made += 1
            path.passes = made
            wall = (time.perf_counter() - started) / made
            cpu = path.cpu[-1] if path.cpu else (time.process_time() - cpu_started) / made
            path.seconds, path.wall = min(path.seconds, cpu), min(path.wall, wall)
            passes = f" ({path.passes} passes)" if path.passes > 1 else ""
            print(f"  measured {path.name}: {cpu:.3f} s CPU, {wall:.3f} s wall a pass{passes}", file=sys.stderr,
                  flush=True)  # fmt: skip


def today_script() -> str:
    """Today's path as a program of its own (json.loads + pandas + to_parquet), the baseline the whole-process
    rows time: `python SCRIPT CORPUS OUT PROPS` (PROPS: the content properties, comma-separated)."""
    return _TODAY_PROCESS.format(functions=inspect.getsource(_extract) + inspect.getsource(_today_rows))


def _process_paths(tmp: Path, bodies: list[bytes], props: Sequence[str], profile: str, size: int) -> list[_Path]:
    """The two whole-process rows of `--cli`, on a file of the corpus."""
    corpus = tmp / "corpus.ndjson"
    corpus.write_bytes(b"\n".join(bodies) + b"\n")
    script = tmp / "today.py"
    script.write_text(today_script())
    today_out, ours_out = tmp / "today.parquet", tmp / "ours.parquet"
    today_name = "json.loads + pandas + to_parquet, whole process"
    today_cpu: list[float] = []
    ours_cpu: list[float] = []
    today_command = [sys.executable, str(script), str(corpus), str(today_out), ",".join(props)]
    ours_command = [sys.executable, "-m", "connector.cli", "parse", str(corpus), "--profile", profile]
    ours_command += ["--backend", "cpu", "--output", str(ours_out)]
    return [
        _Path(today_name, lambda: _process(today_command, today_out, today_cpu), len(bodies), size, cpu=today_cpu),
        _Path(
            "dspark-vllm parse --backend cpu, whole process",
            lambda: _process(ours_command, ours_out, ours_cpu),
            len(bodies),
            size,
            cpu=ours_cpu,
            versus=today_name,
        ),
    ]


def run_parse_benchmark(args: argparse.Namespace, gpu: Any = None) -> int:
    """`gpu`: the gpu backend object to measure (default: the real one, where it can run)."""
    from connector.errors import BackendUnavailable
    from connector.parse.backends import select_backend
    from connector.profiles import load_profile
    from connector.simulator.responses import make_corpus

    profile = load_profile(args.profile)
    props = [p.name for p in profile.content_properties]
    bodies = make_corpus(args.bodies, args.profile, seed=args.seed, json_share=args.json_share)
    size = sum(len(b) for b in bodies)
    print(
        f"corpus: {len(bodies)} bodies, {size / 1e6:.1f} MB, {size / len(bodies):.0f} B/body, profile "
        f"{args.profile}, {args.json_share:.0%} JSON content; batch {args.batch_size} bodies; per CPU second, best of "
        f"{args.repeat}, paths taking turns; {platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        flush=True,
    )
    n = len(bodies)
    paths = [_Path("json.loads + pandas + fromtimestamp (today)", lambda: _json_pandas(bodies, props), n, size)]
    skipped: list[dict[str, Any]] = []
    try:
        import orjson  # noqa: F401

        paths.append(
            _Path(
                "orjson + pyarrow.Table.from_pylist",
                lambda: _orjson_arrow(bodies, props),
                n,
                size,
                versus=paths[0].name,  # itself a baseline too, of ours on its columns
            )
        )
    except ImportError:
        skipped.append({"path": "orjson + pyarrow.Table.from_pylist", "note": "orjson not installed"})

    def ours(
        name: str,
        batch_bodies: list[bytes],
        backend: Any,
        batch: int,
        columns: Sequence[str] | None = None,
        versus: str | None = None,
    ) -> _Path:
        phases: dict[str, float] = {}
        run = functools.partial(_ours, batch_bodies, args.profile, backend, batch, phases, columns)
        return _Path(name, run, len(batch_bodies), sum(map(len, batch_bodies)), phases, versus=versus)

    cpu_name = f"dspark-vllm cpu (native core), batch {args.batch_size}"
    paths.append(ours(cpu_name, bodies, "cpu", args.batch_size))
    if not skipped:  # orjson is there: ours on the same bodies and the columns its script reads
        columns = [*_ORJSON_COLUMNS, *props]
        paths.append(ours(_SAME_COLUMNS, bodies, "cpu", args.batch_size, columns, "orjson + pyarrow.Table.from_pylist"))
    # All contents free text (through the profile's x-extract patterns, where it has them).
    free = make_corpus(args.bodies, args.profile, seed=args.seed, json_share=0.0)
    free_size = sum(map(len, free))
    paths.append(_Path(_FREE_TODAY, lambda: _json_pandas(free, props), len(free), free_size))
    paths.append(ours(_FREE_OURS, free, "cpu", args.batch_size, versus=_FREE_TODAY))
    try:
        gpu = gpu or select_backend("gpu")[0]
        paths.append(ours(f"dspark-vllm gpu (pylibcudf), batch {args.batch_size}", bodies, gpu, args.batch_size))
        big = max(args.batch_size, int(args.gpu_batch_mb * 1e6 / (size / n)))
        big_bodies = (bodies * (big // n + 1))[:big]
        big_mb = sum(map(len, big_bodies)) / 1e6
        for name, backend in (("gpu", gpu), ("cpu", "cpu")):
            paths.append(ours(f"dspark-vllm {name}, one {big_mb:.0f} MB batch", big_bodies, backend, big))
    except BackendUnavailable as exc:
        skipped.append({"path": "dspark-vllm gpu (pylibcudf)", "note": f"skipped: {exc}"})
    with tempfile.TemporaryDirectory() as tmp:
        if args.cli:
            paths += _process_paths(Path(tmp), bodies, props, args.profile, size)
        _time_round_robin(paths, args.repeat, args.min_cpu)
    results: list[dict[str, Any]] = []
    for path in paths:
        note = path.note
        if path.phases:
            note = _phase_note(path.phases, path.bodies)
            if path.bodies != n and path.phases["read_s"]:
                note += f"; its reads alone {path.size / path.phases['read_s'] / 1e9:.2f} GB/s"
        if path.cpu:
            note = f"{path.seconds:.2f} s CPU, {path.wall:.2f} s wall"
        results.append(
            {"path": path.name, "seconds": path.seconds, "wall_seconds": path.wall, "rows": path.rows, "note": note}
            | {"passes": path.passes}
            | ({"bodies": path.bodies, "bytes": path.size} if path.bodies != n else {})
            | ({"versus": path.versus} if path.versus else {})
        )
    results += [{"seconds": None, "rows": None, **s} for s in skipped]

    def record(name: str, seconds: float | None, rows: int | None, note: str = "") -> None:
        results.append({"path": name, "seconds": seconds, "rows": rows, "note": note})

    if not args.no_flink:
        with tempfile.TemporaryDirectory() as tmp:
            full, small = Path(tmp, "full.ndjson"), Path(tmp, "small.ndjson")
            full.write_bytes(b"\n".join(bodies) + b"\n")
            small_n = min(1000, len(bodies))
            small.write_bytes(b"\n".join(bodies[:small_n]) + b"\n")
            t_small = _flink_seconds(small, props)
            t_full = _flink_seconds(full, props)
            if t_full > t_small * 1.2:
                # The job's start-up is several seconds: take the time the extra bodies added.
                marginal = (t_full - t_small) * len(bodies) / max(len(bodies) - small_n, 1)
                note = f"wall clock: job {t_full:.1f} s, of which ~{t_small:.1f} s start-up"
                record("Flink json format (JVM), minus start-up", marginal, len(bodies), note)
            else:
                note = f"start-up dominates ({t_small:.1f} s for {small_n} bodies): use more --bodies"
                record("Flink json format (JVM), whole job", t_full, len(bodies), note)
    _print_table(results, len(bodies), size)
    if args.output_json:
        Path(args.output_json).write_text(
            json.dumps({"bodies": len(bodies), "bytes": size, "results": results}, indent=2)
        )
    return 0


# The columns `_extract` (the orjson script) reads, besides the content properties.
_ORJSON_COLUMNS: tuple[str, ...] = (
    "id", "created", "model", "content", "finish_reason", "prompt_tokens", "completion_tokens", "total_tokens",
    "time_to_first_token_ms", "tokens_per_second",
)  # fmt: skip
_SAME_COLUMNS = "dspark-vllm cpu, the orjson script's columns"
_FREE_TODAY = "json.loads + pandas, all free-text content"
_FREE_OURS = "dspark-vllm cpu, all free-text content"


def _meaning(row: str) -> str | None:
    """What a row measures, in a user's words (by the start of its name)."""
    meanings = (
        (
            "json.loads + pandas + fromtimestamp",
            "the hand-written script teams run today: json.loads per body, "
            "content parsed a second time, a pandas DataFrame (connector/bench.py, _extract)",
        ),
        ("json.loads + pandas, all free-text", "the same script on a corpus whose contents are all free text"),
        ("orjson + pyarrow", "that script with orjson and an Arrow table: the fastest plain-Python way"),
        (
            "dspark-vllm cpu, the orjson script's columns",
            "parse_batch on the native core, only the columns the scripts read",
        ),
        (
            "dspark-vllm cpu, all free-text",
            "parse_batch on the native core, contents read with the profile's x-extract patterns",
        ),
        ("dspark-vllm cpu, one", "parse_batch on the native core, the whole corpus repeated into one large batch"),
        ("dspark-vllm cpu", "parse_batch(bodies, profile, 'cpu'): every column of the profile, on the native core"),
        ("dspark-vllm gpu", "parse_batch on the gpu backend (libcudf)"),
        (
            "json.loads + pandas + to_parquet, whole process",
            "today's script as a process: start, read a file, write Parquet",
        ),
        ("dspark-vllm parse", "the command as a process on the same file, Parquet out"),
        ("Flink json format", "Flink's own json format in a batch job (wall clock, start-up taken out when it can be)"),
    )
    return next((text for start, text in meanings if row.startswith(start)), None)


def _print_table(results: list[dict[str, Any]], bodies: int, size: int) -> None:
    """One line a row: its name, rate, its baseline by name and the ratio to it; then the rows' notes, and a
    warning for rows timed too briefly to trust. Fills each result's `versus` and `ratio` (the JSON output)."""
    today = results[0]["path"]
    rates = {r["path"]: r.get("bodies", bodies) / r["seconds"] for r in results if r["seconds"]}
    named = {r.get("versus") for r in results}  # the rows others are compared with
    width = max(len(r["path"]) for r in results)
    baseline_width = max(len(r.get("versus", today)) for r in results)
    print(f"\n{'row':<{width}} {'bodies/s':>11} {'MB/s':>8}  {'compared with':<{baseline_width}} {'ratio':>7}")
    short = []
    for r in results:
        if r["seconds"] is None:
            print(f"{r['path']:<{width}} {'-':>11} {'-':>8}  {r['note']}")
            continue
        rate = rates[r["path"]]
        mb = r.get("bytes", size) / 1e6 / r["seconds"]
        if r["path"] == today or (r["path"] in named and "versus" not in r):
            print(f"{r['path']:<{width}} {rate:>11,.0f} {mb:>8.1f}  {'(a baseline)':<{baseline_width}} {'':>7}")
            if r["seconds"] * r.get("passes", 1) < TOO_SHORT_S:
                short.append(r["path"])
            continue
        versus = r.setdefault("versus", today)
        r["ratio"] = rate / rates[versus] if versus in rates else None
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.1f}x"
        print(f"{r['path']:<{width}} {rate:>11,.0f} {mb:>8.1f}  {versus:<{baseline_width}} {ratio:>7}")
        if r["seconds"] * r.get("passes", 1) < TOO_SHORT_S:
            short.append(r["path"])
    print("\nwhat the rows are")
    for r in results:
        meaning = _meaning(r["path"])
        if meaning:
            print(f"  {r['path']}: {meaning}")
    notes = [r for r in results if r["seconds"] is not None and r.get("note")]
    if notes:
        print("\nwhere each row's time went")
        for r in notes:
            print(f"  {r['path']}: {r['note']}")
    if short:
        which = "every row" if len(short) == len(rates) else ", ".join(short)
        print(
            f"WARNING: too short to trust: {which} took under {TOO_SHORT_S} s of CPU in its best run, so timer and "
            "scheduler noise is a good part of the rates and ratios; give a larger --min-cpu or more --bodies",
            file=sys.stderr,
        )
