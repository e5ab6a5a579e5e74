"""How a command of `dspark-vllm` ends: its exit status, one line on stderr for what went wrong, and SIGTERM and
SIGHUP taken as Ctrl-C is (the temporary files removed). The statuses are the command line's doc
(`connector.cli.commands`)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from connector.errors import BackendUnavailable, DsparkError, OptionsError, ProfileError

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PIPE_CLOSED",
    "EXIT_USAGE",
    "Failed",
    "Terminated",
    "run_reported",
    "signals_deferred",
    "stopped_by_signals",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_PIPE_CLOSED = 128 + signal.SIGPIPE  # what a shell shows for a reader that went away (`yes | head`)
# Raised for these, the fix is in how the command was called.
_USAGE_ERRORS = (OptionsError, ProfileError, BackendUnavailable)


class Failed(DsparkError):
    """The work failed while running (exit 1)."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP: the command stops as on Ctrl-C, its temporary files removed (exit 128 + signal)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """While inside, SIGTERM and SIGHUP raise `Terminated` (where Python can take signals: the main thread)."""

    def stop(signum: int, frame: Any) -> None:
        raise Terminated(signum)

    with _handled((signal.SIGTERM, signal.SIGHUP), stop):
        yield


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """While inside, SIGINT, SIGTERM and SIGHUP are noted, not acted on; the first is raised again as it ends, so
    it stops the command as ever. For steps that must not be cut in two: a temporary file made, and recorded for
    its removal (a signal between the two left the file behind)."""
    noted: list[int] = []

    def note(signum: int, frame: Any) -> None:
        noted.append(signum)

    try:
        with _handled((signal.SIGINT, signal.SIGTERM, signal.SIGHUP), note):
            yield
    finally:
        if noted:
            signal.raise_signal(noted[0])


@contextlib.contextmanager
def _handled(signums: tuple[int, ...], handler: Callable[[int, Any], None]) -> Iterator[None]:
    """While inside, `handler` takes `signums`; their handlers as they were again after (where Python can take
    signals: the main thread; elsewhere they are left as they are)."""
    previous = {}
    with contextlib.suppress(ValueError):
        for signum in signums:
            previous[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, was in previous.items():
            signal.signal(signum, was)


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
        with stopped_by_signals():
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
        _quiet_after_a_signal(verbose)
        return failed(exc, EXIT_INTERRUPTED, "interrupted")
    except Terminated as exc:
        _quiet_after_a_signal(verbose)
        return failed(exc, 128 + exc.signum, f"terminated ({signal.Signals(exc.signum).name})")
    except Exception as exc:  # a defect of ours: still one line, and --verbose shows where
        hint = "" if verbose else " (--verbose shows where)"
        return failed(exc, EXIT_FAILED, f"{type(exc).__name__}: {exc}{hint}")


def _quiet_after_a_signal(verbose: bool) -> None:
    """A signal lands between any two bytecodes, even inside a constructor (asyncio's event loop's, seen in CI):
    what it left half-built complains when freed ("Exception ignored in __del__", "coroutine ... was never
    awaited"), after the command's one line. The command is ending as asked, so that is noise: kept quiet
    unless `verbose`. Called while the exception, and so the half-built objects its frames hold, is alive."""
    if not verbose:
        sys.unraisablehook = lambda unraisable: None
        warnings.simplefilter("ignore")
