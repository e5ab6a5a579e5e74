"""The files a command writes: whole or not at all (a temporary file beside it, renamed over it at the end),
streams and devices in place; Parquet in row groups of a bounded size; rejected bodies as NDJSON or Parquet."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import stat
import tempfile
from typing import IO, Any

from connector.cli.signals import Failed
from connector.errors import OptionsError

__all__ = ["ErrorsWriter", "Output", "RowGroups", "same_file"]

_GROUP_ROWS, _GROUP_BYTES = 1 << 17, 64 << 20  # the least a Parquet row group holds (but the last)


def _in_place(path: str) -> tuple[str, bool, int | None]:
    """The file `path` names once its symbolic links are followed, whether it is to be written in place, and
    the descriptor of this process it names, if it names one. In place: a path that leads through /proc
    (/dev/stdout is a link to /proc/self/fd/1, a descriptor of this process: replacing the link would replace
    the system's /dev/stdout, and a file the shell opened for it would stay empty). Devices and pipes are
    written in place too, as `Output` finds from their mode."""
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


class Output:
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
            raise Failed(f"{self.what} {self.path}: cannot write: {exc.strerror}") from None

    def commit(self) -> None:
        if self.temp is not None:
            try:
                os.replace(self.temp, self.target)
            except OSError as exc:
                raise Failed(f"{self.what} {self.path}: cannot write: {exc.strerror}") from None

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


def same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one is not there yet: the same path once links are followed
        return os.path.realpath(a) == os.path.realpath(b)


class RowGroups:
    """Tables written to a Parquet file in row groups of at least `_GROUP_ROWS` rows or `_GROUP_BYTES` bytes
    (the last one smaller): a row group a batch would grow the footer, which is held in memory to the end with
    the file, without bound for a file of many small batches."""

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


class ErrorsWriter:
    """Rejected bodies, as NDJSON (the body as text when it is UTF-8, else as `body_base64`) or Parquet."""

    def __init__(self, output: Output) -> None:
        self.output = output
        self.parquet: Any = None
        if output.kind == "parquet":
            import pyarrow.parquet as pq

            from connector.parse.batch import ERRORS_SCHEMA

            self.parquet = RowGroups(pq.ParquetWriter(output.file, ERRORS_SCHEMA))

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
