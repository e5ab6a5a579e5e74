"""`dspark-vllm columns`: print the columns a table over an endpoint gets, and say where they came from."""

from __future__ import annotations

import argparse
import json
import os
import sys

from connector.errors import OptionsError
from connector.server.discovery import discover_schema

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint", required=True, help="server root, e.g. http://127.0.0.1:8000 (/v1 accepted)")
    parser.add_argument(
        "--profile",
        default=None,
        metavar="NAME|FILE",
        help="model profile (default: the one the server names or its model matches)",
    )
    parser.add_argument(
        "--format",
        choices=("ddl", "arrow", "json-schema"),
        default="ddl",
        help="Flink DDL column list (default), Arrow schema, or the body's JSON Schema",
    )
    parser.add_argument("--probe", action="store_true", help="confirm with a max_tokens=1 request")
    key = parser.add_mutually_exclusive_group()
    key.add_argument("--api-key", default=None, help="API key, sent as a Bearer token (default: none is sent)")
    key.add_argument("--api-key-env", default=None, metavar="VAR", help="the environment variable holding the key")
    parser.add_argument("--ca-bundle", default=None, metavar="PEM", help="trust these CAs (default: certifi's)")
    parser.add_argument("--insecure", action="store_true", help="do not verify the TLS certificate")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="S", help="per request (default 10 s)")


def run(args: argparse.Namespace) -> int:
    """Print the columns; errors are raised for `connector.cli.main`, which gives them their exit status."""
    api_key = args.api_key
    if args.api_key_env is not None:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise OptionsError(f"--api-key-env: ${args.api_key_env} is not set; export it, or name another one")
    found = discover_schema(
        args.endpoint,
        args.profile,
        probe=args.probe,
        api_key=api_key,
        verify=not args.insecure,
        ca_bundle=args.ca_bundle,
        timeout_s=args.timeout,
    )
    if args.format == "ddl":
        text = found.ddl()
    elif args.format == "arrow":
        text = found.arrow_schema().to_string(show_schema_metadata=False)
    else:
        text = json.dumps(found.json_schema(), indent=2)
    print(f"-- schema source: {found.source}: {found.detail}; profile '{found.profile.name}'", file=sys.stderr)
    if found.added_fields:
        print(f"-- fields beyond the profile: {', '.join(found.added_fields)}", file=sys.stderr)
    for note in found.notes:
        print(f"-- note: {note}", file=sys.stderr)
    print(text)
    return 0
