"""The parse step's part of a plan: the native core's plan document, the columns it makes and its batching;
or why the parse step runs in Python (libcudf)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence

from connector.options import (
    MODE,
    PARSE_BACKEND,
    Options,
)
from connector.parse.native import NativePlan, result_columns
from connector.parse.plan import plan_for
from connector.plan.parse_function import ParseFunctionPlan
from connector.plan.records import (
    PLAN_VERSION,
    Answer,
    CoreColumn,
    FormatPlan,
    NativeParse,
    NativeRead,
    TablePlan,
)
from connector.profiles import Profile, profile_of_document
from connector.strict import MAX_BODY_BYTES
from connector.types.columns import body_columns, output_schema
from connector.types.flink_types import arrow_to_flink_sql

__all__ = [
    "core_columns",
    "core_parse",
    "format_read",
    "gpu_task_managers",
    "made_columns",
    "native_parse",
    "native_read",
    "table_read",
]


def made_columns(profile: Profile) -> list[str]:
    """The columns the native core makes for a profile: the body's, the content properties' and content_error."""
    made = [c.name for c in body_columns(profile)]
    if profile.content_properties:
        made += [p.name for p in profile.content_properties] + ["content_error"]
    return made


def core_columns(profile: Profile, needs: Iterable[Iterable[str]], answer: Answer | None) -> tuple[str, ...]:
    """The core columns a query's row reads (the one owner of that list; the JVM's row binds them, and refuses
    one the plan lacks): those its columns' layouts read (`needs`: per column read, the flat columns of its
    layout, `layout.column_layout`; a metadata key's column), and with answer fields every one of them and the
    facts their check reads (finish_reason, refusal, completion_tokens, content_error), whichever columns the
    query reads. In the core's order."""
    wanted = {name for names in needs for name in names}
    if answer is not None:
        wanted |= {f.name for f in answer.fields} | set(answer.facts)
    return tuple(name for name in made_columns(profile) if name in wanted)


def native_read(
    profile: Profile, columns: Iterable[str], max_body_bytes: int | None = None, max_column_bytes: int | None = None
) -> NativeRead:
    """What the native core reads for the core `columns` of a query: the batch plan's document for them
    (`connector.parse.plan.plan_for`, the one narrowing Python's backends read by too: a content property or
    content_error keeps every property and the body column `content`), with `explain`, and the named columns of
    the core's result with their types (`connector.parse.native.result_columns`). `max_body_bytes` and
    `max_column_bytes`: other limits than the batch plan's, for tests only (`NativePlan.of`)."""
    plan = plan_for(profile, tuple(columns))
    native = plan.native
    if max_body_bytes is not None or max_column_bytes is not None:
        native = NativePlan.of(
            plan.columns,
            profile.created_unit,
            plan.properties,
            max_body_bytes=MAX_BODY_BYTES if max_body_bytes is None else max_body_bytes,
            max_column_bytes=max_column_bytes,
        )
    return NativeRead(
        version=PLAN_VERSION,
        document=native.document.decode(),
        columns=tuple(CoreColumn(*c) for c in result_columns(plan.columns, plan.properties)),
    )


def table_read(table: TablePlan, physical: Sequence[str], metadata: Sequence[str]) -> NativeRead:
    """What the core reads for a scan of a 'dspark-vllm' table (`table`: its plan, `table_plan`'s) that reads the
    `physical` columns and `metadata` keys (its projection, known when the scan is built)."""
    profile = ParseFunctionPlan.of_document(table.plan).profile
    needs: list[Iterable[str]] = [table.physical[name].needs for name in physical]
    needs += [[m.from_.column or ""] for m in table.metadata if m.key in metadata]
    return native_read(profile, core_columns(profile, needs, table.answer))


def format_read(plan: FormatPlan, physical: Sequence[str]) -> NativeRead:
    """What the core reads for a table with 'format' = 'dspark-vllm' (`plan`: `format_plan`'s) whose query reads
    the `physical` columns."""
    profile = profile_of_document(plan.profile)
    needs = [plan.physical[name].needs for name in physical if name in plan.physical]
    return native_read(profile, core_columns(profile, needs, plan.answer))


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


def core_parse(
    options: Options, profile: Profile, require_created: bool, read: Sequence[str] | None = None
) -> NativeParse:
    """The native core's part of a plan: the columns it makes, the batching, and what it reads for the core
    columns `read` where the query's row is known (`core_columns`)."""
    made = made_columns(profile)
    types = {f.name: arrow_to_flink_sql(f.type) for f in output_schema(profile)}
    return NativeParse(
        read=None if read is None else native_read(profile, read),
        columns=tuple(made),
        types=tuple(types[name] for name in made),  # as the core makes them (Flink SQL types)
        require_created=require_created,
        batch_size=options.batch_size,
        # A batch is parsed when full or this long after its first body: the latency the step adds at most.
        batch_ms=5 if options.get(MODE) == "request" else 50,
    )
