"""Streaming features of LLM answers, per A/B arm, user and model, in event-time windows (a PyFlink job).

    python jobs/features.py --duration 60 --output out              # local mini-cluster + the simulator
    python jobs/features.py --endpoint http://127.0.0.1:8000 --model M --duration 300
    python jobs/features.py --replay captured/ --profile coder      # raw bodies captured earlier
    flink run -m host:8081 -py jobs/features.py --endpoint http://vllm:8000 --output /results

Enrichment first: the prompts file the job ships (`jobs/prompts.json`, `--prompts`: users, each in an A/B arm
with its own system prompt, max_tokens and temperature) is fed at `--rate` rows a second (Flink's datagen
source picks the rows in turn; each gets its event time when it is fed), and every row asks a 'dspark-vllm'
model through `ML_PREDICT`: its answer's typed columns come out beside the row's user, arm and event time, a
failed request or rejected body as the same row with `error.reason` set. With `--replay` the rows are those of
a 'dspark-vllm' table over captured bodies instead (no arm, no user; windows on `created`).

All are windowed on the event time (tumbling 10 seconds by default, `--window`; `--slide` for sliding windows):
per window, model and arm, requests, errors and their rate, the share of finish_reason = 'length',
prompt/completion tokens (sum, mean), latency (mean, max), time to first token and tokens/s where the server
sends them, and content features of the profile (code blocks for coder, a boxed answer for math, risk levels
and mean score for a profile with `risk_level`/`score`); per window and user, the user's counts. Features go to
JSON-lines files under OUTPUT/features (per arm) and OUTPUT/users, one object per window with named fields
(`--print` prints the arms' instead); error rows to JSON files under OUTPUT/errors. Files are committed at
checkpoints, so they appear while an unbounded job runs. Without `--duration` the job runs until it is
cancelled.

While it runs, a progress line every `--progress` seconds: the parse step's counts, and the feature and user
rows committed to the files so far. At the end the job prints a summary table per model, arm and window (the
run's details first; a window the run covered only in part is marked), with the content features, then the A/B
view: each arm over the whole run; and writes an HTML page (OUTPUT/report.html, `--report PATH`, `--no-report`)
with charts of the windows (a line per model and arm), content features included, the A/B view charted, the
arms and the users. `--results-only` runs no job and does both from the files already in OUTPUT (the run's
details are in OUTPUT/run.json). Two latencies, two clocks: `round trip ms` is the request's time measured by
the job (send to last byte), `server ttft ms` the time to first token the server reports in the body's
`metrics` (a simulator reports made-up figures). A mistake is one line on stderr, with the exit status of the
`dspark-vllm` command (`connector.cli.run_reported`).
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
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

# `python jobs/features.py` from a checkout: the package is one directory up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connector.errors import DsparkError, OptionsError  # noqa: E402
from connector.profiles import Profile, load_profile  # noqa: E402

if TYPE_CHECKING:
    from connector.flink.progress import Snapshot

FEATURE_COLUMNS = [
    ("window_start", "STRING"),
    ("window_end", "STRING"),
    ("model", "STRING"),
    ("arm", "STRING"),  # the A/B arm of the rows that asked (NULL for replayed bodies)
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
PROMPTS_FILE = Path(__file__).resolve().parent / "prompts.json"
# Per window and user (request mode): who asked, in which arm, and what they got.
USER_COLUMNS = [
    ("window_start", "STRING"),
    ("window_end", "STRING"),
    ("user_id", "STRING"),
    ("arm", "STRING"),
    ("model", "STRING"),
    ("requests", "BIGINT"),
    ("errors", "BIGINT"),
    ("completion_tokens_mean", "DOUBLE"),
    ("latency_ms_mean", "DOUBLE"),
]
ERROR_COLUMNS = [
    ("user_id", "STRING"),
    ("arm", "STRING"),
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


class _HelpWithDefaults(argparse.HelpFormatter):
    """Help that says each option's default, where it has one and its help does not say it already."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.option_strings and action.default not in (None, False, argparse.SUPPRESS) and "default" not in text:
            text += " (default: %(default)s)"
        return text


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The job's arguments; a mistake in them is one line and exit status 2, as the `dspark-vllm` command's."""
    from connector.cli import argument_parser

    argv = sys.argv[1:] if argv is None else argv
    p = argument_parser(
        argv,
        prog="features.py",
        description=__doc__.split("\n\n")[0],
        epilog=EXIT_STATUS,
        formatter_class=_HelpWithDefaults,
    )
    p.add_argument("--endpoint", help="OpenAI-compatible server; without it (and --replay) the simulator starts")
    p.add_argument("--model", help="model to ask (default: the first of the endpoint's /v1/models)")
    p.add_argument("--replay", metavar="PATH", help="file or directory of captured raw bodies, one per line")
    p.add_argument(
        "--replay-monitor", type=float, metavar="SECONDS", help="watch --replay for new files (unbounded job)"
    )
    p.add_argument(
        "--prompts",
        default=str(PROMPTS_FILE),
        metavar="PATH",
        help="the prompts file: arms and prompts with a user (request mode; default: jobs/prompts.json)",
    )
    p.add_argument("--profile", default="coder", help="built-in profile or profile file")
    p.add_argument(
        "--duration", type=float, help="seconds of requests (request mode; default: until the job is cancelled)"
    )
    p.add_argument("--rate", type=int, default=50, help="prompts per second (request mode)")
    p.add_argument("--output", default="out", help="output directory (features/, users/, errors/, report.html)")
    p.add_argument("--print", action="store_true", help="print features to stdout instead of files")
    p.add_argument("--window", type=float, default=10.0, help="window size in seconds (a 60 s run gives 6 or 7)")
    p.add_argument("--slide", type=float, help="slide in seconds: sliding windows instead of tumbling")
    p.add_argument("--watermark-delay", type=float, default=5.0, help="out-of-orderness allowed, seconds")
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "gpu"], help="parse backend")
    p.add_argument("--batch-size", type=int, help="bodies per parse batch (default: the table's)")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight per parallel instance")
    p.add_argument("--parallelism", type=int, help="job parallelism (default: the environment's)")
    p.add_argument("--checkpoint-interval", type=float, default=10.0, help="seconds; 0 turns checkpoints off")
    p.add_argument("--progress", type=float, default=5.0, help="seconds between progress lines; 0: none")
    p.add_argument("--detached", action="store_true", help="return once submitted (with `flink run -d`)")
    p.add_argument(
        "--report",
        metavar="PATH",
        help="the HTML page with charts of the windows, written at the end (default: OUTPUT/report.html)",
    )
    p.add_argument("--no-report", action="store_true", help="write no HTML page")
    p.add_argument(
        "--results-only",
        action="store_true",
        help="run no job: print the summary of the files in --output (and write the report) as they are now",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="an error with its traceback")
    args = p.parse_args(argv)
    for name in ("rate", "window", "duration", "slide", "concurrency", "parallelism", "batch_size", "replay_monitor"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            p.error(f"--{name.replace('_', '-')} {value:g}: must be more than 0")
    return args


# The job's exit status, as `dspark-vllm`'s (connector/cli.py, `run_reported`).
EXIT_STATUS = (
    "Exit status: 0 done (failed requests and rejected bodies are error rows, not a failure); 1 the work failed "
    "while running (a server could not be reached, the job failed); 2 a usage error, found before any work "
    "(arguments, profile, prompts file, paths); 130 interrupted, 143 terminated. Every error is one line on "
    "stderr (--verbose: with its traceback)."
)


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
    """The first model the endpoint serves; an endpoint that cannot be asked is one line that says what to do."""
    from connector.client.discovery import served_models
    from connector.errors import SchemaDiscoveryError

    models = served_models(endpoint)
    if not models:
        raise SchemaDiscoveryError(f"{endpoint}/v1/models lists no model: name the one to ask with --model")
    return models[0]


# The simulator's seed when the job starts it (its answers are made up: the run's details and report say so).
SIMULATOR_SEED = 7


@contextlib.contextmanager
def endpoint_or_simulator(args: argparse.Namespace) -> Iterator[str | None]:
    if args.replay or args.endpoint:
        yield args.endpoint
        return
    try:
        from connector.simulator.testing import serve_simulator
    except ImportError:
        raise OptionsError("no simulator in this installation; pass --endpoint URL or --replay PATH") from None
    with serve_simulator(mode="process", profiles=(args.profile,), seed=SIMULATOR_SEED) as sim:
        print(f"features: simulator on {sim.url}", file=sys.stderr, flush=True)
        yield sim.url


def responses_table(args: argparse.Namespace, profile: Profile):  # type: ignore[no-untyped-def]
    """The 'dspark-vllm' table of a replay (`--replay`): its columns, metadata (errors included) and options."""
    from pyflink.table import DataTypes, Schema, TableDescriptor

    declared, _, _ = content_features(profile)
    kinds = {"STRING": DataTypes.STRING(), "BIGINT": DataTypes.BIGINT(), "DOUBLE": DataTypes.DOUBLE()}
    schema = Schema.new_builder()
    for name, kind in [*BODY_COLUMNS, *declared]:
        schema.column(name, kinds[kind] if kind in kinds else DataTypes.TIMESTAMP(3))
    metadata = [
        ("error_reason", DataTypes.STRING(), "error.reason"),
        ("error_field", DataTypes.STRING(), "error.field"),
        ("body", DataTypes.BYTES(), "raw.body"),
        ("source", DataTypes.STRING(), "source.path"),
        ("source_line", DataTypes.BIGINT(), "source.line"),
    ]
    for name, kind, key in metadata:
        schema.column_by_metadata(name, kind, key, True)
    schema.watermark("created", f"created - {interval(args.watermark_delay)}")

    descriptor = TableDescriptor.for_connector("dspark-vllm").schema(schema.build())
    options = {"profile": args.profile, "parse.backend": args.backend, "mode": "replay"}
    options["replay.path"] = str(Path(args.replay).resolve())
    if args.batch_size:
        options["parse.batch-size"] = str(args.batch_size)
    if args.replay_monitor:
        options["replay.monitor-interval"] = f"{int(args.replay_monitor * 1000)} ms"
    if args.model:  # labels the rows whose body could not be read
        options["model"] = args.model
    for key, value in options.items():
        descriptor.option(key, value)
    return descriptor.build()


# The answer's columns the features read (a column of every profile), with their SQL types.
BODY_COLUMNS = [
    ("id", "STRING"),
    ("model", "STRING"),
    ("created", "TIMESTAMP(3)"),
    ("finish_reason", "STRING"),
    ("prompt_tokens", "BIGINT"),
    ("completion_tokens", "BIGINT"),
    ("time_to_first_token_ms", "DOUBLE"),
    ("tokens_per_second", "DOUBLE"),
]


def load_prompts(path: str | Path) -> tuple[dict[str, dict[str, object]], list[dict[str, str]]]:
    """The arms and prompts of a prompts file (jobs/prompts.json is the shape); a file that does not hold them
    is refused with one line that names it and what is wrong."""
    where = f"prompts file {path}"
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise OptionsError(f"{where}: {exc}") from None
    arms, prompts = (doc.get("arms"), doc.get("prompts")) if isinstance(doc, dict) else (None, None)
    if not isinstance(arms, dict) or not arms or not isinstance(prompts, list) or not prompts:
        raise OptionsError(f"{where}: expected an object with 'arms' (an object) and 'prompts' (a list), not empty")
    for name, arm in arms.items():
        unknown = set(arm) - set(ARM_SETTINGS) if isinstance(arm, dict) else {"(not an object)"}
        if unknown:
            takes = ", ".join(ARM_SETTINGS)
            raise OptionsError(f"{where}: arm {name!r}: {', '.join(sorted(unknown))}; an arm takes {takes}")
    for i, prompt in enumerate(prompts, 1):
        if not isinstance(prompt, dict) or not all(isinstance(prompt.get(k), str) for k in PROMPT_FIELDS):
            raise OptionsError(f"{where}: prompt {i}: expected strings {', '.join(PROMPT_FIELDS)}")
        if prompt["arm"] not in arms:
            raise OptionsError(f"{where}: prompt {i}: arm {prompt['arm']!r} is not one of {', '.join(arms)}")
    return arms, prompts


PROMPT_FIELDS = ("user_id", "arm", "question")
# What an arm may set: its system prompt, and request body options sent per row (INPUT columns of the model).
ARM_SETTINGS = {"system": "STRING", "max_tokens": "INT", "temperature": "DOUBLE"}


def _pick(values: list[str], index: str) -> str:
    """The SQL of `values[index]` (1-based), each literal cast so that none is padded to the longest."""
    from connector.flink.planner import sql_literal

    return "ARRAY[" + ", ".join(f"CAST({sql_literal(v)} AS STRING)" for v in values) + f"][{index}]"


def feed_ddl(args: argparse.Namespace, count: int) -> str:
    """The rate source that feeds the prompts file: row `n` (0, 1, ... at --rate a second; random in an unbounded
    job) is prompt n mod count, its event time the moment it is fed."""
    fields = (
        f"'fields.n.kind' = 'sequence', 'fields.n.start' = '0', 'fields.n.end' = '{prompt_count(args) - 1}'"
        if args.duration is not None  # else unbounded: the job runs until it is cancelled
        else f"'fields.n.kind' = 'random', 'fields.n.min' = '0', 'fields.n.max' = '{count - 1}'"
    )
    return (
        "CREATE TEMPORARY TABLE feed (n BIGINT, event_time AS LOCALTIMESTAMP, "
        f"WATERMARK FOR event_time AS event_time - {interval(args.watermark_delay)}) "
        f"WITH ('connector' = 'datagen', 'rows-per-second' = '{args.rate}', {fields})"
    )


def questions_sql(arms: dict[str, dict[str, object]], prompts: list[dict[str, str]]) -> str:
    """The view `questions`: per fed row, its user, arm, the chat messages (the arm's system prompt, then the
    question) and the arm's request options, and its event time."""
    index = f"CAST(MOD(n, {len(prompts)}) AS INT) + 1"
    arm_of = [p["arm"] for p in prompts]
    user = ["user", _pick([p["question"] for p in prompts], index)]
    system = [s for s in (arms[a].get("system") for a in arm_of) if s is not None]
    messages = f"ARRAY[ROW(CAST('user' AS STRING), {user[1]})]"
    if len(system) == len(prompts):
        messages = (
            f"ARRAY[ROW(CAST('system' AS STRING), {_pick([str(s) for s in system], index)}), "
            f"ROW(CAST('user' AS STRING), {user[1]})]"
        )
    columns = [
        f"{_pick([p['user_id'] for p in prompts], index)} AS user_id",
        f"{_pick(arm_of, index)} AS arm",
        f"CAST({messages} AS ARRAY<ROW<`role` STRING, content STRING>>) AS messages",
    ]
    for name, kind in ARM_SETTINGS.items():
        if name != "system" and any(name in arm for arm in arms.values()):
            values = [arms[a].get(name) for a in arm_of]
            picked = _pick(["" if v is None else str(v) for v in values], index)
            columns.append(f"TRY_CAST(NULLIF({picked}, '') AS {kind}) AS {name}")
    return f"CREATE TEMPORARY VIEW questions AS SELECT {', '.join(columns)}, event_time FROM feed"


def request_inputs(arms: dict[str, dict[str, object]]) -> list[tuple[str, str]]:
    """The model's INPUT columns: the messages, then the request options an arm sets (NULL: the server's own)."""
    inputs = [("messages", "ARRAY<ROW<`role` STRING, content STRING>>")]
    return inputs + [
        (name, kind)
        for name, kind in ARM_SETTINGS.items()
        if name != "system" and any(name in arm for arm in arms.values())
    ]


# The model's metadata columns the job keeps: (OUTPUT column, SQL type, name in the job's views).
MODEL_METADATA = [
    ("error.reason", "STRING", "error_reason"),
    ("error.field", "STRING", "error_field"),
    ("raw.body", "BYTES", "body"),
    ("request.latency-ms", "DOUBLE", "latency_ms"),
    ("request.id", "STRING", "request_id"),
    ("request.prompt", "STRING", "prompt"),
    ("request.http-status", "INT", "http_status"),
]


def gpu_route(args: argparse.Namespace) -> bool:
    """Whether the answers are parsed on the GPU: `--backend gpu`, or 'auto' where the job's configuration
    declares GPU TaskManagers (`args.gpu_task_managers`, `declares_gpu_task_managers`, as a replay table's planner
    decides it). Then the model's OUTPUT is the raw body and the request's metadata, and `parse_<profile>` (the
    project's parse step, libcudf in the Python worker, one GPU per TaskManager) types the body after ML_PREDICT;
    else the model parses in the JVM."""
    if args.replay or args.backend == "cpu":
        return False
    return args.backend == "gpu" or bool(getattr(args, "gpu_task_managers", False))


def declares_gpu_task_managers(config) -> bool:  # type: ignore[no-untyped-def]
    """Whether the job's configuration (a PyFlink TableConfig: the table's settings over the client's
    configuration) declares GPU TaskManagers (`connector.flink.planner.gpu_task_managers`)."""
    from connector.flink.planner import gpu_task_managers

    keys = ("external-resources", "external-resource.gpu.amount")
    return gpu_task_managers({key: config.get(key, "") for key in keys})


# The SQL function that parses the model's raw bodies on the GPU route.
PARSE_FUNCTION = "parse_answer"


def model_ddl(args: argparse.Namespace, profile: Profile, arms: dict[str, dict[str, object]], endpoint: str,
              model: str) -> str:  # fmt: skip
    """CREATE MODEL of the job's 'dspark-vllm' model: the arms' request options in, the answer's columns out (on
    the GPU route the raw body and the request's metadata only: `parse_<profile>` types the body after it)."""
    from connector.flink.planner import sql_literal

    declared, _, _ = content_features(profile)
    inputs = ", ".join(f"`{n}` {k}" for n, k in request_inputs(arms))
    outputs = [] if gpu_route(args) else [f"`{n}` {k}" for n, k in [*BODY_COLUMNS, *declared]]
    outputs += [f"`{k}` {t}" for k, t, _ in MODEL_METADATA]
    options = {
        "provider": "dspark-vllm",
        "endpoint": endpoint,
        "model": model,
        "profile": args.profile,
        "request.concurrency": str(args.concurrency),
    }
    if args.batch_size:
        options["parse.batch-size"] = str(args.batch_size)
    if profile.content_schema is not None:
        options["request.structured-output"] = "true"
    with_ = ", ".join(f"{sql_literal(k)} = {sql_literal(v)}" for k, v in options.items())
    return f"CREATE TEMPORARY MODEL answerer INPUT ({inputs}) OUTPUT ({', '.join(outputs)}) WITH ({with_})"


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
        return f"TABLE(HOP(TABLE events, DESCRIPTOR(event_time), {slide}, {size}))"
    return f"TABLE(TUMBLE(TABLE events, DESCRIPTOR(event_time), {size}))"


def answers_sql(
    args: argparse.Namespace, profile: Profile, arms: dict[str, dict[str, object]] | None, model: str | None = None
) -> str:
    """The view `answers`: one row per request (or replayed body), its answer's columns beside the row that
    asked (user, arm, event time), errors included; the same columns in both modes (and on both parse routes of
    request mode: `model`, the model asked, labels a row whose body names none, as the JVM's parse does)."""
    declared, _, _ = content_features(profile)
    body = ", ".join(f"`{n}`" for n, _ in BODY_COLUMNS if n != "created") + "".join(f", `{n}`" for n, _ in declared)
    if arms is None:  # a replay: the table's rows, windowed on `created`
        return (
            f"CREATE TEMPORARY VIEW answers AS SELECT {body}, created AS event_time, "
            "CAST(created AS STRING) AS created_text, CAST(NULL AS STRING) AS user_id, CAST(NULL AS STRING) AS arm, "
            "error_reason, error_field, body, CAST(NULL AS DOUBLE) AS latency_ms, CAST(NULL AS STRING) AS request_id, "
            "CAST(NULL AS STRING) AS prompt, CAST(NULL AS INT) AS http_status, source, source_line FROM responses"
        )
    inputs = ", ".join(n for n, _ in request_inputs(arms))
    predict = (
        f"ML_PREDICT(TABLE questions, MODEL answerer, DESCRIPTOR({inputs}), MAP['async', 'true', "
        f"'output-mode', 'ALLOW_UNORDERED', 'max-concurrent-operations', '{args.concurrency}'])"
    )
    if not gpu_route(args):
        metadata = ", ".join(f"`{key}` AS {name}" for key, _, name in MODEL_METADATA)
        return (
            f"CREATE TEMPORARY VIEW answers AS SELECT {body}, event_time, CAST(created AS STRING) AS created_text, "
            f"user_id, arm, {metadata}, CAST(NULL AS STRING) AS source, CAST(NULL AS BIGINT) AS source_line "
            f"FROM {predict}"
        )
    # The GPU route: the model's raw body typed by the parse step. A request that failed (no 2xx answer) keeps
    # the model's reason; a body the parser rejects is the parse step's error row (its reason and field).
    from connector.flink.planner import sql_literal

    names = [n for n, _ in BODY_COLUMNS if n != "created"] + [n for n, _ in declared]
    label = {"model": f"COALESCE(p.`model`, CAST({sql_literal(str(model))} AS STRING))"} if model else {}
    parsed = ", ".join(f"{label.get(n, f'p.`{n}`')} AS `{n}`" for n in names)
    metadata = ", ".join(f"`{key}` AS {name}" for key, _, name in MODEL_METADATA if not key.startswith("error."))
    return (
        f"CREATE TEMPORARY VIEW answers AS SELECT {parsed}, event_time, CAST(p.created AS STRING) AS created_text, "
        "user_id, arm, COALESCE(request_error, p.error) AS error_reason, "
        "CASE WHEN request_error IS NULL THEN p.error_field ELSE `error.field` END AS error_field, "
        f"{metadata}, CAST(NULL AS STRING) AS source, CAST(NULL AS BIGINT) AS source_line FROM ("
        f"SELECT *, {PARSE_FUNCTION}(COALESCE(`raw.body`, X'')) AS p, CASE WHEN `request.http-status` BETWEEN 200 "
        "AND 299 THEN CAST(NULL AS STRING) ELSE `error.reason` END AS request_error "
        f"FROM {predict})"
    )


def build(t_env, args: argparse.Namespace, profile: Profile, endpoint: str | None, model: str | None):  # type: ignore[no-untyped-def]
    """Declare the tables and return the statement set of the job (features per arm, per user, errors)."""
    from connector.flink import use_connector

    use_connector(t_env)
    arms = None
    if args.replay:
        t_env.create_temporary_table("responses", responses_table(args, profile))
    else:
        arms, prompts = load_prompts(args.prompts)
        t_env.execute_sql(feed_ddl(args, len(prompts)))
        t_env.execute_sql(questions_sql(arms, prompts))
        t_env.execute_sql(model_ddl(args, profile, arms, str(endpoint), str(model)))
        if gpu_route(args):
            from connector.flink.sql import parse_function_for

            t_env.create_temporary_function(PARSE_FUNCTION, parse_function_for(args.profile, backend="gpu"))
    t_env.execute_sql(answers_sql(args, profile, arms, model))
    declared, features, content_sql = content_features(profile)
    content_cols = [name for name, _ in declared]
    t_env.execute_sql(f"""
        CREATE TEMPORARY VIEW events AS
        SELECT COALESCE(model, 'unknown') AS model, arm, user_id, event_time,
               CASE WHEN error_reason IS NULL THEN 0 ELSE 1 END AS is_error, finish_reason, prompt_tokens,
               completion_tokens, latency_ms, time_to_first_token_ms,
               tokens_per_second{"".join(f", `{c}`" for c in content_cols)}
        FROM answers""")
    ok = "is_error = 0"
    aggregates = [
        "CAST(window_start AS STRING)",
        "CAST(window_end AS STRING)",
        "model",
        "arm",
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
        "CAST(MIN(event_time) AS STRING)",
        "CAST(MAX(event_time) AS STRING)",
        *content_sql,
    ]
    columns = FEATURE_COLUMNS + features
    output = Path(args.output).resolve()
    statements = t_env.create_statement_set()
    sinks = [("sink_features", columns, "features")]
    if arms is not None:
        sinks.append(("sink_users", USER_COLUMNS, "users"))
    sinks.append(("sink_errors", ERROR_COLUMNS, "errors"))
    for table, table_columns, folder in sinks:
        ddl = ", ".join(f"`{n}` {k}" for n, k in table_columns)
        if args.print and folder == "features":
            t_env.execute_sql(f"CREATE TEMPORARY TABLE {table} ({ddl}) WITH ('connector' = 'print')")
        else:
            t_env.execute_sql(
                f"CREATE TEMPORARY TABLE {table} ({ddl}) WITH ('connector' = 'filesystem', "
                f"'path' = '{output / folder}', 'format' = 'json', {ROLLING})"
            )
    statements.add_insert_sql(
        f"INSERT INTO sink_features SELECT {', '.join(aggregates)} FROM {window_sql(args)} "
        "GROUP BY window_start, window_end, model, arm"
    )
    if arms is not None:
        statements.add_insert_sql(
            "INSERT INTO sink_users SELECT CAST(window_start AS STRING), CAST(window_end AS STRING), user_id, arm, "
            "model, COUNT(*), CAST(SUM(is_error) AS BIGINT), AVG(CAST(completion_tokens AS DOUBLE)), AVG(latency_ms) "
            f"FROM {window_sql(args)} GROUP BY window_start, window_end, model, arm, user_id"
        )
    statements.add_insert_sql(
        "INSERT INTO sink_errors SELECT user_id, arm, source, source_line, request_id, prompt, error_reason, "
        "error_field, CAST(body AS STRING), http_status, COALESCE(model, 'unknown'), created_text "
        "FROM answers WHERE error_reason IS NOT NULL"
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


def _json_lines(folder: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for file in _part_files(folder):
        with open(file, encoding="utf-8") as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def read_users(output: Path) -> list[dict[str, object]]:
    """The per-user rows under OUTPUT/users (one per window and user; none for a replay)."""
    return _json_lines(output / "users")


def read_results(output: Path) -> tuple[list[dict[str, object]], int]:
    """The feature rows under OUTPUT/features (one per window and model), and how many error rows there are
    under OUTPUT/errors (counted line by line: there may be many, and only their number is shown)."""
    rows = _json_lines(output / "features")
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
    ("arm", "arm", "{}"),
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
    fixed = [c for c in SUMMARY_COLUMNS if c[0] != "arm" or "arm" in present]
    return fixed + [c for c in CONTENT_COLUMNS if c[0] in present]


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


def _order(row: dict[str, object]) -> tuple[str, str, str]:
    return (str(row.get("model")), str(row.get("arm") or ""), str(row.get("window_start")))


def series(row: dict[str, object]) -> str:
    """The line a row belongs to on a chart: its model, and its arm where it has one."""
    return str(row["model"]) + (f" / arm {row['arm']}" if row.get("arm") is not None else "")


def summary_table(rows: list[dict[str, object]]) -> str:
    """One line per model, arm and window, in time order within each; columns aligned."""
    lines = [_aligned(columns_of(rows), sorted(rows, key=_order))]
    if any(r.get("partial") for r in rows):
        lines.append("* a window the run covered only in part: its counts are not a drop or a rise")
    return "\n".join(lines)


def _aligned(columns: list[tuple[str, str, str]], ordered: list[dict[str, object]]) -> str:
    table = [[heading for _, heading, _ in columns]]
    table += [[_cell(r, field, spec) for field, _, spec in columns] for r in ordered]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    # Text columns left-aligned, numbers right-aligned.
    texts = [spec == "{}" for _, _, spec in columns]
    lines = [
        "  ".join(c.ljust(w) if text else c.rjust(w) for c, w, text in zip(line, widths, texts, strict=True))
        for line in table
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# The A/B view: (field, heading, format) of each arm over the whole run; the content features follow.
ARM_COLUMNS = [
    ("model", "model", "{}"),
    ("arm", "arm", "{}"),
    ("users", "users", "{:d}"),
    ("requests", "requests", "{:d}"),
    ("errors", "errors", "{:d}"),
    ("error_rate", "error %", "{:.1%}"),
    ("length_share", "length %", "{:.0%}"),
    ("latency_ms_mean", "round trip ms", "{:.0f}"),
    ("completion_tokens_mean", "out tokens", "{:.1f}"),
]
# How a window's feature adds up over a run: a sum, or a mean weighted by the rows it is over (`requests`, or
# `answered`: the rows that are no error).
_SUMS = {"requests", "errors", "code_blocks_sum", "risk_low", "risk_medium", "risk_high"}
_WEIGHTS = {"latency_ms_mean": "requests", "length_share": "answered", "completion_tokens_mean": "answered",
            "with_code_share": "answered", "boxed_answer_share": "answered", "score_mean": "answered"}  # fmt: skip


def _weighted_mean(windows: list[dict[str, object]], field: str, weights: list[float]) -> float | None:
    """The mean of the windows' means of `field`, each weighted by the rows it is over (None where none has one)."""
    pairs = [(float(str(w[field])), wt) for w, wt in zip(windows, weights, strict=True) if w.get(field) is not None]
    weight = sum(wt for _, wt in pairs)
    return sum(v * wt for v, wt in pairs) / weight if weight else None


def arm_rows(rows: list[dict[str, object]], users: list[dict[str, object]]) -> list[dict[str, object]]:
    """Each model and arm over the whole run, from its windows: sums added up, means weighted by the rows they
    are over (so an arm's mean is its rows' mean), and how many users asked in it (from OUTPUT/users)."""
    groups: dict[tuple[str, str], list[dict[str, object]]] = {}
    for r in rows:
        if r.get("arm") is not None:
            groups.setdefault((str(r["model"]), str(r["arm"])), []).append(r)
    result = []
    for (model, arm), windows in sorted(groups.items()):
        total: dict[str, object] = {"model": model, "arm": arm}
        total["users"] = len({u["user_id"] for u in users if (str(u.get("model")), str(u.get("arm"))) == (model, arm)})
        weights = {
            "requests": [float(str(w["requests"])) for w in windows],
            "answered": [float(str(w["requests"])) - float(str(w["errors"])) for w in windows],
        }
        fields = {key for w in windows for key, value in w.items() if value is not None}
        for field in sorted(fields & (_SUMS | set(_WEIGHTS))):
            if field in _SUMS:
                total[field] = sum(int(str(w[field])) for w in windows if w.get(field) is not None)
                continue
            total[field] = _weighted_mean(windows, field, weights[_WEIGHTS[field]])
        total["error_rate"] = int(str(total["errors"])) / int(str(total["requests"])) if total["requests"] else None
        result.append(total)
    return result


def arm_table(arms: list[dict[str, object]]) -> str:
    present = {key for r in arms for key, value in r.items() if value is not None}
    columns = ARM_COLUMNS + [c for c in CONTENT_COLUMNS if c[0] in present]
    return _aligned(columns, arms)


# What run.json says of the answers when the job started the simulator itself (no --endpoint).
SIMULATED = "the built-in simulator (seed {seed}; made up, not a model's)"
# (key, label) of the run's details, as run.json holds them.
RUN_DETAILS = [
    ("mode", "mode"),
    ("profile", "profile"),
    ("backend", "parse backend"),
    ("endpoint", "endpoint"),
    ("simulator", "answers from"),
    ("model", "model"),
    ("prompts", "prompts from"),
    ("arms", "arms"),
    ("replay", "replayed from"),
    ("rate", "prompts/s"),
    ("duration_s", "duration s"),
    ("window_s", "window s"),
    ("started", "started"),
]


def parse_backend(args: argparse.Namespace) -> str:
    """The backend that parses a replay, as a fact: 'auto' is decided as the planner decides it (by the job's
    configuration: GPU TaskManagers declared, then each parse step at open), so a run without GPU TaskManagers
    says "cpu (no GPU TaskManagers declared)", never just "auto"."""
    if args.backend != "auto":
        return str(args.backend)
    if getattr(args, "gpu_task_managers", False):
        return "gpu where a TaskManager has one, else cpu (decided at open: metric backendGpu)"
    return "cpu (no GPU TaskManagers declared)"


# What parses in request mode: the model's parse step in the TaskManager's JVM, or on the GPU route (`gpu_route`)
# the parse step's SQL function after ML_PREDICT, libcudf in the Python worker ('gpu': no fallback to the CPU).
MODEL_BACKEND = "cpu (ML_PREDICT, in the JVM)"
MODEL_GPU_BACKEND = "gpu (parse_{profile} after ML_PREDICT, in the Python worker)"


def request_backend(args: argparse.Namespace) -> str:
    """The backend that parses a request-mode run's answers, as a fact ('auto' without a GPU says so)."""
    if gpu_route(args):
        return MODEL_GPU_BACKEND.format(profile=args.profile)
    return MODEL_BACKEND[:-1] + "; no GPU TaskManagers declared)" if args.backend == "auto" else MODEL_BACKEND


def run_details(
    args: argparse.Namespace, endpoint: str | None, model: str | None, simulated: bool = False
) -> dict[str, object]:
    """The run's details for run.json, the summary and the report; `simulated`: the endpoint is the simulator the
    job started (no --endpoint), whose answers are made up."""
    details: dict[str, object] = {
        "mode": "replay" if args.replay else "request",
        "profile": args.profile,
        "backend": parse_backend(args) if args.replay else request_backend(args),
        "window_s": args.window,
        "started": datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    if args.replay:
        details["replay"] = str(args.replay)
    else:
        arms, prompts = load_prompts(args.prompts)
        details.update(
            {
                "endpoint": endpoint,
                "simulator": SIMULATED.format(seed=SIMULATOR_SEED) if simulated else None,
                "model": model,
                "prompts": f"{args.prompts} ({len(prompts)} prompts, {len({p['user_id'] for p in prompts})} users)",
                "arms": "; ".join(
                    f"{name}: " + ", ".join(f"{k} {v}" for k, v in arm.items() if k != "system")
                    for name, arm in arms.items()
                ),
                "rate": args.rate,
                "duration_s": args.duration,
            }
        )
    return {k: v for k, v in details.items() if v is not None}


def read_run(output: Path) -> dict[str, object]:
    try:
        return dict(json.loads((output / RUN_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


def _run_line(run: dict[str, object]) -> str:
    return ", ".join(f"{label} {run[key]}" for key, label in RUN_DETAILS if key in run)


def counts(rows: list[dict[str, object]]) -> str:
    """How many windows the rows are of, and how many feature rows (one per window, model and arm)."""
    windows = len({str(r["window_start"]) for r in rows})
    return f"{windows} window{'s' * (windows != 1)}, {len(rows)} feature row{'s' * (len(rows) != 1)}"


def summary(
    output: Path,
    rows: list[dict[str, object]],
    errors: int,
    seconds: float | None,
    run: dict[str, object] | None = None,
    users: list[dict[str, object]] | None = None,
) -> str:
    took = "" if seconds is None else f" in {seconds:.1f} s"
    requests = sum(int(str(r["requests"])) for r in rows)
    models = sorted({str(r["model"]) for r in rows})
    head = (
        f"features: done{took}: {counts(rows)}, {requests} requests ({errors} errors) for "
        f"{', '.join(models) or 'no model'} -> {output / 'features'}; "
        + (f"error rows -> {output / 'errors'}" if errors else "no error rows")
    )
    if run:
        head += f"\nfeatures: run: {_run_line(run)}"
    text = head + ("\n" + summary_table(rows) if rows else "")
    arms = arm_rows(rows, users or [])
    if arms:
        who = f"{len({u['user_id'] for u in users})} users, per window in {output / 'users'}" if users else "no users"
        text += f"\nfeatures: A/B, each arm over the whole run ({who}):\n" + arm_table(arms)
    return text


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
# Each line's dash and width, and its points' radius: a line drawn later is thinner, dashed and has smaller points,
# so that where two lines are equal (the arms' requests, an error rate of 0 for both) both still show.
DASHES = ["", "7 4", "2 3", "9 3 2 3", "4 2", "1 2"]


def _style(i: int, count: int) -> tuple[str, float, float, str]:
    """(colour, line width, point radius, dash) of the i-th of `count` lines."""
    wider = count - 1 - i  # lines drawn before the last
    return COLOURS[i % len(COLOURS)], 2.0 + 2.5 * min(wider, 3), 3.5 + 2.0 * min(wider, 3), DASHES[i % len(DASHES)]


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


def _label(value: float, percent: bool = False) -> str:
    text = f"{value:,.0f}" if value >= 100 or value == int(value) else f"{value:.3g}"
    return text + "%" * percent


def _chart(rows: list[dict[str, object]], field: str, title: str, scale: float, empty: str) -> str:
    """An inline SVG line chart of `field` over the windows, one line per model and arm (`series`; no script, no
    download): a y-axis with round ticks (a share's in %, up to 100% when all are 0), the windows' start times on
    the x-axis, hollow points for partial windows, and a word where there is nothing to draw."""
    width, height, left, right, top, bottom = 640, 240, 64, 40, 34, 44
    percent = scale == 100.0
    starts = sorted({str(r["window_start"]) for r in rows})
    models = sorted({series(r) for r in rows})
    values = [float(str(r[field])) * scale for r in rows if r.get(field) is not None]
    top_value = max(values, default=0.0) or (100.0 if percent else 1.0)
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
            f'<text class="ytick" x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{_label(tick, percent)}</text>'
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
    for i, model in enumerate(models):  # the same style per line on every chart (the page's legend)
        colour, line_width, radius, dash = _style(i, len(models))
        points = sorted(
            (position[str(r["window_start"])], y(float(str(r[field])) * scale), bool(r.get("partial")))
            for r in rows
            if series(r) == model and r.get(field) is not None
        )
        # A line joins consecutive windows only: where a model has no row for a window, its line breaks.
        runs: list[list[tuple[int, float, bool]]] = []
        for point in points:
            if runs and point[0] == runs[-1][-1][0] + 1:
                runs[-1].append(point)
            else:
                runs.append([point])
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        for run in runs:
            path = " ".join(f"{xs[i]:.1f},{py:.1f}" for i, py, _ in run)
            parts.append(
                f'<polyline class="series" fill="none" stroke="{colour}" stroke-width="{line_width:g}"{dashed} '
                f'points="{path}"/>'
            )
        parts += [
            f'<circle class="{"partial" if partial else "full"}" cx="{xs[i]:.1f}" cy="{py:.1f}" r="{radius:g}" '
            f'fill="{"#fff" if partial else colour}" stroke="{colour}" stroke-width="2"/>'
            for i, py, partial in points
        ]
    parts.append("</svg>")
    return "\n".join(parts)


# The A/B view's charts, each arm over the whole run: (field, title, scale for display, format of a value).
ARM_CHARTS = [
    ("length_share", "Answers cut at max_tokens (finish_reason length), each arm over the run", 100.0, "{:.0f}%"),
    ("completion_tokens_mean", "Out tokens per answer, mean, each arm over the run", 1.0, "{:.1f}"),
]


def _arm_chart(arms: list[dict[str, object]], styles: dict[str, int], field: str, title: str, scale: float,
               spec: str) -> str:  # fmt: skip
    """An inline SVG bar chart of an arm's `field` over the whole run: a bar per model and arm in its line's
    colour, named above it (a model's name may be long), its value beside it."""
    width, left, right, top, label, bar, gap = 640, 12, 70, 34, 16, 20, 10
    height = top + len(arms) * (label + bar + gap) + 4
    values = [float(str(a[field])) * scale if a.get(field) is not None else None for a in arms]
    top_value = max((v for v in values if v is not None), default=0.0) or (100.0 if scale == 100.0 else 1.0)
    plot = width - left - right
    parts = [
        f'<svg class="armchart" data-field="{field}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" role="img">',
        f'<text x="{left}" y="20" font-weight="bold">{html.escape(title)}</text>',
    ]
    for i, (arm, value) in enumerate(zip(arms, values, strict=True)):
        name = series(arm)
        colour = COLOURS[styles.get(name, i) % len(COLOURS)]
        y = top + i * (label + bar + gap)
        shown = "-" if value is None else spec.format(value)
        length = 0.0 if value is None else plot * value / top_value
        parts += [
            f'<text x="{left}" y="{y + 12}">{html.escape(name)}</text>',
            f'<line x1="{left}" y1="{y + label}" x2="{left}" y2="{y + label + bar}" stroke="#888"/>',
            f'<rect class="bar" x="{left}" y="{y + label}" width="{length:.1f}" height="{bar}" fill="{colour}"/>',
            f'<text class="value" x="{left + length + 6:.1f}" y="{y + label + bar * 0.7:.1f}">'
            f"{html.escape(shown)}</text>",
        ]
    parts.append("</svg>")
    return "\n".join(parts)


def _html_table(name: str, columns: list[tuple[str, str, str]], ordered: list[dict[str, object]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in columns)
    body = "".join(
        f'<tr class="{"partial" if r.get("partial") else "full"}">'
        + "".join(f"<td>{html.escape(_cell(r, f, spec))}</td>" for f, _, spec in columns)
        + "</tr>"
        for r in ordered
    )
    return f'<table id="{name}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


# The users' table of the report: each user over the whole run.
USER_TABLE = [
    ("user_id", "user", "{}"),
    ("arm", "arm", "{}"),
    ("model", "model", "{}"),
    ("requests", "requests", "{:d}"),
    ("errors", "errors", "{:d}"),
    ("completion_tokens_mean", "out tokens", "{:.1f}"),
    ("latency_ms_mean", "round trip ms", "{:.0f}"),
]


def user_rows(users: list[dict[str, object]]) -> list[dict[str, object]]:
    """Each user over the whole run, from their windows: requests and errors added up, out tokens the mean of
    their answers (a window's mean weighted by its answers), the round trip the mean of their requests."""
    groups: dict[tuple[str, str, str], list[dict[str, object]]] = {}
    for u in users:
        groups.setdefault((str(u["user_id"]), str(u.get("arm")), str(u.get("model"))), []).append(u)
    result = []
    for (user, arm, model), windows in sorted(groups.items()):
        requests = [int(str(w["requests"])) for w in windows]
        errors = [int(str(w.get("errors") or 0)) for w in windows]
        total: dict[str, object] = {"user_id": user, "arm": arm, "model": model, "requests": sum(requests),
                                    "errors": sum(errors)}  # fmt: skip
        answered = [float(n - e) for n, e in zip(requests, errors, strict=True)]
        total["completion_tokens_mean"] = _weighted_mean(windows, "completion_tokens_mean", answered)
        total["latency_ms_mean"] = _weighted_mean(windows, "latency_ms_mean", [float(n) for n in requests])
        result.append(total)
    return result


def warm_up(rows: list[dict[str, object]]) -> str | None:
    """A note when the run's first window's round trip is warm-up (connections opened, the JVM's code compiled):
    its mean over 3 times the median of the later windows'. None otherwise."""
    by_window: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if r.get("latency_ms_mean") is not None:
            by_window.setdefault(str(r["window_start"]), []).append(
                (float(str(r["latency_ms_mean"])), float(str(r["requests"])))
            )
    if len(by_window) < 3:
        return None
    means = [sum(v * n for v, n in pairs) / max(sum(n for _, n in pairs), 1) for _, pairs in sorted(by_window.items())]
    later = sorted(means[1:])
    median = later[len(later) // 2] if len(later) % 2 else (later[len(later) // 2 - 1] + later[len(later) // 2]) / 2
    if means[0] <= 3 * median:
        return None
    return (
        f"The first window's round trip ({means[0]:,.0f} ms) is warm-up: the job's connections being opened and its "
        f"code compiled while the first requests wait; the later windows' median is {median:,.0f} ms."
    )


def start_up(run: dict[str, object] | None, rows: list[dict[str, object]]) -> str | None:
    """When a request-mode run fed its first row, against when the command started (run.json's `started`): the
    gap is the job starting (the simulator, Flink's mini-cluster or the submission, its Python workers)."""
    if not run or run.get("mode") != "request" or "started" not in run:
        return None
    started = _time(str(run["started"])[:19])
    fed = [t for r in rows if (t := _time(r.get("first_event"))) is not None]
    if started is None or not fed:
        return None
    first = min(fed)
    gap = (first - started).total_seconds()
    return (
        f"{first:%H:%M:%S}, {gap:.0f} s after the start: the job starting (the simulator, Flink's cluster, its "
        "Python workers); windows are aligned to the clock, so the first one starts before it"
    )


def report_html(
    rows: list[dict[str, object]],
    errors: int,
    source: Path,
    run: dict[str, object] | None = None,
    users: list[dict[str, object]] | None = None,
) -> str:
    """A self-contained page: the run's details, totals, one chart per feature, the summary as a table, and
    where the rows had arms, the A/B view (charted) and the users."""
    requests = sum(int(str(r["requests"])) for r in rows)
    models = sorted({series(r) for r in rows})
    windows = _html_table("windows", columns_of(rows), sorted(rows, key=_order))
    arms = arm_rows(rows, users or [])
    if arms:
        present = {key for r in arms for key, value in r.items() if value is not None}
        columns = ARM_COLUMNS + [c for c in CONTENT_COLUMNS if c[0] in present]
        styles = {name: i for i, name in enumerate(models)}
        bars = "\n".join(_arm_chart(arms, styles, *chart) for chart in ARM_CHARTS)
        windows = (
            f"<h2>A/B: each arm over the whole run</h2>\n{bars}\n" + _html_table("arms", columns, arms) + "\n" + windows
        )
    if users:
        windows += "\n<h2>Users over the whole run</h2>\n" + _html_table("users", USER_TABLE, user_rows(users))
    charts = "\n".join(_chart(rows, *chart) for chart in charts_of(rows))
    # Notes on why a chart's line is as it is, above the charts (between two, one would break their rows).
    notes = "".join(
        f'<p class="note" id="{name}">{html.escape(note)}</p>' for name, note in [("warm-up", warm_up(rows))] if note
    )
    keys = []
    for i, model in enumerate(models):  # each line's sample: its colour, width, dash and point
        colour, width, radius, dash = _style(i, len(models))
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        keys.append(
            f'<span class="key"><svg width="40" height="14"><line x1="2" y1="7" x2="38" y2="7" stroke="{colour}" '
            f'stroke-width="{min(width, 5):g}"{dashed}/><circle cx="20" cy="7" r="{min(radius, 6):g}" '
            f'fill="{colour}"/></svg> {html.escape(model)}</span>'
        )
    legend = " ".join(keys)
    if any(r.get("partial") for r in rows):
        legend += " &nbsp; &#9675; a window the run covered only in part (marked * in the table)"
    shown = dict(run or {})
    if (fed := start_up(run, rows)) is not None:
        shown["first_fed"] = fed
    details = "".join(
        f"<dt>{html.escape(label)}</dt><dd>{html.escape(str(shown[key]))}</dd>"
        for key, label in [*RUN_DETAILS, ("first_fed", "first row fed")]
        if key in shown
    )
    simulated = ""
    if run and run.get("simulator"):
        simulated = (
            '<p class="note" id="simulated">The answers came from the built-in simulator (the job started it: no '
            "--endpoint was given). Its text, token counts, finish reasons and latencies are made up; they show "
            "what the job computes, not how a model answers.</p>"
        )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dspark-vllm features</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
.chart, .armchart {{ border: 1px solid #ddd; margin: 8px 8px 0 0; font-size: 12px; }}
.armchart {{ border-color: #ccd; }}
.note {{ font-size: 13px; color: #444; max-width: 640px; }}
#simulated {{ background: #fff4d6; border: 1px solid #e0c060; padding: 6px 10px; }}
.key {{ margin-right: 16px; white-space: nowrap; }} .key svg {{ vertical-align: middle; }}
#run {{ display: grid; grid-template-columns: max-content auto; gap: 2px 12px; font-size: 13px; }}
#run dt {{ color: #666; }} #run dd {{ margin: 0; }}
table {{ border-collapse: collapse; margin-top: 16px; font-size: 13px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}
th:nth-child(-n+4), td:nth-child(-n+4) {{ text-align: left; }}
tr.partial td {{ color: #777; font-style: italic; }}
</style></head><body>
<h1>dspark-vllm features</h1>
{simulated}
<dl id="run">{details or "<dt>run</dt><dd>no details recorded</dd>"}</dl>
<p id="totals">{counts(rows)}, {requests} requests, {errors} error rows, from {html.escape(str(source))}</p>
<p id="legend">{legend}</p>
{notes}
{charts}
{windows}
</body></html>
"""


def write_report(path: Path, output: Path, rows: list[dict[str, object]], errors: int) -> None:
    page = report_html(rows, errors, output / "features", read_run(output), read_users(output))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise DsparkError(f"report {path}: cannot write: {exc.strerror}") from None
    print(f"features: report -> {path}", flush=True)


def report_path(args: argparse.Namespace) -> Path | None:
    """Where the report goes: --report, else OUTPUT/report.html; none with --no-report or --print."""
    if args.no_report or args.print:
        return None
    return Path(args.report or Path(args.output) / REPORT_FILE).resolve()


REPORT_FILE = "report.html"


def finish(args: argparse.Namespace, seconds: float | None) -> None:
    """The summary of what the job committed (read once), and the report."""
    if args.print:
        took = "" if seconds is None else f" in {seconds:.1f} s"
        print(f"features: done{took}", flush=True)
        return
    output = Path(args.output).resolve()
    rows, errors = read_results(output)
    print(summary(output, rows, errors, seconds, read_run(output), read_users(output)), flush=True)
    path = report_path(args)
    if path is not None:
        write_report(path, output, rows, errors)


def cancelled(java_exception) -> bool:  # type: ignore[no-untyped-def]
    """Whether a Java exception (through py4j) was caused by the job's cancellation, at any depth."""
    while java_exception is not None:
        if java_exception.getClass().getName() == "org.apache.flink.runtime.client.JobCancellationException":
            return True
        java_exception = java_exception.getCause()
    return False


def java_failure(java_exception) -> str:  # type: ignore[no-untyped-def]
    """What a Java exception (through py4j) says at its root: the first line of the deepest cause's message."""
    root = java_exception
    while root.getCause() is not None and root.getCause() is not root:
        root = root.getCause()
    message = str(root.getMessage() or "").strip().splitlines()
    return message[0] if message else str(root.getClass().getSimpleName())


def main(argv: list[str] | None = None) -> int:
    from connector.cli import run_reported

    args = parse_args(argv)
    return run_reported("features", lambda: run(args), args.verbose)


def check_paths(args: argparse.Namespace) -> None:
    """The paths the job reads and writes, before any work: a mistake in them is a usage error (exit 2)."""
    output = Path(args.output).resolve()
    if args.results_only:
        if not (output / "features").is_dir():
            raise OptionsError(
                f"--output {args.output}: no results there (no features/ folder): give the folder a run wrote to"
            )
        return
    if args.replay and not Path(args.replay).exists():
        raise OptionsError(f"--replay {args.replay}: no such file or directory")
    if not args.print:
        try:
            output.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OptionsError(f"--output {args.output}: cannot write there: {exc.strerror}") from None


def run(args: argparse.Namespace) -> int:
    """The job (or with --results-only, its summary and report); what goes wrong is raised for `run_reported`."""
    check_paths(args)
    if args.results_only:
        finish(args, None)
        return 0
    profile = load_profile(args.profile)
    if not args.replay:
        load_prompts(args.prompts)  # a bad file is one line, before a simulator or a job starts
    started = time.monotonic()
    with endpoint_or_simulator(args) as endpoint:
        model = None
        if not args.replay:
            model = args.model or first_model(str(endpoint))
        simulated = endpoint is not None and endpoint != args.endpoint
        from py4j.protocol import Py4JJavaError

        try:
            finished = run_job(args, profile, endpoint, model, simulated)
        except Py4JJavaError as exc:
            raise DsparkError(f"the job failed: {java_failure(exc.java_exception)}") from None
        if not finished:
            return 0
    finish(args, time.monotonic() - started)
    return 0


def run_job(
    args: argparse.Namespace, profile: Profile, endpoint: str | None, model: str | None, simulated: bool
) -> bool:
    """Build and run the job; False when it was only submitted (--detached)."""
    from py4j.protocol import Py4JJavaError
    from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

    from connector.flink.progress import JobProgress, free_port

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
        if args.progress > 0:  # the REST API's metrics are refreshed this often (10 s by default), not more
            config.set("metrics.fetcher.update-interval", f"{max(1, int(args.progress * 1000))} ms")
    config.set("pipeline.name", "dspark-vllm features")
    args.gpu_task_managers = declares_gpu_task_managers(config)  # what 'auto' follows (gpu_route)

    statements = build(t_env, args, profile, endpoint, model)
    if not args.print:
        details = json.dumps(run_details(args, endpoint, model, simulated), indent=1)
        (Path(args.output).resolve() / RUN_FILE).write_text(details + "\n", encoding="utf-8")
    result = statements.execute()
    client = result.get_job_client()
    if client is not None:
        print(f"features: job {client.get_job_id()}", flush=True)
    if args.detached:
        return False
    stop = None
    if client is not None and rest_port and args.progress > 0:
        progress = JobProgress(f"http://127.0.0.1:{rest_port}", str(client.get_job_id()))
        said: list[str] = []

        def report(snapshot: Snapshot) -> None:
            line = progress_line(snapshot, None if args.print else Path(args.output).resolve(), not args.replay)
            if progress.fresh and line not in said[-1:]:  # a line that says nothing new is not said again
                said.append(line)
                print(line, file=sys.stderr, flush=True)

        stop = progress.every(args.progress, report)
    try:
        result.wait()
    except Py4JJavaError as exc:
        # An unbounded job ends when it is cancelled: report what was committed, without a Java trace.
        if not cancelled(exc.java_exception):
            raise
        print("features: the job was cancelled", flush=True)
    if stop is not None:
        stop.set()
        report(progress.snapshot())  # a local job's cluster is gone when it is over: the summary counts then
    return True


def progress_line(snapshot: Snapshot, output: Path | None, users: bool) -> str:
    """A progress line: the parse step's counts (Flink's REST API), and the feature rows (and `users`: user rows)
    committed to OUTPUT's files so far (a file is committed at a checkpoint)."""
    line = f"features: {snapshot.line()}"
    if output is None:
        return line
    folders = [("features", "feature")] + [("users", "user")] * users
    committed = ", ".join(f"{len(_json_lines(output / folder))} {what} rows" for folder, what in folders)
    return f"{line}  committed: {committed}"


if __name__ == "__main__":
    sys.exit(main())
