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
import json
import os
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

# `python jobs/features.py` from a checkout: the package is one directory up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connector.errors import OptionsError  # noqa: E402
from connector.profiles import Profile, load_profile  # noqa: E402
from connector.report.page import write_report  # noqa: E402
from connector.report.results import RUN_FILE, json_lines, read_results, read_run, read_users  # noqa: E402
from connector.report.tables import summary  # noqa: E402

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


# The job's exit status, as `dspark-vllm`'s (connector/cli/signals.py, `run_reported`).
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
    from connector.types.flink_types import sql_literal

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
    configuration) declares GPU TaskManagers (`connector.plan.parse.gpu_task_managers`)."""
    from connector.plan.parse import gpu_task_managers

    keys = ("external-resources", "external-resource.gpu.amount")
    return gpu_task_managers({key: config.get(key, "") for key in keys})


# The SQL function that parses the model's raw bodies on the GPU route.
PARSE_FUNCTION = "parse_answer"


def model_ddl(args: argparse.Namespace, profile: Profile, arms: dict[str, dict[str, object]], endpoint: str,
              model: str) -> str:  # fmt: skip
    """CREATE MODEL of the job's 'dspark-vllm' model: the arms' request options in, the answer's columns out (on
    the GPU route the raw body and the request's metadata only: `parse_<profile>` types the body after it)."""
    from connector.types.flink_types import sql_literal

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
    from connector.types.flink_types import sql_literal

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


# What run.json says of the answers when the job started the simulator itself (no --endpoint).
SIMULATED = "the built-in simulator (seed {seed}; made up, not a model's)"


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


def main(argv: list[str] | None = None) -> int:
    from connector.flink import run_job_script

    args = parse_args(argv)
    return run_job_script("features", lambda: run(args), args.verbose)


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
            from connector.flink import served_model

            model = args.model or served_model(str(endpoint))
        simulated = endpoint is not None and endpoint != args.endpoint
        if not run_job(args, profile, endpoint, model, simulated):
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

    from connector.flink.env import cancelled
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
    committed = ", ".join(f"{len(json_lines(output / folder))} {what} rows" for folder, what in folders)
    return f"{line}  committed: {committed}"


if __name__ == "__main__":
    sys.exit(main())
