"""`dspark-vllm`: the command line. Thin: each subcommand module parses its options and calls the library."""

from __future__ import annotations

import argparse
import sys

from connector.schema import cli as schema_cli
from connector.simulator import cli as simulate_cli

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dspark-vllm", description="vLLM responses as typed Flink SQL streams"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    simulate_cli.add_arguments(sub.add_parser("simulate", help="run the vLLM-compatible simulator"))
    schema_cli.add_arguments(sub.add_parser("schema", help="print the columns a table over an endpoint gets"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    runners = {"simulate": simulate_cli.run, "schema": schema_cli.run}
    return runners[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
