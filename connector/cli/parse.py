"""`dspark-vllm parse`: raw response bodies, one per line, into Parquet (rejected ones into an errors file)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from typing import IO

from connector.cli.files import ErrorsWriter, Output, RowGroups, same_file
from connector.cli.signals import EXIT_OK, Failed, signals_deferred
from connector.errors import OptionsError

__all__ = ["line_batches", "run"]

_READ_SIZE = 1 << 24
_BATCH_BYTES = 64 << 20  # a batch of lines is given to parse_batch at this size, whatever its count


def open_input(source: str) -> IO[bytes]:
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
            raise Failed(f"cannot read the input: {exc.strerror}") from None
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


def run(args: argparse.Namespace) -> int:
    # numpy, which pyarrow loads, starts OpenBLAS's threads, one per core, and they spin a while: CPU time
    # that this command, with no linear algebra in it, would only lose.
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
        if path and args.input != "-" and same_file(path, args.input):
            raise OptionsError(f"{flag} {path} is the input file: give another path (it would be overwritten)")
    if args.errors and same_file(args.errors, args.output):
        raise OptionsError(f"--errors {args.errors} is the --output file: give another path")
    stream = open_input(args.input)
    outputs: list[Output] = []
    rows_writer: RowGroups | None = None
    errors_writer: ErrorsWriter | None = None
    try:
        with signals_deferred():  # each temporary file is in `outputs` before a signal can end the command
            outputs.append(Output(args.output, "--output"))
            if args.errors is not None:
                outputs.append(Output(args.errors, "--errors", ("ndjson", "parquet")))
        # After the outputs' names are checked: 'auto' without a GPU warns, and a usage error comes first.
        backend = select_backend(args.backend)[0].name
        rows_writer = RowGroups(pq.ParquetWriter(outputs[0].file, schema))
        errors_writer = ErrorsWriter(outputs[1]) if args.errors is not None else None
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
                raise Failed(f"cannot write the output: {exc.strerror or exc}") from None
        seconds = time.perf_counter() - started
        try:
            rows_writer.close()
            if errors_writer is not None:
                errors_writer.close()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise Failed(f"cannot write the output: {exc.strerror or exc}") from None
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
