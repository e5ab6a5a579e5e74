"""`dspark-vllm sql FILE` and `dspark-vllm jar`: Flink SQL with 'dspark-vllm' tables, no Python program.

`sql` runs the statements of FILE with the SQL runner shipped in the connector jar
(`io.dspark.vllm.sql.SqlRunner`), as a plain JVM on the local mini-cluster: Flink's jars from the PyFlink
wheel, the connector jar, and this Python as 'python.executable' and 'python.client.executable'. It is the
SQL Client's path without its prompt. `jar` prints the connector jar's path (`sql-client.sh -j $(dspark-vllm jar)`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from connector.errors import DsparkError, OptionsError

__all__ = ["add_answer_schema_arguments", "add_arguments", "answer_schema", "java_command", "run"]

RUNNER = "io.dspark.vllm.sql.SqlRunner"
ANSWER_SCHEMA = "io.dspark.vllm.sql.AnswerSchema"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", help="SQL file to run (statements separated by ';')")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a Flink option for the session"
    )
    parser.add_argument("--jar", action="store_true", help="print the connector jar's path and exit")
    parser.add_argument(
        "--log", help="Flink's log file (default: a temporary file, kept and named only when the run failed)"
    )


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


def java_command(
    sql_file: str, settings: list[str], log_file: str, verbose: bool = False, main: str = RUNNER
) -> list[str]:
    from connector.flink.env import connector_jar

    home = _pyflink_home()
    jars = [*sorted((home / "lib").glob("*.jar")), *sorted((home / "opt").glob("flink-python-*.jar"))]
    classpath = os.pathsep.join(str(j) for j in [*jars, connector_jar()])
    defaults = [f"python.executable={sys.executable}", f"python.client.executable={sys.executable}"]
    return [
        "java",
        *_jvm_options(home),
        f"-Dlog.file={log_file}",
        *(["-Ddspark.verbose=true"] if verbose else []),
        f"-Dlog4j.configurationFile={home / 'conf' / 'log4j-cli.properties'}",
        "-cp",
        classpath,
        main,
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
        raise OptionsError("give a SQL file to run, or --jar")
    if not Path(args.file).is_file():
        raise OptionsError(f"{args.file}: no such file")
    bad = [s for s in args.set if "=" not in s]
    if bad:
        raise OptionsError(f"--set expects KEY=VALUE, got '{bad[0]}'")
    temporary = args.log is None
    if temporary:
        handle, log_file = tempfile.mkstemp(prefix="dspark-vllm-sql-", suffix=".log")
        os.close(handle)
    else:
        # Absolute, its folder made: Flink's log4j takes a bare file name's (missing) parent folder for null and
        # fails every job ("Could not create the DispatcherResourceManagerComponent").
        log_path = Path(args.log).expanduser().absolute()
        try:
            log_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OptionsError(f"--log {args.log}: cannot make its folder ({exc.strerror})") from None
        log_file = str(log_path)
    keep_log = False
    try:
        returncode, failure = _run_runner(java_command(args.file, args.set, log_file, getattr(args, "verbose", False)))
        if returncode not in (0, 2, 130, 143, 129):
            keep_log = _has_text(log_file)
            where = f"; Flink's log: {log_file}" if keep_log else ""
            failure = failure or f"the SQL runner ended with status {returncode}"
            print(f"dspark-vllm sql: {failure}{where}", file=sys.stderr)
    finally:
        if temporary and not keep_log:
            with contextlib.suppress(OSError):
                os.unlink(log_file)
    # The runner exits 1 when a statement or a job failed and 2 for its own usage errors: the CLI's scheme.
    return {0: 0, 2: 2, 130: 130, 143: 143, 129: 129}.get(returncode, 1)


def _has_text(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def _run_runner(command: list[str]) -> tuple[int, str | None]:
    """Run the SQL runner; its stderr lines pass through as `dspark-vllm sql:` lines, but the one saying which
    statement failed, which is returned for the caller to complete (and print once). A signal that stops this
    process (SIGINT, or SIGTERM/SIGHUP raised as `Terminated` by `connector.cli`) is passed on to the JVM, which is
    waited for."""
    try:
        proc = subprocess.Popen(command, stderr=subprocess.PIPE)
    except FileNotFoundError as exc:
        raise DsparkError("dspark-vllm sql needs Java 11+ ('java' on PATH)") from exc
    failure = None
    try:
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line.startswith(_PREFIX):
                line = line[len(_PREFIX) :]
                if line.startswith("statement ") and " failed: " in line:
                    failure = line
                    continue
                line = f"dspark-vllm sql: {line}"
            print(line, file=sys.stderr, flush=True)
        return proc.wait(), failure
    except BaseException as exc:
        signum = getattr(exc, "signum", signal.SIGINT if isinstance(exc, KeyboardInterrupt) else signal.SIGTERM)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    finally:
        if proc.stderr is not None:
            proc.stderr.close()


_PREFIX = "SqlRunner: "


def add_answer_schema_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="SQL file with CREATE MODEL statements (its queries are not run)")


def answer_schema(args: argparse.Namespace) -> int:
    """`dspark-vllm answer-schema FILE.sql`: the JSON Schema each 'dspark-vllm' model of the file sends for its
    answer fields, planned as ML_PREDICT plans it (io.dspark.vllm.sql.AnswerSchema), no job run."""
    if not Path(args.file).is_file():
        raise OptionsError(f"{args.file}: no such file")
    handle, log_file = tempfile.mkstemp(prefix="dspark-vllm-answer-schema-", suffix=".log")
    os.close(handle)
    try:
        done = subprocess.run(java_command(args.file, [], log_file, main=ANSWER_SCHEMA), check=False)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(log_file)
    return 0 if done.returncode == 0 else 1
