"""The `dspark-vllm` command: parse vLLM response bodies into Parquet, benchmark the parser, run a vLLM
simulator, print the columns an endpoint's answers get, and run Flink SQL files with the connector.

dspark-vllm parse INPUT --profile NAME|FILE [--backend auto|cpu|gpu] --output OUT.parquet [--errors E.ndjson]
dspark-vllm bench parse [--bodies N] [--batch-size N] [--no-flink] [--cli]
dspark-vllm simulate --host 127.0.0.1 --port P [--profile NAME|FILE] [--seed N] [fault options]
dspark-vllm columns --endpoint URL [--profile NAME|FILE] [--format ddl|arrow|json-schema]
dspark-vllm sql FILE.sql [--set KEY=VALUE]...   |   dspark-vllm sql --jar

Exit status: 0 done (rejected bodies are error rows, not a failure); 1 the work failed while running (a
file could not be read or written, a server could not be reached); 2 a usage error, found before any work
(arguments, profile, input and output paths, backend); 130 interrupted, 143 (129) terminated by SIGTERM
(SIGHUP), temporary files removed; 141 the pipe it wrote to was closed (as `cmd | head`), quietly. Every
error is one line on stderr (--verbose: with where it came from). An output named `-` is stdout.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import sys
from collections.abc import Callable
from typing import Any

from connector.cli import parse
from connector.cli.signals import EXIT_OK, EXIT_USAGE, run_reported

__all__ = ["argument_parser", "main"]

# Subcommands that live with their subsystem: module with add_arguments(parser) and run(args) -> int (or the
# module's functions of other names: "module:add_function:run_function").
_DELEGATED = {
    "simulate": ("connector.simulator.cli", "run a vLLM-compatible simulator (tests, demos, benchmarks)"),
    "columns": ("connector.cli.columns", "print the columns a table gets from an endpoint"),
    "sql": ("connector.flink.sql_cli", "run a Flink SQL file with 'dspark-vllm' tables (no Python program)"),
    "answer-schema": (
        "connector.flink.sql_cli:add_answer_schema_arguments:answer_schema",
        "print the JSON Schema each 'dspark-vllm' model of a SQL file asks for",
    ),
}


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _bench(args: argparse.Namespace) -> int:
    from connector.bench import run_parse_benchmark

    return run_parse_benchmark(args)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2) that name the nearest options to a misspelt one."""

    verbose = False  # set by main: then the usage follows the line
    argv: list[str] = []  # set by main

    def error(self, message: str) -> Any:  # type: ignore[override]
        known = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        if message.startswith("the following arguments are required: "):
            # A misspelt required option shows as a missing one: name the misspelling, it is the cause.
            unknown = [a for a in self.argv if a.startswith("--") and a.split("=", 1)[0] not in known]
            if unknown:
                message = f"unrecognized arguments: {' '.join(unknown)}"
        if message.startswith("unrecognized arguments: "):
            for given in message.split(": ", 1)[1].split():
                if given.startswith("--"):
                    near = difflib.get_close_matches(given.split("=", 1)[0], known, n=3, cutoff=0.6)
                    if near:
                        message += f"; did you mean {' or '.join(near)}?"
                        break
        if self.verbose:
            self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _subcommand_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the subcommand `args` are for (bench's own subcommand too), whose options they take."""
    for name in ("command", "bench"):
        subparsers = parser._subparsers
        chosen = getattr(args, name, None)
        if subparsers is None or chosen is None:
            break
        parser = subparsers._group_actions[0].choices[chosen]  # type: ignore[attr-defined,index]
    return parser


class _Version(argparse.Action):
    """--version, the installed package's, looked up only when asked (every command's start-up would pay for it)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("dspark-vllm")
        except PackageNotFoundError:  # a checkout on sys.path, not installed
            found = "(not installed)"
        print(f"dspark-vllm {found}")
        parser.exit(EXIT_OK)


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; of the delegated subcommands only `command`'s module is imported (for `parse`,
    importing the simulator, the HTTP client and PyFlink would take longer than parsing a small file)."""
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: given after the subcommand, -v must not be reset by the subcommand's default.
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log at INFO")
    parser: argparse.ArgumentParser = _Parser(
        prog="dspark-vllm",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n")[2],
        parents=[common],
    )
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("parse", parents=[common], help="parse raw response bodies (one per line) into Parquet")
    p.add_argument("input", help="file with one response body per line, or - for stdin")
    p.add_argument("--profile", default="openai", help="built-in profile name or profile file (default: openai)")
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "gpu"], help="default auto: gpu if usable")
    p.add_argument("--output", required=True, help="Parquet file (.parquet) for the parsed rows; - for stdout")
    p.add_argument(
        "--errors",
        help="file for rejected lines: NDJSON (.ndjson or .jsonl: line, reason, field, body or body_base64), or "
        "Parquet (.parquet: body as bytes); - for stdout (NDJSON)",
    )
    p.add_argument("--batch-size", type=positive, default=10_000, help="bodies per batch (default 10000)")
    p.set_defaults(func=parse.run)

    b = sub.add_parser("bench", parents=[common], help="benchmarks")
    bench = b.add_subparsers(dest="bench", required=True)
    bp = bench.add_parser("parse", parents=[common], help="deserializer throughput against the usual baselines")
    bp.add_argument("--bodies", type=positive, default=100_000, help="corpus size (default 100000)")
    bp.add_argument("--batch-size", type=positive, default=10_000, help="bodies per parse_batch call (default 10000)")
    bp.add_argument(
        "--profile", default="coder", help="built-in profile name or profile file of the corpus (default coder)"
    )
    bp.add_argument(
        "--json-share", type=float, default=0.8, help="share of bodies whose content is JSON (default 0.8: 80%%)"
    )
    bp.add_argument("--seed", type=int, default=7, help="the corpus's random seed: same seed, same bodies (default 7)")
    bp.add_argument("--repeat", type=positive, default=3, help="runs per row; the best is reported (default 3)")
    bp.add_argument(
        "--min-cpu",
        type=float,
        default=1.0,
        metavar="S",
        help="a row whose run takes less CPU is run over the corpus again within the run until it takes this "
        "long, so timer noise stays small (default 1; 0: once)",
    )
    bp.add_argument("--no-flink", action="store_true", help="skip the Flink json-format baseline")
    bp.add_argument(
        "--cli",
        action="store_true",
        help="also time whole processes: dspark-vllm parse against the hand-written script (json.loads + pandas)",
    )
    bp.add_argument(
        "--gpu-batch-mb", type=positive, default=64, help="batch size in MB of the large-batch GPU row (default 64)"
    )
    bp.add_argument("--output-json", help="also write the results as JSON")
    bp.set_defaults(func=_bench)

    for name, (module, help_text) in _DELEGATED.items():
        d = sub.add_parser(name, parents=[common], help=help_text)
        d.set_defaults(func=None, module=module)
        if name == command:
            path, add, _ = (module.split(":") + ["add_arguments", "run"])[:3]
            getattr(importlib.import_module(path), add)(d)
    return parser


def _delegated(module: str) -> Callable[[argparse.Namespace], int]:
    path, _, run = (module.split(":") + ["add_arguments", "run"])[:3]
    return getattr(importlib.import_module(path), run)  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _Parser.verbose = "-v" in argv or "--verbose" in argv
    _Parser.argv = argv
    parser = _parser(next((a for a in argv if not a.startswith("-")), None))
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the subcommand's parser, which knows the options that were meant
        _subcommand_parser(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    verbose = getattr(args, "verbose", False)
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s")

    def command() -> int:
        return int((_delegated(args.module) if args.func is None else args.func)(args))

    return run_reported(f"dspark-vllm {args.command}", command, verbose)


def argument_parser(argv: list[str], **kwargs: Any) -> argparse.ArgumentParser:
    """An argparse parser whose usage errors are this command's: one line (exit 2) that names the nearest options
    to a misspelt one; `argv`, the arguments it will parse, says whether -v/--verbose asks for the usage too.
    For other programs of the project (jobs/features.py) that answer mistakes as `dspark-vllm` does."""
    parser = _Parser(**kwargs)
    parser.verbose = "-v" in argv or "--verbose" in argv  # type: ignore[attr-defined]
    parser.argv = argv  # type: ignore[attr-defined]
    return parser
