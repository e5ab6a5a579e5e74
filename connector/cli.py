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
import base64
import contextlib
import difflib
import importlib
import json
import logging
import os
import signal
import stat
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from typing import IO, Any

from connector.errors import BackendUnavailable, DsparkError, OptionsError, ProfileError

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PIPE_CLOSED",
    "EXIT_USAGE",
    "Terminated",
    "argument_parser",
    "line_batches",
    "main",
    "run_reported",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_PIPE_CLOSED = 128 + signal.SIGPIPE  # what a shell shows for a reader that went away (`yes | head`)
# Raised for these, the fix is in how the command was called.
_USAGE_ERRORS = (OptionsError, ProfileError, BackendUnavailable)

# Subcommands that live with their subsystem: module with add_arguments(parser) and run(args) -> int (or the
# module's functions of other names: "module:add_function:run_function").
_DELEGATED = {
    "simulate": ("connector.simulator.cli", "run a vLLM-compatible simulator (tests, demos, benchmarks)"),
    "columns": ("connector.server.cli", "print the columns a table gets from an endpoint"),
    "sql": ("connector.flink.sql_cli", "run a Flink SQL file with 'dspark-vllm' tables (no Python program)"),
    "answer-schema": (
        "connector.flink.sql_cli:add_answer_schema_arguments:answer_schema",
        "print the JSON Schema each 'dspark-vllm' model of a SQL file asks for",
    ),
}
_READ_SIZE = 1 << 24
_BATCH_BYTES = 64 << 20  # a batch of lines is given to parse_batch at this size, whatever its count
_GROUP_ROWS, _GROUP_BYTES = 1 << 17, 64 << 20  # the least a Parquet row group holds (but the last)


class _Failed(DsparkError):
    """The work failed while running (exit 1)."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP: the command stops as on Ctrl-C, its temporary files removed (exit 128 + signal)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """While inside, SIGTERM and SIGHUP raise `Terminated` (where Python can take signals: the main thread)."""

    def stop(signum: int, frame: Any) -> None:
        raise Terminated(signum)

    previous = {}
    with contextlib.suppress(ValueError):  # not the main thread: left as they are
        for signum in (signal.SIGTERM, signal.SIGHUP):
            previous[signum] = signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _open_input(source: str) -> IO[bytes]:
    if source == "-":
        if sys.stdin is None:
            raise OptionsError("-: there is no standard input (it is closed): give a file")
        return sys.stdin.buffer
    try:
        return open(source, "rb")  # noqa: SIM115 - closed by the caller
    except FileNotFoundError:
        raise OptionsError(f"{source}: no such file") from None
    except IsADirectoryError:
        raise OptionsError(f"{source}: is a directory; give a file with one response body per line") from None
    except OSError as exc:
        raise OptionsError(f"{source}: cannot read: {exc.strerror}") from None


def line_batches(stream: IO[bytes], size: int) -> Iterator[list[bytes]]:
    """The lines of `stream` (without `\\n` or `\\r\\n`) in lists of `size` (fewer when they hold
    `_BATCH_BYTES`), reading a block at a time. Of a line longer than a body may be, only its first
    `MAX_BODY_BYTES + 2` bytes are kept (over the limit even without a `\\r`): parse_batch refuses it from
    that length, and memory stays bounded whatever the input (a file of one endless line too)."""
    from connector.strict import MAX_BODY_BYTES

    keep = MAX_BODY_BYTES + 2
    batch: list[bytes] = []
    held = 0  # bytes in `batch`
    start: list[bytes] = []  # the beginning of the line the last block ended inside, at most `keep` bytes
    started = 0
    while True:
        try:
            block = stream.read(_READ_SIZE)
        except OSError as exc:
            raise _Failed(f"cannot read the input: {exc.strerror}") from None
        if not block:
            break
        lines = block.split(b"\n")
        last = lines.pop()
        if lines and start:
            lines[0] = b"".join([*start, lines[0][: keep - started]])
            start, started = [], 0
        for line in lines:
            line = line[:keep]  # noqa: PLW2901 - (the line itself when shorter, no copy)
            batch.append(line[:-1] if line.endswith(b"\r") else line)
            held += len(batch[-1])
            if len(batch) == size or held >= _BATCH_BYTES:
                yield batch
                batch, held = [], 0
        if last and started < keep:
            start.append(last[: keep - started])
            started += len(start[-1])
    if start:
        rest = b"".join(start)[:keep]
        batch.append(rest[:-1] if rest.endswith(b"\r") else rest)
    if batch:
        yield batch


def _in_place(path: str) -> tuple[str, bool, int | None]:
    """The file `path` names once its symbolic links are followed, whether it is to be written in place, and
    the descriptor of this process it names, if it names one. In place: a path that leads through /proc
    (/dev/stdout is a link to /proc/self/fd/1, a descriptor of this process: replacing the link would replace
    the system's /dev/stdout, and a file the shell opened for it would stay empty). Devices and pipes are
    written in place too, as `_Output` finds from their mode."""
    own = ("/proc/self/fd/", f"/proc/{os.getpid()}/fd/", "/dev/fd/")
    hop = os.path.abspath(path)
    for _ in range(40):
        for prefix in own:
            if hop.startswith(prefix) and hop[len(prefix) :].isdigit():
                return hop, True, int(hop[len(prefix) :])
        if hop.startswith("/proc/"):
            return hop, True, None
        try:
            hop = os.path.join(os.path.dirname(hop), os.readlink(hop))
        except OSError:  # not a link (or not there)
            break
    real = os.path.realpath(path)
    return real, real.startswith("/proc/"), None


# The names an output of each kind may have; `-` and streams (/dev/stdout, a pipe) take any kind.
_SUFFIXES = {"parquet": (".parquet",), "ndjson": (".ndjson", ".jsonl")}


class _Output:
    """A file written whole or not at all: a temporary file beside it, renamed over it at the end, with the
    mode a new file gets (or the one it had). A symbolic link stays: the file it names is the one written. A
    stream or device (`-` for stdout, /dev/stdout, a pipe) is written in place, after what it holds (a
    descriptor of this process is written through a copy of it, at its offset, as the shell would). Opening it
    checks the path and that its name is one of `kinds` (the first is the kind a stream gets), before any work.
    """

    def __init__(self, path: str, what: str, kinds: tuple[str, ...] = ("parquet",)) -> None:
        self.path, self.what = path, what
        if not path:
            raise OptionsError(f"{what}: give a file name")
        if path == "-":
            if kinds[0] == "parquet" and os.isatty(1):
                raise OptionsError(f"{what} -: stdout is a terminal and Parquet is binary: redirect it, or give a file")
            path = "/dev/fd/1"
        elif path.endswith("/"):
            raise OptionsError(f"{what} {path}: is a folder name; give a file name")
        target, in_place, descriptor = _in_place(path)
        try:
            mode = os.fstat(descriptor).st_mode if descriptor is not None else os.stat(target).st_mode
        except FileNotFoundError:
            mode = None
        except OSError as exc:
            raise OptionsError(f"{what} {self.path}: {exc.strerror}") from None
        if mode is not None and stat.S_ISDIR(mode):
            raise OptionsError(f"{what} {path}: is a directory; give a file name")
        self.direct = in_place or (mode is not None and not stat.S_ISREG(mode))
        self.target = target
        self.kind = kinds[0]
        if not self.direct:
            named = [kind for kind in kinds if path.lower().endswith(_SUFFIXES[kind])]
            if not named:
                names = " or ".join(suffix for kind in kinds for suffix in _SUFFIXES[kind])
                raise OptionsError(f"{what} {path}: give a name ending in {names} (or - for stdout)")
            self.kind = named[0]
        try:
            if descriptor is not None:
                self.file: IO[bytes] = os.fdopen(os.dup(descriptor), "wb")
                self.temp = None
            elif self.direct:
                self.file = open(path, "ab")  # noqa: SIM115 - closed in close()/discard()
                self.temp = None
            else:
                folder, name = os.path.split(target)
                handle, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=folder)
                self.file, self.temp = os.fdopen(handle, "wb"), temp
                # mkstemp makes it 0600: give it the mode the file has, or the one a new file gets.
                os.fchmod(handle, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
        except OSError as exc:
            raise OptionsError(f"{what} {self.path}: cannot write there: {exc.strerror}") from None

    def finish(self) -> None:
        """Everything written (ENOSPC shows here at the latest); `commit` then puts the file in place."""
        try:
            self.file.close()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _Failed(f"{self.what} {self.path}: cannot write: {exc.strerror}") from None

    def commit(self) -> None:
        if self.temp is not None:
            try:
                os.replace(self.temp, self.target)
            except OSError as exc:
                raise _Failed(f"{self.what} {self.path}: cannot write: {exc.strerror}") from None

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()
        if self.temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.temp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one is not there yet: the same path once links are followed
        return os.path.realpath(a) == os.path.realpath(b)


class _RowGroups:
    """Tables written to a Parquet file in row groups of at least `_GROUP_ROWS` rows or `_GROUP_BYTES` bytes
    (the last one smaller): a row group a batch would grow the footer, held in memory to the end, with the
    file (a file of 20k bodies parsed one at a time held 1.4 GB)."""

    def __init__(self, writer: Any) -> None:
        self.writer = writer
        self.held: list[Any] = []
        self.rows = self.bytes = 0

    def write(self, table: Any) -> None:
        self.held.append(table)
        self.rows += table.num_rows
        self.bytes += table.nbytes
        if self.rows >= _GROUP_ROWS or self.bytes >= _GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self.held:
            self.writer.write_table(pa.concat_tables(self.held), row_group_size=max(self.rows, 1))
        self.held, self.rows, self.bytes = [], 0, 0

    def close(self) -> None:
        self._flush()
        self.writer.close()

    def abandon(self) -> None:
        """After a failure: the writer closed, so that it does not write to its closed file when it is collected
        (a traceback after the one-line error). A close that failed is not tried again then either."""
        self.held = []
        with contextlib.suppress(Exception):
            self.writer.close()
        self.writer.is_open = False


class _ErrorsWriter:
    """Rejected bodies, as NDJSON (the body as text when it is UTF-8, else as `body_base64`) or Parquet."""

    def __init__(self, output: _Output) -> None:
        self.output = output
        self.parquet: Any = None
        if output.kind == "parquet":
            import pyarrow.parquet as pq

            from connector.parse.batch import ERRORS_SCHEMA

            self.parquet = _RowGroups(pq.ParquetWriter(output.file, ERRORS_SCHEMA))

    def write(self, errors: Any) -> None:
        if self.parquet is not None:
            self.parquet.write(errors)
            return
        lines = []
        for row in errors.to_pylist():
            body = row.pop("body")
            try:
                row["body"] = None if body is None else body.decode("utf-8")
            except UnicodeDecodeError:
                row["body_base64"] = base64.b64encode(body).decode("ascii")
            lines.append(json.dumps(row, ensure_ascii=False) + "\n")
        self.output.file.write("".join(lines).encode("utf-8"))

    def close(self) -> None:
        if self.parquet is not None:
            self.parquet.close()

    def abandon(self) -> None:
        if self.parquet is not None:
            self.parquet.abandon()


def _parse(args: argparse.Namespace) -> int:
    # numpy, which pyarrow loads, starts OpenBLAS's threads, one per core, and they spin a while: CPU time
    # that this command, with no linear algebra in it, would only lose (0.1 s of 0.6 s on 2 cores).
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import pyarrow.parquet as pq

    from connector.parse import parse_batch
    from connector.parse.backends import select_backend
    from connector.profiles import load_profile
    from connector.types.columns import output_schema

    # Everything that can be wrong with the call is found before the input is read.
    profile = load_profile(args.profile)
    schema = output_schema(profile)
    for path, flag in ((args.output, "--output"), (args.errors, "--errors")):
        if path and args.input != "-" and _same_file(path, args.input):
            raise OptionsError(f"{flag} {path} is the input file: give another path (it would be overwritten)")
    if args.errors and _same_file(args.errors, args.output):
        raise OptionsError(f"--errors {args.errors} is the --output file: give another path")
    stream = _open_input(args.input)
    outputs: list[_Output] = []
    rows_writer: _RowGroups | None = None
    errors_writer: _ErrorsWriter | None = None
    try:
        outputs.append(_Output(args.output, "--output"))
        if args.errors is not None:
            outputs.append(_Output(args.errors, "--errors", ("ndjson", "parquet")))
        # After the outputs' names are checked: 'auto' without a GPU warns, and a usage error comes first.
        backend = select_backend(args.backend)[0].name
        rows_writer = _RowGroups(pq.ParquetWriter(outputs[0].file, schema))
        errors_writer = _ErrorsWriter(outputs[1]) if args.errors is not None else None
        started = time.perf_counter()
        parsed = rejected = size = 0
        line = 1
        for batch in line_batches(stream, args.batch_size):
            result = parse_batch(batch, profile, args.backend, first_line=line)
            line += len(batch)
            size += sum(map(len, batch))
            parsed += result.table.num_rows
            rejected += result.errors.num_rows
            # The fallback's reason was said once, in the WARNING line; here it is the fact.
            backend = result.backend + (" (no GPU)" if result.fallback_reason else "")
            try:
                rows_writer.write(result.table)
                if errors_writer is not None:
                    errors_writer.write(result.errors)
            except BrokenPipeError:
                raise
            except OSError as exc:
                raise _Failed(f"cannot write the output: {exc.strerror or exc}") from None
        seconds = time.perf_counter() - started
        try:
            rows_writer.close()
            if errors_writer is not None:
                errors_writer.close()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _Failed(f"cannot write the output: {exc.strerror or exc}") from None
        for output in outputs:
            output.finish()
        for output in outputs:
            output.commit()
    except BaseException:
        for writer in (rows_writer, errors_writer):
            if writer is not None:
                writer.abandon()
        for output in outputs:
            output.discard()
        raise
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    print(
        f"parsed {parsed}, rejected {rejected}, backend {backend}, "
        f"{size / 1e6 / max(seconds, 1e-9):.1f} MB/s ({size / 1e6:.1f} MB in {seconds:.2f} s)",
        file=sys.stderr,
    )
    return EXIT_OK


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
    p.add_argument("--batch-size", type=_positive, default=10_000, help="bodies per batch (default 10000)")
    p.set_defaults(func=_parse)

    b = sub.add_parser("bench", parents=[common], help="benchmarks")
    bench = b.add_subparsers(dest="bench", required=True)
    bp = bench.add_parser("parse", parents=[common], help="deserializer throughput against the usual baselines")
    bp.add_argument("--bodies", type=_positive, default=100_000, help="corpus size (default 100000)")
    bp.add_argument("--batch-size", type=_positive, default=10_000, help="bodies per parse_batch call (default 10000)")
    bp.add_argument(
        "--profile", default="coder", help="built-in profile name or profile file of the corpus (default coder)"
    )
    bp.add_argument(
        "--json-share", type=float, default=0.8, help="share of bodies whose content is JSON (default 0.8: 80%%)"
    )
    bp.add_argument("--seed", type=int, default=7, help="the corpus's random seed: same seed, same bodies (default 7)")
    bp.add_argument("--repeat", type=_positive, default=3, help="runs per row; the best is reported (default 3)")
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
        "--gpu-batch-mb", type=_positive, default=64, help="batch size in MB of the large-batch GPU row (default 64)"
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


def run_reported(name: str, command: Callable[[], int], verbose: bool = False) -> int:
    """Run `command` and return its exit status, or the one of what it raised, said in one line on stderr as
    "NAME: message" (with the traceback first when `verbose`): 2 a usage error, 1 a failure while running,
    130 interrupted, 128 + signal for SIGTERM and SIGHUP, 141 quietly for a closed pipe (the module's doc)."""

    def failed(exc: BaseException, code: int, text: str | None = None) -> int:
        if verbose:
            traceback.print_exception(exc)
        print(f"{name}: {text or exc}", file=sys.stderr)
        return code

    try:
        with _stopped_by_signals():
            code = command()
            sys.stdout.flush()  # a closed pipe shows here, not at exit as a traceback
            return code
    except BrokenPipeError:
        # The reader went away (`dspark-vllm columns ... | head`): end quietly, as a Unix tool killed by SIGPIPE,
        # and point stdout at /dev/null so that the flush at exit has nowhere to fail.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE_CLOSED
    except _USAGE_ERRORS as exc:
        return failed(exc, EXIT_USAGE)
    except DsparkError as exc:
        return failed(exc, EXIT_FAILED)
    except KeyboardInterrupt as exc:
        return failed(exc, EXIT_INTERRUPTED, "interrupted")
    except Terminated as exc:
        return failed(exc, 128 + exc.signum, f"terminated ({signal.Signals(exc.signum).name})")
    except Exception as exc:  # a defect of ours: still one line, and --verbose shows where
        hint = "" if verbose else " (--verbose shows where)"
        return failed(exc, EXIT_FAILED, f"{type(exc).__name__}: {exc}{hint}")


if __name__ == "__main__":
    # `python -m connector.cli`: run the module's importable copy, so that `Terminated` raised by a subcommand
    # (which imports it from connector.cli) is the class `main` catches, not a twin from __main__.
    from connector.cli import main as _main

    sys.exit(_main())
