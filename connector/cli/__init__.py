"""The `dspark-vllm` command line: `commands` (the arguments, the subcommands, `main`), `parse` (the parse
command), `columns` (the columns an endpoint gives), `files` (outputs written whole or not at all), `signals`
(exit statuses, one line for what went wrong, SIGTERM and SIGHUP). Importing it loads neither pyarrow nor numpy:
each command imports what it needs."""

from __future__ import annotations

from connector.cli.commands import argument_parser, main
from connector.cli.signals import Terminated, run_reported

__all__ = ["Terminated", "argument_parser", "main", "run_reported"]
