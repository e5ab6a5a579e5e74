"""PyFlink 2.3's defects and our fixes (connector/flink/pyflink_fixes.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyflink")


# A PyFlink program's local Python workers: the pool's gRPC server as a job on the mini-cluster starts it.
LOOPBACK = """
import sys
from pyflink.fn_execution.beam.beam_worker_pool_service import BeamFnLoopbackWorkerPoolServicer
if sys.argv[1] == "fixed":
    from connector.flink import use_connector  # as a program gets the fix: before it creates an environment
print(BeamFnLoopbackWorkerPoolServicer().start().startswith("localhost:"))
"""


@pytest.mark.parametrize("fixed", [True, False])
def test_a_program_that_ran_a_local_job_exits_quietly(fixed: bool) -> None:
    """Python 3.12 refuses threads at interpreter shutdown, and PyFlink stops its worker pool's server then
    with a grace period (a thread): every local PyFlink program ended with a RuntimeError's traceback."""
    done = subprocess.run(
        [sys.executable, "-c", LOOPBACK, "fixed" if fixed else "plain"],
        capture_output=True, text=True, timeout=120, check=False, cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "True\n")
    if fixed or sys.version_info < (3, 12):
        assert done.stderr == ""
    else:  # the defect, as long as PyFlink has it
        assert "RuntimeError: can't create new thread at interpreter shutdown" in done.stderr
