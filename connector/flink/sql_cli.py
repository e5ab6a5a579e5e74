"""`dspark-vllm sql FILE` and `dspark-vllm jar`: Flink SQL with 'dspark-vllm' tables, no Python program.

`sql` runs the statements of FILE with the SQL runner shipped in the connector jar
(`io.dspark.vllm.flink.SqlRunner`), as a plain JVM on the local mini-cluster: Flink's jars from the PyFlink
wheel, the connector jar, and this Python as 'python.executable' and 'python.client.executable'. It is the
SQL Client's path without its prompt. `jar` prints the connector jar's path (`sql-client.sh -j $(dspark-vllm jar)`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from connector.errors import DsparkError

__all__ = ["add_arguments", "java_command", "run"]

RUNNER = "io.dspark.vllm.flink.SqlRunner"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", help="SQL file to run (statements separated by ';')")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a Flink option for the session"
    )
    parser.add_argument("--jar", action="store_true", help="print the connector jar's path and exit")
    parser.add_argument("--log", help="Flink's log file (default: a temporary file, named on failure)")


def _pyflink_home() -> Path:
    spec = importlib.util.find_spec("pyflink")
    if spec is None or not spec.submodule_search_locations:
        raise DsparkError("dspark-vllm sql needs apache-flink (PyFlink) installed in this Python")
    return Path(next(iter(spec.submodule_search_locations)))


def _jvm_options(home: Path) -> list[str]:
    """Flink's own JVM options (the module opens Arrow and Kryo need), read from the wheel's config.yaml."""
    for line in (home / "conf" / "config.yaml").read_text().splitlines():
        if line.strip().startswith("all:") and "--add-opens" in line:
            return line.split(":", 1)[1].split()
    return ["--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/java.lang=ALL-UNNAMED"]


def java_command(sql_file: str, settings: list[str], log_file: str) -> list[str]:
    from connector.flink.env import connector_jar

    home = _pyflink_home()
    jars = [*sorted((home / "lib").glob("*.jar")), *sorted((home / "opt").glob("flink-python-*.jar"))]
    classpath = os.pathsep.join(str(j) for j in [*jars, connector_jar()])
    defaults = [f"python.executable={sys.executable}", f"python.client.executable={sys.executable}"]
    return [
        "java",
        *_jvm_options(home),
        f"-Dlog.file={log_file}",
        f"-Dlog4j.configurationFile={home / 'conf' / 'log4j-cli.properties'}",
        "-cp",
        classpath,
        RUNNER,
        sql_file,
        *defaults,
        *settings,
    ]


def run(args: argparse.Namespace) -> int:
    if args.jar:
        from connector.flink.env import connector_jar

        print(connector_jar())
        return 0
    if not args.file:
        raise DsparkError("give a SQL file to run, or --jar")
    if not Path(args.file).is_file():
        raise DsparkError(f"{args.file}: no such file")
    bad = [s for s in args.set if "=" not in s]
    if bad:
        raise DsparkError(f"--set expects KEY=VALUE, got '{bad[0]}'")
    log_file = args.log or tempfile.mkstemp(prefix="dspark-vllm-sql-", suffix=".log")[1]
    try:
        done = subprocess.run(java_command(args.file, args.set, log_file))
    except FileNotFoundError as exc:
        raise DsparkError("dspark-vllm sql needs Java 11+ ('java' on PATH)") from exc
    if done.returncode != 0:
        print(f"dspark-vllm sql: Flink's log is {log_file}", file=sys.stderr)
    return done.returncode
