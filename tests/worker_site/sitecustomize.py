"""Python started with this folder on PYTHONPATH (a Python worker that Flink starts in a process of its own, for a
job run by the SQL runner) replaces libcudf's reader by `tests.libcudf_emulator`, as the tests do in their own
process, where `DSPARK_TEST_EMULATE_LIBCUDF` is set. `DSPARK_TEST_WORKER_IMPORTS` names modules the parse step
imports before it reads (modules the job ships with 'python.files': a missing one fails the job)."""

from __future__ import annotations

import importlib
import os

if os.environ.get("DSPARK_TEST_EMULATE_LIBCUDF"):
    from connector.parse import backends
    from tests.libcudf_emulator import EmulatedLibcudfReader

    def _emulated_gpu() -> backends.GpuBackend:
        for module in filter(None, os.environ.get("DSPARK_TEST_WORKER_IMPORTS", "").split(",")):
            importlib.import_module(module)
        return backends.GpuBackend(EmulatedLibcudfReader())

    backends._gpu = _emulated_gpu
