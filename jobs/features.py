"""Streaming features of LLM responses, per model and profile, in event-time windows (a PyFlink job).

    python jobs/features.py --duration 60 --output out              # local mini-cluster + the simulator
    python jobs/features.py --endpoint http://127.0.0.1:8000 --model M --duration 300
    python jobs/features.py --replay captured/ --profile coder      # raw bodies captured earlier
    flink run -m host:8081 -py jobs/features.py --endpoint http://vllm:8000 --output /results

A 'dspark-vllm' table (`responses`) is declared (a TableDescriptor) after `connector.flink.use_connector` adds
the connector's jar; its rejected bodies and failed requests are rows of it too, with the metadata column
`error_reason` set. All are windowed on `created` (tumbling
10 seconds by default, `--window`; `--slide` for sliding windows): requests, errors and their rate, the share of
finish_reason = 'length', prompt/completion tokens (sum, mean), latency (mean, max), time to first token and
tokens/s where the server sends them, and content features of the profile (code blocks for coder, a boxed
answer for math, risk levels and mean score for a profile with `risk_level`/`score`). Features go to JSON-lines
files under OUTPUT/features, one object per window and model with named fields (`--print` prints them
instead); error rows to JSON files under OUTPUT/errors. Files are committed at checkpoints, so they appear
while an unbounded job runs. Without `--duration` the job runs until it is cancelled.

At the end the job prints a summary table per model and window (the run's details first; a window the run
covered only in part is marked), with the content features; `--report PATH` also writes an HTML page with
charts of the windows, content features included. `--results-only` runs no job and does both from the files
already in OUTPUT (the run's details are in OUTPUT/run.json). Two latencies, two clocks: `round trip ms` is
the request's time measured by the job (send to last byte), `server ttft ms` the time to first token the
server reports in the body's `metrics` (a simulator reports made-up figures).
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import math
import os
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

# `python jobs/features.py` from a checkout: the package is one directory up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connector.profiles import Profile, load_profile  # noqa: E402

FEATURE_COLUMNS = [
    ("window_start", "STRING"),
    ("window_end", "STRING"),
    ("model", "STRING"),
    ("profile", "STRING"),
    ("requests", "BIGINT"),
    ("errors", "BIGINT"),
    ("error_rate", "DOUBLE"),
    ("length_share", "DOUBLE"),
    ("prompt_tokens_sum", "BIGINT"),
    ("prompt_tokens_mean", "DOUBLE"),
    ("completion_tokens_sum", "BIGINT"),
    ("completion_tokens_mean", "DOUBLE"),
    ("latency_ms_mean", "DOUBLE"),
    ("latency_ms_max", "DOUBLE"),
    ("ttft_ms_mean", "DOUBLE"),
    ("tokens_per_second_mean", "DOUBLE"),
    ("first_event", "STRING"),  # the window's earliest and latest `created`: a window the run covered in part
    ("last_event", "STRING"),
]
ERROR_COLUMNS = [
    ("source", "STRING"),
    ("line", "BIGINT"),
    ("request_id", "STRING"),
    ("prompt", "STRING"),
    ("reason", "STRING"),
    ("field", "STRING"),
    ("body", "STRING"),
    ("http_status", "INT"),
    ("model", "STRING"),
    ("created", "STRING"),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoint", help="OpenAI-compatible server; without it (and --replay) the simulator starts")
    p.add_argument("--model", help="model to ask (default: the first of the endpoint's /v1/models)")
    p.add_argument("--replay", metavar="PATH", help="file or directory of captured raw bodies, one per line")
    p.add_argument(
        "--replay-monitor", type=float, metavar="SECONDS", help="watch --replay for new files (unbounded job)"
    )
    p.add_argument("--profile", default="coder", help="built-in profile or profile file (default: coder)")
    p.add_argument(
        "--duration", type=float, help="seconds of requests (request mode; default: until the job is cancelled)"
    )
    p.add_argument("--rate", type=int, default=50, help="prompts per second (request mode)")
    p.add_argument("--output", default="out", help="output directory (features/, errors/)")
    p.add_argument("--print", action="store_true", help="print features to stdout instead of files")
    p.add_argument(
        "--window", type=float, default=10.0, help="window size in seconds (default 10: a 60 s run gives 6 windows)"
    )
    p.add_argument("--slide", type=float, help="slide in seconds: sliding windows instead of tumbling")
    p.add_argument("--watermark-delay", type=float, default=5.0, help="out-of-orderness allowed, seconds")
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "gpu"], help="parse backend")
    p.add_argument("--batch-size", type=int, help="bodies per parse batch (the table's default when unset)")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight per parallel instance")
    p.add_argument("--parallelism", type=int, help="job parallelism (default: the environment's)")
    p.add_argument("--checkpoint-interval", type=float, default=10.0, help="seconds; 0 turns checkpoints off")
    p.add_argument("--progress", type=float, default=5.0, help="seconds between progress lines; 0: none")
    p.add_argument("--detached", action="store_true", help="return once submitted (with `flink run -d`)")
    p.add_argument("--report", metavar="PATH", help="at the end, write an HTML page with charts of the windows")
    p.add_argument(
        "--results-only",
        action="store_true",
        help="run no job: print the summary of the files in --output (and write --report) as they are now",
    )
    return p.parse_args(argv)


def content_features(profile: Profile) -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[str]]:
    """(declared content columns, feature columns, aggregate SQL) for what the profile's content holds."""
    props = {p.name: p for p in profile.content_properties}
    declared: list[tuple[str, str]] = []
    features: list[tuple[str, str]] = []
    sql: list[str] = []
    ok = "is_error = 0"
    if "code_blocks" in props:
        declared.append(("code_blocks", "BIGINT"))
        features += [("code_blocks_sum", "BIGINT"), ("with_code_share", "DOUBLE")]
        sql += [
            "SUM(code_blocks)",
            f"AVG(CASE WHEN {ok} THEN CASE WHEN code_blocks > 0 THEN 1.0 ELSE 0.0 END END)",
        ]
    if "answer" in props:
        declared.append(("answer", "STRING"))
        features.append(("boxed_answer_share", "DOUBLE"))
        sql.append(f"AVG(CASE WHEN {ok} THEN CASE WHEN answer IS NOT NULL THEN 1.0 ELSE 0.0 END END)")
    if "risk_level" in props:
        declared.append(("risk_level", "STRING"))
        levels = list(props["risk_level"].schema.get("enum") or ["low", "medium", "high"])
        for level in levels:
            name = "risk_" + "".join(c if c.isalnum() else "_" for c in str(level).lower())
            features.append((name, "BIGINT"))
            sql.append(f"SUM(CASE WHEN risk_level = '{level}' THEN 1 ELSE 0 END)")
    if "score" in props and props["score"].kind in ("integer", "number"):
        declared.append(("score", "DOUBLE"))
        features.append(("score_mean", "DOUBLE"))
        sql.append("AVG(score)")
    return declared, features, sql


def first_model(endpoint: str) -> str:
    with urllib.request.urlopen(endpoint.rstrip("/") + "/v1/models", timeout=30) as response:
        return str(json.load(response)["data"][0]["id"])


@contextlib.contextmanager
def endpoint_or_simulator(args: argparse.Namespace) -> Iterator[str | None]:
    if args.replay or args.endpoint:
        yield args.endpoint
        return
    try:
        from connector.simulator.testing import serve_simulator
    except ImportError:
        sys.exit("features: no simulator in this installation; pass --endpoint URL or --replay PATH")
    with serve_simulator(mode="process", profiles=(args.profile,), seed=7) as sim:
        print(f"features: simulator on {sim.url}", file=sys.stderr, flush=True)
        yield sim.url


def responses_table(args: argparse.Namespace, profile: Profile, endpoint: str | None, model: str | None):  # type: ignore[no-untyped-def]
    """The 'dspark-vllm' table of the job: its columns, metadata (errors included) and options."""
    from pyflink.table import DataTypes, Schema, TableDescriptor

    declared, _, _ = content_features(profile)
    kinds = {"STRING": DataTypes.STRING(), "BIGINT": DataTypes.BIGINT(), "DOUBLE": DataTypes.DOUBLE()}
    schema = (
        Schema.new_builder()
        .column("id", DataTypes.STRING())
        .column("model", DataTypes.STRING())
        .column("created", DataTypes.TIMESTAMP(3))
        .column("finish_reason", DataTypes.STRING())
        .column("prompt_tokens", DataTypes.BIGINT())
        .column("completion_tokens", DataTypes.BIGINT())
        .column("time_to_first_token_ms", DataTypes.DOUBLE())
        .column("tokens_per_second", DataTypes.DOUBLE())
    )
    for name, kind in declared:
        schema.column(name, kinds[kind])
    metadata = [("error_reason", "STRING", "error.reason"), ("error_field", "STRING", "error.field")]
    metadata.append(("body", "BYTES", "raw.body"))
    if args.replay:
        metadata += [("source", "STRING", "source.path"), ("source_line", "BIGINT", "source.line")]
    else:
        metadata += [
            ("latency_ms", "DOUBLE", "request.latency-ms"),
            ("request_id", "STRING", "request.id"),
            ("prompt", "STRING", "request.prompt"),
            ("http_status", "INT", "request.http-status"),
        ]
    types = {**kinds, "BYTES": DataTypes.BYTES(), "INT": DataTypes.INT()}
    for name, kind, key in metadata:
        schema.column_by_metadata(name, types[kind], key, True)
    schema.watermark("created", f"created - {interval(args.watermark_delay)}")

    descriptor = TableDescriptor.for_connector("dspark-vllm").schema(schema.build())
    options = {"profile": args.profile, "parse.backend": args.backend}
    if args.batch_size:
        options["parse.batch-size"] = str(args.batch_size)
    if args.replay:
        options.update({"mode": "replay", "replay.path": str(Path(args.replay).resolve())})
        if args.replay_monitor:
            options["replay.monitor-interval"] = f"{int(args.replay_monitor * 1000)} ms"
        if args.model:  # labels the rows whose body could not be read
            options["model"] = args.model
    else:
        options.update(
            {
                "mode": "request",
                "endpoint": str(endpoint),
                "model": str(model),
                "prompts.rate": str(args.rate),
                "request.concurrency": str(args.concurrency),
            }
        )
        if args.duration is not None:  # else unbounded: the job runs until it is cancelled
            options["prompts.count"] = str(prompt_count(args))
        if profile.content_schema is not None:
            options["request.structured-output"] = "true"
    for key, value in options.items():
        descriptor.option(key, value)
    return descriptor.build()


def prompt_count(args: argparse.Namespace) -> int:
    """Prompts a bounded request-mode job sends: --rate for --duration seconds."""
    return max(1, int(args.rate * args.duration))


def interval(seconds: float) -> str:
    """A Flink SQL interval literal (no MILLISECOND unit; SECOND alone caps at 99)."""
    millis = int(round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return f"INTERVAL '{hours}:{minutes:02d}:{rest // 1000:02d}.{rest % 1000:03d}' HOUR TO SECOND(3)"


def window_sql(args: argparse.Namespace) -> str:
    size = interval(args.window)
    if args.slide:
        slide = interval(args.slide)
        return f"TABLE(HOP(TABLE events, DESCRIPTOR(created), {slide}, {size}))"
    return f"TABLE(TUMBLE(TABLE events, DESCRIPTOR(created), {size}))"


def build(t_env, args: argparse.Namespace, profile: Profile, endpoint: str | None, model: str | None):  # type: ignore[no-untyped-def]
    """Declare the tables and return the statement set of the job (features + errors)."""
    from connector.flink import use_connector

    use_connector(t_env)
    t_env.create_temporary_table("responses", responses_table(args, profile, endpoint, model))
    declared, features, content_sql = content_features(profile)
    content_cols = [name for name, _ in declared]
    latency = "CAST(NULL AS DOUBLE)" if args.replay else "latency_ms"
    t_env.execute_sql(f"""
        CREATE TEMPORARY VIEW events AS
        SELECT COALESCE(model, 'unknown') AS model, created,
               CASE WHEN error_reason IS NULL THEN 0 ELSE 1 END AS is_error, finish_reason, prompt_tokens,
               completion_tokens, {latency} AS latency_ms, time_to_first_token_ms,
               tokens_per_second{"".join(f", `{c}`" for c in content_cols)}
        FROM responses""")
    ok = "is_error = 0"
    aggregates = [
        "CAST(window_start AS STRING)",
        "CAST(window_end AS STRING)",
        "model",
        f"'{profile.name}'",
        "COUNT(*)",
        "CAST(SUM(is_error) AS BIGINT)",
        "SUM(is_error) * 1.0 / COUNT(*)",
        f"AVG(CASE WHEN {ok} THEN CASE WHEN finish_reason = 'length' THEN 1.0 ELSE 0.0 END END)",
        "SUM(prompt_tokens)",
        "AVG(CAST(prompt_tokens AS DOUBLE))",
        "SUM(completion_tokens)",
        "AVG(CAST(completion_tokens AS DOUBLE))",
        "AVG(latency_ms)",
        "MAX(latency_ms)",
        "AVG(time_to_first_token_ms)",
        "AVG(tokens_per_second)",
        "CAST(MIN(created) AS STRING)",
        "CAST(MAX(created) AS STRING)",
        *content_sql,
    ]
    columns = FEATURE_COLUMNS + features
    output = Path(args.output).resolve()
    column_ddl = ", ".join(f"`{n}` {k}" for n, k in columns)
    if args.print:
        t_env.execute_sql(f"CREATE TEMPORARY TABLE sink_features ({column_ddl}) WITH ('connector' = 'print')")
    else:
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE sink_features ({column_ddl}) WITH ('connector' = 'filesystem', "
            f"'path' = '{output / 'features'}', 'format' = 'json', {ROLLING})"
        )
    error_ddl = ", ".join(f"`{n}` {k}" for n, k in ERROR_COLUMNS)
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE sink_errors ({error_ddl}) WITH ('connector' = 'filesystem', "
        f"'path' = '{output / 'errors'}', 'format' = 'json', {ROLLING})"
    )
    statements = t_env.create_statement_set()
    statements.add_insert_sql(
        f"INSERT INTO sink_features SELECT {', '.join(aggregates)} FROM {window_sql(args)} "
        "GROUP BY window_start, window_end, model"
    )
    where = (
        "source, source_line, CAST(NULL AS STRING), CAST(NULL AS STRING)"
        if args.replay
        else ("CAST(NULL AS STRING), CAST(NULL AS BIGINT), request_id, prompt")
    )
    status = "CAST(NULL AS INT)" if args.replay else "http_status"
    statements.add_insert_sql(
        f"INSERT INTO sink_errors SELECT {where}, error_reason, error_field, CAST(body AS STRING), {status}, "
        "COALESCE(model, 'unknown'), CAST(created AS STRING) FROM responses WHERE error_reason IS NOT NULL"
    )
    return statements


# Row-format part files (JSON) roll by size or time only (30 min by default), and become visible at the
# checkpoint after they roll: these make a window's rows appear within seconds while an unbounded job runs.
ROLLING = (
    "'sink.rolling-policy.rollover-interval' = '1 min', 'sink.rolling-policy.inactivity-interval' = '5 s', "
    "'sink.rolling-policy.check-interval' = '5 s'"
)


def _part_files(path: Path) -> list[Path]:
    """The committed part files under `path` (in-progress files are hidden: '.part-...')."""
    return [f for f in sorted(path.rglob("*")) if f.is_file() and not f.name.startswith(".")]


def read_results(output: Path) -> tuple[list[dict[str, object]], int]:
    """The feature rows under OUTPUT/features (one per window and model), and how many error rows there are
    under OUTPUT/errors (counted line by line: there may be many, and only their number is shown)."""
    rows: list[dict[str, object]] = []
    for file in _part_files(output / "features"):
        with open(file, encoding="utf-8") as f:
            rows += [json.loads(line) for line in f if line.strip()]
    errors = 0
    for file in _part_files(output / "errors"):
        with open(file, "rb") as f:
            errors += sum(1 for line in f if line.strip())
    mark_partial(rows)
    return rows, errors


# (field, heading, format) of the summary table and the report's table; content features follow when present.
SUMMARY_COLUMNS = [
    ("window_start", "window start", "{}"),
    ("window_end", "end", "{}"),
    ("model", "model", "{}"),
    ("requests", "requests", "{:d}"),
    ("errors", "errors", "{:d}"),
    ("error_rate", "error %", "{:.1%}"),
    ("latency_ms_mean", "round trip ms", "{:.0f}"),
    ("latency_ms_max", "max ms", "{:.0f}"),
    ("ttft_ms_mean", "server ttft ms", "{:.0f}"),
    ("tokens_per_second_mean", "tokens/s", "{:.1f}"),
    ("completion_tokens_mean", "out tokens", "{:.1f}"),
]
# The profile's content features (`content_features`), as the summary and the report name them.
CONTENT_COLUMNS = [
    ("code_blocks_sum", "code blocks", "{:d}"),
    ("with_code_share", "with code %", "{:.0%}"),
    ("boxed_answer_share", "boxed answer %", "{:.0%}"),
    ("risk_low", "risk low", "{:d}"),
    ("risk_medium", "risk medium", "{:d}"),
    ("risk_high", "risk high", "{:d}"),
    ("score_mean", "score", "{:.2f}"),
]
RUN_FILE = "run.json"  # the run's details, beside features/ and errors/


def columns_of(rows: list[dict[str, object]]) -> list[tuple[str, str, str]]:
    """The summary's columns: the fixed ones, then the content features the rows hold."""
    present = {key for r in rows for key, value in r.items() if value is not None}
    return SUMMARY_COLUMNS + [c for c in CONTENT_COLUMNS if c[0] in present]


def _time(text: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text))
    except ValueError:
        return None


def mark_partial(rows: list[dict[str, object]]) -> None:
    """Sets `partial` on the windows the run covered only in part: the one it started in and the one it ended in,
    unless the run's first or last event lies within a twentieth of the window (at least 1 s) of the edge. The
    second of two 1-minute windows of a 60 s run held 134 requests against 2,866 and looked like a drop."""
    firsts = [t for r in rows if (t := _time(r.get("first_event"))) is not None]
    lasts = [t for r in rows if (t := _time(r.get("last_event"))) is not None]
    if not firsts or not lasts:  # results of a job that did not record them
        return
    run_first, run_last = min(firsts), max(lasts)
    for r in rows:
        start, end = _time(r.get("window_start")), _time(r.get("window_end"))
        if start is None or end is None:
            continue
        slack = max(1.0, (end - start).total_seconds() / 20)
        r["partial"] = (run_first - start).total_seconds() > slack or (end - run_last).total_seconds() > slack


def _cell(row: dict[str, object], field: str, spec: str) -> str:
    value = row.get(field)
    if value is None:
        return "-"
    if field == "window_start":
        return str(value)[:19] + (" *" if row.get("partial") else "")
    if field == "window_end":  # the date is the start's
        return str(value)[11:19]
    if isinstance(value, str):
        return value
    return spec.format(int(value) if spec == "{:d}" else value)  # type: ignore[call-overload]


def summary_table(rows: list[dict[str, object]]) -> str:
    """One line per model and window, in time order within each model; columns aligned."""
    columns = columns_of(rows)
    ordered = sorted(rows, key=lambda r: (str(r.get("model")), str(r.get("window_start"))))
    table = [[heading for _, heading, _ in columns]]
    table += [[_cell(r, field, spec) for field, _, spec in columns] for r in ordered]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    # Text columns left-aligned, numbers right-aligned.
    lines = [
        "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True)))
        for line in table
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if any(r.get("partial") for r in rows):
        lines.append("* a window the run covered only in part: its counts are not a drop or a rise")
    return "\n".join(lines)


# (key, label) of the run's details, as run.json holds them.
RUN_DETAILS = [
    ("mode", "mode"),
    ("profile", "profile"),
    ("backend", "parse backend"),
    ("endpoint", "endpoint"),
    ("model", "model"),
    ("replay", "replayed from"),
    ("rate", "prompts/s"),
    ("duration_s", "duration s"),
    ("window_s", "window s"),
    ("started", "started"),
]


def parse_backend(asked: str) -> str:
    """The backend that parses, as a fact: 'auto' is decided as the planner decides it (on the planning machine,
    `connector.flink.planner.gpu_backend_here`), so a run without a GPU says "cpu (no GPU)", never just "auto"."""
    from connector.flink.planner import gpu_backend_here

    if asked != "auto":
        return asked
    return "gpu" if gpu_backend_here() else "cpu (no GPU)"


def run_details(args: argparse.Namespace, endpoint: str | None, model: str | None) -> dict[str, object]:
    details: dict[str, object] = {
        "mode": "replay" if args.replay else "request",
        "profile": args.profile,
        "backend": parse_backend(args.backend),
        "window_s": args.window,
        "started": datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    if args.replay:
        details["replay"] = str(args.replay)
    else:
        details.update({"endpoint": endpoint, "model": model, "rate": args.rate, "duration_s": args.duration})
    return {k: v for k, v in details.items() if v is not None}


def read_run(output: Path) -> dict[str, object]:
    try:
        return dict(json.loads((output / RUN_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


def _run_line(run: dict[str, object]) -> str:
    return ", ".join(f"{label} {run[key]}" for key, label in RUN_DETAILS if key in run)


def summary(
    output: Path,
    rows: list[dict[str, object]],
    errors: int,
    seconds: float | None,
    run: dict[str, object] | None = None,
) -> str:
    took = "" if seconds is None else f" in {seconds:.1f} s"
    requests = sum(int(str(r["requests"])) for r in rows)
    models = sorted({str(r["model"]) for r in rows})
    head = (
        f"features: done{took}: {len(rows)} windows, {requests} requests "
        f"({errors} errors) for {', '.join(models) or 'no model'} -> {output / 'features'} "
        f"(errors: {output / 'errors'})"
    )
    if run:
        head += f"\nfeatures: run: {_run_line(run)}"
    return head + ("\n" + summary_table(rows) if rows else "")


# The report's charts: (field, title, scale for display, what an empty chart means).
CHARTS = [
    ("requests", "Requests per window", 1.0, "no windows"),
    ("error_rate", "Error rate (%)", 100.0, "no windows"),
    ("latency_ms_mean", "Round trip, mean (ms, measured by the job)", 1.0, "no request latency (replayed bodies)"),
    ("ttft_ms_mean", "Time to first token, mean (ms, reported by the server)", 1.0,
     "the server reported none (vLLM: --enable-per-request-metrics)"),
    ("tokens_per_second_mean", "Tokens per second, mean (reported by the server)", 1.0, "the server reported none"),
]  # fmt: skip
CONTENT_CHARTS = [
    ("with_code_share", "Answers with code (%)", 100.0, "no answer held code"),
    ("code_blocks_sum", "Code blocks per window", 1.0, "no answer held code"),
    ("boxed_answer_share", "Answers with a boxed answer (%)", 100.0, "no boxed answer"),
    ("risk_high", "High-risk answers per window", 1.0, "no risk levels"),
    ("score_mean", "Score, mean", 1.0, "no scores"),
]
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def charts_of(rows: list[dict[str, object]]) -> list[tuple[str, str, float, str]]:
    """The charts of a report: the fixed ones, then those of the content features the rows have columns for."""
    present = {key for r in rows for key in r}
    return CHARTS + [c for c in CONTENT_CHARTS if c[0] in present]


def _ticks(top: float) -> list[float]:
    """0, a round step and its multiples up to the first at or above `top` (at most 5 ticks)."""
    raw = top / 4
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


def _label(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 or value == int(value) else f"{value:.3g}"


def _chart(rows: list[dict[str, object]], field: str, title: str, scale: float, empty: str) -> str:
    """An inline SVG line chart of `field` over the windows, one line per model (no script, no download): a
    y-axis with round ticks, the windows' start times on the x-axis, hollow points for partial windows, and a
    word where there is nothing to draw."""
    width, height, left, right, top, bottom = 640, 240, 64, 40, 34, 44
    starts = sorted({str(r["window_start"]) for r in rows})
    models = sorted({str(r["model"]) for r in rows})
    values = [float(str(r[field])) * scale for r in rows if r.get(field) is not None]
    top_value = max(values, default=0.0) or 1.0
    ticks = _ticks(top_value)
    top_value = max(top_value, ticks[-1])
    position = {s: i for i, s in enumerate(starts)}
    plot = width - left - right
    # One window: its point in the middle, not at both ends.
    xs = [
        left + plot * ((i + 0.5) / len(starts) if len(starts) == 1 else i / (len(starts) - 1))
        for i in range(len(starts))
    ]

    def y(v: float) -> float:
        return top + (height - top - bottom) * (1 - v / top_value)

    parts = [
        f'<svg class="chart" data-field="{field}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" role="img">',
        f'<text x="{left}" y="20" font-weight="bold">{html.escape(title)}</text>',
    ]
    for tick in ticks:
        colour = "#888" if tick == 0 else "#e4e4e4"
        parts.append(
            f'<line x1="{left}" y1="{y(tick):.1f}" x2="{width - right}" y2="{y(tick):.1f}" stroke="{colour}"/>'
        )
        parts.append(
            f'<text class="ytick" x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{_label(tick)}</text>'
        )
    # At most 7 time labels, evenly picked, so that they do not overlap.
    every = max(1, math.ceil(len(starts) / 7))
    for i, start in enumerate(starts):
        if i % every == 0:
            label = html.escape(start[11:19])
            parts.append(f'<text class="xtick" x="{xs[i]:.1f}" y="{height - 24}" text-anchor="middle">{label}</text>')
    parts.append(
        f'<text x="{left + plot / 2:.0f}" y="{height - 6}" text-anchor="middle" fill="#666">window start</text>'
    )
    if not values:
        parts.append(
            f'<text class="nodata" x="{left + plot / 2:.0f}" y="{(top + height - bottom) / 2:.0f}" '
            f'text-anchor="middle" fill="#666">no data: {html.escape(empty)}</text>'
        )
    for i, model in enumerate(models):  # the same colour per model on every chart (the page's legend)
        colour = COLOURS[i % len(COLOURS)]
        points = sorted(
            (position[str(r["window_start"])], y(float(str(r[field])) * scale), bool(r.get("partial")))
            for r in rows
            if str(r["model"]) == model and r.get(field) is not None
        )
        # A line joins consecutive windows only: where a model has no row for a window, its line breaks.
        runs: list[list[tuple[int, float, bool]]] = []
        for point in points:
            if runs and point[0] == runs[-1][-1][0] + 1:
                runs[-1].append(point)
            else:
                runs.append([point])
        for run in runs:
            path = " ".join(f"{xs[i]:.1f},{py:.1f}" for i, py, _ in run)
            parts.append(f'<polyline class="series" fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        parts += [
            f'<circle class="{"partial" if partial else "full"}" cx="{xs[i]:.1f}" cy="{py:.1f}" r="4" '
            f'fill="{"#fff" if partial else colour}" stroke="{colour}" stroke-width="2"/>'
            for i, py, partial in points
        ]
    parts.append("</svg>")
    return "\n".join(parts)


def report_html(rows: list[dict[str, object]], errors: int, source: Path, run: dict[str, object] | None = None) -> str:
    """A self-contained page: the run's details, totals, one chart per feature, and the summary as a table."""
    columns = columns_of(rows)
    ordered = sorted(rows, key=lambda r: (str(r.get("model")), str(r.get("window_start"))))
    requests = sum(int(str(r["requests"])) for r in rows)
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in columns)
    body = "".join(
        f'<tr class="{"partial" if r.get("partial") else "full"}">'
        + "".join(f"<td>{html.escape(_cell(r, f, spec))}</td>" for f, _, spec in columns)
        + "</tr>"
        for r in ordered
    )
    charts = "\n".join(_chart(rows, *chart) for chart in charts_of(rows))
    models = sorted({str(r["model"]) for r in rows})
    legend = " ".join(
        f'<span style="color: {COLOURS[i % len(COLOURS)]}">&#9632; {html.escape(model)}</span>'
        for i, model in enumerate(models)
    )
    if any(r.get("partial") for r in rows):
        legend += " &nbsp; &#9675; a window the run covered only in part (marked * in the table)"
    details = "".join(
        f"<dt>{html.escape(label)}</dt><dd>{html.escape(str(run[key]))}</dd>"
        for key, label in RUN_DETAILS
        if run and key in run
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dspark-vllm features</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
.chart {{ border: 1px solid #ddd; margin: 8px 8px 0 0; font-size: 12px; }}
#run {{ display: grid; grid-template-columns: max-content auto; gap: 2px 12px; font-size: 13px; }}
#run dt {{ color: #666; }} #run dd {{ margin: 0; }}
table {{ border-collapse: collapse; margin-top: 16px; font-size: 13px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}
th:nth-child(-n+3), td:nth-child(-n+3) {{ text-align: left; }}
tr.partial td {{ color: #777; font-style: italic; }}
</style></head><body>
<h1>dspark-vllm features</h1>
<dl id="run">{details or "<dt>run</dt><dd>no details recorded</dd>"}</dl>
<p id="totals">{len(rows)} windows, {requests} requests, {errors} error rows, from {html.escape(str(source))}</p>
<p id="legend">{legend}</p>
{charts}
<table id="windows"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
</body></html>
"""


def write_report(path: Path, output: Path, rows: list[dict[str, object]], errors: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report_html(rows, errors, output / "features", read_run(output)), encoding="utf-8")
    print(f"features: report -> {path}", flush=True)


def finish(args: argparse.Namespace, seconds: float | None) -> None:
    """The summary of what the job committed (read once), and the report if asked for."""
    if args.print:
        took = "" if seconds is None else f" in {seconds:.1f} s"
        print(f"features: done{took}", flush=True)
        return
    output = Path(args.output).resolve()
    rows, errors = read_results(output)
    print(summary(output, rows, errors, seconds, read_run(output)), flush=True)
    if args.report:
        write_report(Path(args.report).resolve(), output, rows, errors)


def cancelled(java_exception) -> bool:  # type: ignore[no-untyped-def]
    """Whether a Java exception (through py4j) was caused by the job's cancellation, at any depth."""
    while java_exception is not None:
        if java_exception.getClass().getName() == "org.apache.flink.runtime.client.JobCancellationException":
            return True
        java_exception = java_exception.getCause()
    return False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.results_only:
        finish(args, None)
        return 0
    from py4j.protocol import Py4JJavaError
    from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

    from connector.flink.progress import JobProgress, free_port

    profile = load_profile(args.profile)
    env = StreamExecutionEnvironment.get_execution_environment()
    if args.parallelism:
        env.set_parallelism(args.parallelism)
    if args.checkpoint_interval > 0:
        # Exactly-once: the windows merge two inputs (rows and error rows), and after a failover a request
        # must be counted once, so the checkpoint barriers are aligned.
        env.enable_checkpointing(int(args.checkpoint_interval * 1000), CheckpointingMode.EXACTLY_ONCE)
    t_env = StreamTableEnvironment.create(env)
    config = t_env.get_config()
    # Under `flink run` the CLI starts this script and hands it its gateway: no local mini-cluster then.
    local = "PYFLINK_GATEWAY_PORT" not in os.environ
    rest_port = None
    if local:
        config.set("python.executable", sys.executable)
        rest_port = free_port()
        config.set("rest.port", str(rest_port))
    config.set("pipeline.name", "dspark-vllm features")

    started = time.monotonic()
    with endpoint_or_simulator(args) as endpoint:
        model = None
        if not args.replay:
            model = args.model or first_model(str(endpoint))
        statements = build(t_env, args, profile, endpoint, model)
        if not args.print:
            output = Path(args.output).resolve()
            output.mkdir(parents=True, exist_ok=True)
            details = json.dumps(run_details(args, endpoint, model), indent=1)
            (output / RUN_FILE).write_text(details + "\n", encoding="utf-8")
        result = statements.execute()
        client = result.get_job_client()
        if client is not None:
            print(f"features: job {client.get_job_id()}", flush=True)
        if args.detached:
            return 0
        stop = None
        if client is not None and rest_port and args.progress > 0:
            progress = JobProgress(f"http://127.0.0.1:{rest_port}", str(client.get_job_id()))
            stop = progress.every(
                args.progress,
                lambda s: progress.fresh and print(f"features: {s.line()}", file=sys.stderr, flush=True),
            )
        try:
            result.wait()
        except Py4JJavaError as exc:
            # An unbounded job ends when it is cancelled: report what was committed, without a Java trace.
            if not cancelled(exc.java_exception):
                raise
            print("features: the job was cancelled", flush=True)
        if stop is not None:
            stop.set()
            final = progress.snapshot()
            if progress.fresh:  # a local job's cluster is gone when it is over: the summary counts then
                print(f"features: {final.line()}", file=sys.stderr, flush=True)
    finish(args, time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
