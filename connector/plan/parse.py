"""The parse step's part of a plan: the native core's plan document, the columns it makes and its batching;
or why the parse step runs in Python (libcudf)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from connector.options import (
    MODE,
    PARSE_BACKEND,
    Options,
)
from connector.parse.native import NativePlan
from connector.plan.records import (
    NativeParse,
)
from connector.profiles import Profile
from connector.types.columns import body_columns, output_schema
from connector.types.flink_types import arrow_to_flink_sql

__all__ = ["core_parse", "gpu_backend_here", "native_parse"]


def gpu_backend_here() -> bool:
    """Whether this machine has the GPU backend: pylibcudf installed and an NVIDIA driver with a device (checked
    without importing pylibcudf, which takes seconds: every planning of a query runs this)."""
    if importlib.util.find_spec("pylibcudf") is None:
        return False
    return Path("/proc/driver/nvidia/version").exists() and any(Path("/dev").glob("nvidia[0-9]*"))


def native_parse(options: Options, profile: Profile, require_created: bool) -> NativeParse:
    """The parse step in the JVM (`io.dspark.vllm.engine.ParseOperator`, the native core through JNI), or why not.

    'cpu' parses there, and so does 'auto' where the GPU backend is not here (`gpu_backend_here`): the machine that
    plans the query stands for the TaskManagers (a cluster whose planner lacks a GPU its TaskManagers have
    sets 'gpu'). 'gpu' keeps the Python function (libcudf). The native core makes every column of a profile:
    the body's, the content properties' (their x-extract patterns too) and content_error.
    """
    backend = options.get(PARSE_BACKEND)
    if backend == "gpu":
        return NativeParse(why="'parse.backend' = 'gpu' (libcudf runs in Python)")
    if backend == "auto" and gpu_backend_here():
        return NativeParse(why="'parse.backend' = 'auto' where the GPU backend (pylibcudf and an NVIDIA GPU) is")
    # 'auto' without a GPU backend: the CPU, said once at WARNING on the TaskManagers (as `select_backend`
    # says it) and counted in gpuFallbackBatches.
    fallback = "no GPU backend (pylibcudf and an NVIDIA GPU) where the query was planned" if backend == "auto" else None
    return core_parse(options, profile, require_created, fallback)


def core_parse(options: Options, profile: Profile, require_created: bool, fallback: str | None) -> NativeParse:
    """The native core's part of a plan: its plan document for every body column, the columns it makes, the
    batching."""
    columns = body_columns(profile)
    made = [c.name for c in columns]
    if profile.content_properties:
        made += [p.name for p in profile.content_properties] + ["content_error"]
    types = {f.name: arrow_to_flink_sql(f.type) for f in output_schema(profile)}
    return NativeParse(
        document=NativePlan.of(columns, profile.created_unit, profile.content_properties).document.decode(),
        columns=tuple(made),
        types=tuple(types[name] for name in made),  # as the core makes them (Flink SQL types)
        require_created=require_created,
        batch_size=options.batch_size,
        # A batch is parsed when full or this long after its first body: the latency the step adds at most.
        batch_ms=5 if options.get(MODE) == "request" else 50,
        auto_fallback=fallback,
    )
