"""The `dspark-vllm` command: thin argument parsing over the library.

dspark-vllm parse INPUT --profile NAME|FILE [--backend auto|cpu|gpu] --output OUT.parquet [--errors E.ndjson]
dspark-vllm bench parse [--bodies N] [--batch-size N] [--no-flink]
dspark-vllm simulate --host 127.0.0.1 --port P [--profile NAME|FILE] [--seed N] [fault options]
dspark-vllm schema --endpoint URL [--profile NAME|FILE] [--format ddl|arrow|json-schema]
dspark-vllm sql FILE.sql [--set KEY=VALUE]...   |   dspark-vllm sql --jar
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import time
from pathlib import Path

from connector.errors import DsparkError

__all__ = ["main"]

# Subcommands that live with their subsystem: module with add_arguments(parser) and run(args) -> int.
_DELEGATED = {
    "simulate": ("connector.simulator.cli", "run a vLLM-compatible simulator (tests, demos, benchmarks)"),
    "schema": ("connector.schema.cli", "print the columns a table gets from an endpoint"),
    "sql": ("connector.flink.sql_cli", "run a Flink SQL file with 'dspark-vllm' tables (no Python program)"),
}


def _read_lines(source: str) -> list[bytes]:
    if source == "-":
        data = sys.stdin.buffer.read()
    else:
        path = Path(source)
        if not path.is_file():
            raise DsparkError(f"{source}: no such file")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise DsparkError(f"{source}: cannot read: {exc.strerror}") from exc
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last line does not start another
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def _parse(args: argparse.Namespace) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from connector.decode import parse_batch
    from connector.profiles import load_profile

    profile = load_profile(args.profile)
    lines = _read_lines(args.input)
    started = time.perf_counter()
    tables, errors, backend = [], [], args.backend
    for start in range(0, max(len(lines), 1), args.batch_size):
        result = parse_batch(lines[start : start + args.batch_size], profile, args.backend, first_line=start + 1)
        tables.append(result.table)
        errors.append(result.errors)
        backend = result.backend + (f" (fallback: {result.fallback_reason})" if result.fallback_reason else "")
    seconds = time.perf_counter() - started
    table = pa.concat_tables(tables)
    pq.write_table(table, args.output)
    error_table = pa.concat_tables(errors)
    if args.errors:
        with open(args.errors, "w", encoding="utf-8") as out:
            for row in error_table.to_pylist():
                body = row.pop("body")
                row["body"] = body.decode("utf-8", "replace")
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
    size = sum(len(line) for line in lines)
    print(
        f"parsed {table.num_rows}, rejected {error_table.num_rows}, backend {backend}, "
        f"{size / 1e6 / max(seconds, 1e-9):.1f} MB/s ({size / 1e6:.1f} MB in {seconds:.2f} s)",
        file=sys.stderr,
    )
    return 0


def _bench(args: argparse.Namespace) -> int:
    from connector.bench import run_parse_benchmark

    return run_parse_benchmark(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dspark-vllm", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("parse", help="parse raw response bodies (one per line) into Parquet")
    p.add_argument("input", help="file with one response body per line, or - for stdin")
    p.add_argument("--profile", default="openai", help="built-in profile name or profile file (default: openai)")
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "gpu"])
    p.add_argument("--output", required=True, help="Parquet file for the parsed rows")
    p.add_argument("--errors", help="NDJSON file for rejected lines (line, reason, field, body)")
    p.add_argument("--batch-size", type=int, default=10_000, help="bodies per batch (default 10000)")
    p.set_defaults(func=_parse)

    b = sub.add_parser("bench", help="benchmarks")
    bench = b.add_subparsers(dest="bench", required=True)
    bp = bench.add_parser("parse", help="deserializer throughput against the usual baselines")
    bp.add_argument("--bodies", type=int, default=100_000, help="corpus size (default 100000)")
    bp.add_argument("--batch-size", type=int, default=10_000, help="bodies per parse_batch call")
    bp.add_argument("--profile", default="coder")
    bp.add_argument("--json-share", type=float, default=0.8, help="share of bodies whose content is JSON")
    bp.add_argument("--seed", type=int, default=7)
    bp.add_argument("--repeat", type=int, default=3, help="runs per path; the best is reported")
    bp.add_argument("--no-flink", action="store_true", help="skip the Flink json-format baseline")
    bp.add_argument("--gpu-batch-mb", type=int, default=64, help="batch size in MB of the large-batch GPU row")
    bp.add_argument("--output-json", help="also write the results as JSON")
    bp.set_defaults(func=_bench)

    for name, (module, help_text) in _DELEGATED.items():
        d = sub.add_parser(name, help=help_text)
        d.set_defaults(func=None, module=module)
        importlib.import_module(module).add_arguments(d)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        if args.func is None:
            return int(importlib.import_module(args.module).run(args))
        return int(args.func(args))
    except DsparkError as exc:
        print(f"dspark-vllm {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
