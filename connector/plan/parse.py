"""The parse step's part of a plan: the native core's plan document, the columns it makes and its batching;
or why the parse step runs in Python (libcudf)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

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

__all__ = ["core_parse", "gpu_task_managers", "native_parse"]


def gpu_task_managers(flink: Mapping[str, str]) -> bool:
    """Whether the job's configuration declares GPU TaskManagers, as Flink's external-resource framework does:
    'external-resources' names `gpu` and 'external-resource.gpu.amount' is above 0 (docker/flink-conf/gpu.yaml;
    a Kubernetes deployment sets the same keys)."""
    names = re.split(r"[;,]", flink.get("external-resources", "").strip().strip("[]"))
    try:
        amount = float(flink.get("external-resource.gpu.amount", "0"))
    except ValueError:
        amount = 0.0
    return "gpu" in {n.strip().strip("'\"") for n in names} and amount > 0


def native_parse(options: Options, profile: Profile, require_created: bool, flink: Mapping[str, str]) -> NativeParse:
    """The parse step: in the JVM (`io.dspark.vllm.engine.ParseOperator`, the native core through JNI), or `why`
    it runs in Python (the parse function, libcudf, its leftovers to the native core); the core's part is planned
    either way.

    'gpu' runs in Python; 'cpu' in the JVM; 'auto' in Python where the job's configuration declares GPU
    TaskManagers (`gpu_task_managers`), else in the JVM: the machine that plans the query (a SQL Gateway, a
    laptop) says nothing of the TaskManagers. Each parse step decides the rest where it runs, at open: the
    Python function takes libcudf where its worker has the GPU backend, else the native core; the JVM step on a
    TaskManager with a GPU says `gpu_unused` once. The native core makes every column of a profile: the body's,
    the content properties' (their x-extract patterns too) and content_error.
    """
    backend = options.get(PARSE_BACKEND)
    core = core_parse(options, profile, require_created)
    if backend == "gpu":
        return dataclasses.replace(core, why="'parse.backend' = 'gpu' (libcudf runs in Python)")
    if backend == "auto" and gpu_task_managers(flink):
        return dataclasses.replace(
            core,
            why="'parse.backend' = 'auto' where the job's configuration declares GPU TaskManagers "
            "('external-resources' names gpu, 'external-resource.gpu.amount' > 0)",
        )
    # 'auto' for TaskManagers without a GPU: a TaskManager that has one says so once at WARNING, and counts it.
    unused = (
        "'parse.backend' = 'auto' and the job's configuration declares no GPU TaskManagers, so the native core "
        "parses on the CPU; to parse on this GPU, set 'external-resources' = 'gpu' and "
        "'external-resource.gpu.amount' = '1' in the job's configuration (or 'parse.backend' = 'gpu')"
    )
    return dataclasses.replace(core, gpu_unused=unused) if backend == "auto" else core


def core_parse(options: Options, profile: Profile, require_created: bool) -> NativeParse:
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
    )
