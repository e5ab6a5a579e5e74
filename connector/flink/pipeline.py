"""The pipeline behind a declared table: source -> parse -> flat table -> declared columns (pyflink).

raw lines (replay) or request outcomes (request mode)
  -> `_parse(body, source[, request_error])`   one vectorized call per Arrow batch (flat columns)
  -> `__dspark_<table>_all`                    flat columns + internal `_` columns; rowtime + watermark
  -> `<table>`          (view) the declared columns only, nested ROWs built with ROW(...), metadata
  -> `<errors.table>`   (view) rejected bodies and failed requests, with reason and the line or prompt
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyflink.table import DataTypes, Schema, StreamTableEnvironment, Table, TableEnvironment
from pyflink.table.expressions import call, col, null_of

from connector.errors import OptionsError
from connector.flink.catalog import DeclaredColumn, DeclaredTable, FieldType, quote
from connector.flink.frames import flat_schema, prune_profile
from connector.flink.functions import ParseFunction, parse_udf
from connector.flink.types import flink_sql
from connector.options import Options
from connector.profiles import Profile, load_profile

__all__ = ["METADATA", "ERROR_COLUMNS", "Built", "build"]

# metadata key -> (internal column, its Flink type)
METADATA: dict[str, tuple[str, str]] = {
    "raw.body": ("_body", "VARBINARY(2147483647)"),
    "parse.backend": ("_backend", "VARCHAR(2147483647)"),
    "source.path": ("_source", "VARCHAR(2147483647)"),
    "source.line": ("_line", "BIGINT"),
    "request.id": ("_request_id", "VARCHAR(2147483647)"),
    "request.prompt": ("_prompt", "VARCHAR(2147483647)"),
    "request.http-status": ("_http_status", "INT"),
    "request.latency-ms": ("_latency_ms", "DOUBLE"),
    "request.attempts": ("_attempts", "INT"),
    "request.error": ("_request_error", "VARCHAR(2147483647)"),
}
# The columns of the request side that travel beside the parse function's result.
PASSTHROUGH = {
    "_body": DataTypes.BYTES(),
    "_source": DataTypes.STRING(),
    "_prompt": DataTypes.STRING(),
    "_request_id": DataTypes.STRING(),
    "_http_status": DataTypes.INT(),
    "_latency_ms": DataTypes.DOUBLE(),
    "_attempts": DataTypes.INT(),
    "_request_error": DataTypes.STRING(),
}
ERROR_COLUMNS = (
    "source", "line", "request_id", "prompt", "reason", "field", "body",
    "http_status", "latency_ms", "attempts", "model", "profile", "created",
)  # fmt: skip


@dataclass(frozen=True)
class Built:
    table: str
    errors_table: str
    all_view: str
    profile: str


def _internal(declared: DeclaredTable, suffix: str) -> str:
    return f"__dspark_{declared.name}_{suffix}"


def _needed_columns(declared: DeclaredTable) -> set[str]:
    needed: set[str] = set()

    def walk(name: str, ftype: FieldType) -> None:
        needed.add(name)
        for field_name, field_type in ftype.fields:
            walk(field_name, field_type)

    for column in declared.columns:
        if column.kind == "physical":
            walk(column.name, column.type)
    return needed


def _expression(name: str, ftype: FieldType, flat: dict[str, str], where: str) -> str:
    """SQL that builds a declared column (or ROW field) `name` of type `ftype` from the flat columns."""
    if ftype.is_row:
        parts = [_expression(n, t, flat, f"{where}.{n}") for n, t in ftype.fields]
        return f"CAST(ROW({', '.join(parts)}) AS {ftype.nullable_sql})"
    if name not in flat:
        known = ", ".join(sorted(n for n in flat if not n.startswith("_")))
        raise OptionsError(
            f"Column '{where}' is not produced by this profile; declare one of: {known} "
            "(or a ROW whose fields are among them), or a METADATA column."
        )
    if flat[name] == ftype.nullable_sql:
        return quote(name)  # no cast: a rowtime attribute stays one
    return f"CAST({quote(name)} AS {ftype.nullable_sql})"


def _column_sql(column: DeclaredColumn, flat: dict[str, str]) -> str:
    if column.kind == "metadata":
        key = column.metadata_key or column.name
        if key not in METADATA:
            raise OptionsError(
                f"Column '{column.name}': unknown metadata key '{key}'; use one of {', '.join(sorted(METADATA))}."
            )
        internal, itype = METADATA[key]
        target = column.type.nullable_sql
        value = quote(internal) if itype == target else f"CAST({quote(internal)} AS {target})"
        return f"{value} AS {quote(column.name)}"
    return f"{_expression(column.name, column.type, flat, column.name)} AS {quote(column.name)}"


def _declared_view_sql(declared: DeclaredTable, all_view: str, flat: dict[str, str]) -> str:
    inner = [_column_sql(c, flat) for c in declared.columns if c.kind != "computed"]
    select = f"SELECT {', '.join(inner)} FROM {quote(all_view)} WHERE `_error` IS NULL"
    if not any(c.kind == "computed" for c in declared.columns):
        return select
    outer = [f"{c.expression} AS {quote(c.name)}" if c.kind == "computed" else quote(c.name) for c in declared.columns]
    return f"SELECT {', '.join(outer)} FROM ({select})"


def _errors_view_sql(all_view: str, options: Options, profile: Profile) -> str:
    model = options["model"]
    model_sql = f"COALESCE(`model`, {_literal(model)})" if model else "`model`"
    return (
        "SELECT `_source` AS `source`, `_line` AS `line`, `_request_id` AS `request_id`, "
        "`_prompt` AS `prompt`, `_error` AS `reason`, `_error_field` AS `field`, `_body` AS `body`, "
        "`_http_status` AS `http_status`, `_latency_ms` AS `latency_ms`, `_attempts` AS `attempts`, "
        f"{model_sql} AS `model`, {_literal(profile.name)} AS `profile`, `created` "
        f"FROM {quote(all_view)} WHERE `_error` IS NOT NULL"
    )


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _replay_source(t_env: TableEnvironment, declared: DeclaredTable, options: Options) -> Table:
    name = _internal(declared, "raw")
    extra = ""
    if options["replay.monitor-interval"] is not None:
        extra = f", 'source.monitor-interval' = '{int(options['replay.monitor-interval'] * 1000)} ms'"
    t_env.execute_sql(f"DROP TEMPORARY TABLE IF EXISTS {quote(name)}")
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE {quote(name)} "
        "(`body` BYTES, `path` STRING METADATA FROM 'file.path' VIRTUAL) "
        f"WITH ('connector' = 'filesystem', 'path' = {_literal(options['replay.path'])}, "
        f"'format' = 'raw'{extra})"
    )
    raw = t_env.from_path(quote(name))
    return raw.select(
        col("body").alias("_body"),
        col("path").alias("_source"),
        null_of(DataTypes.STRING()).alias("_prompt"),
        null_of(DataTypes.STRING()).alias("_request_id"),
        null_of(DataTypes.INT()).alias("_http_status"),
        null_of(DataTypes.DOUBLE()).alias("_latency_ms"),
        null_of(DataTypes.INT()).alias("_attempts"),
        null_of(DataTypes.STRING()).alias("_request_error"),
    )


def build(t_env: TableEnvironment, declared: DeclaredTable, options: Options) -> Built:
    """Register the pipeline of `declared` under its own name (a temporary view) and its errors table."""
    full = load_profile(options["profile"])
    profile = prune_profile(full, _needed_columns(declared))
    schema = flat_schema(profile)
    flat_types = {f.name: flink_sql(f.type) for f in schema}
    flat_types.update({n: t for n, t in METADATA.values()})

    if declared.watermark is not None:
        rowtime = declared.watermark[0]
        column = next((c for c in declared.columns if c.name == rowtime), None)
        if column is None or column.kind != "physical" or flat_types.get(rowtime) != "TIMESTAMP(3)":
            raise OptionsError(
                f"WATERMARK FOR {rowtime}: the rowtime column must be a physical TIMESTAMP(3) column "
                "that the profile produces, such as 'created TIMESTAMP(3)'."
            )
        if not isinstance(t_env, StreamTableEnvironment):
            raise OptionsError(
                f"Table '{declared.name}' declares a WATERMARK: create the environment with "
                "StreamTableEnvironment.create(env) so event time can be attached."
            )
    # Check the declared columns before anything is registered.
    _declared_view_sql(declared, "_", flat_types)

    if options["mode"] == "replay":
        source = _replay_source(t_env, declared, options)
        inputs = [col("_body"), col("_source")]
    else:
        from connector.flink.requests import request_source

        source = request_source(t_env, declared, options, full)
        inputs = [col("_body"), col("_prompt"), col("_request_error")]

    function = ParseFunction(
        profile,
        backend=options["parse.backend"],
        gpu_device=options["parse.gpu-device"],
        require_created=declared.watermark is not None,
        mode=options["mode"],
    )
    parse = parse_udf(function)
    passthrough = list(PASSTHROUGH)
    parsed = source.select(*[col(n) for n in passthrough], call(parse, *inputs).alias("_p"))
    flat = parsed.select(*[col("_p").get(f.name).alias(f.name) for f in schema], *[col(n) for n in passthrough])

    all_view = _internal(declared, "all")
    if declared.watermark is not None:
        assert isinstance(t_env, StreamTableEnvironment)
        builder = Schema.new_builder()
        for f in schema:
            builder.column(f.name, flat_type_of(f.type))
        for n, dtype in PASSTHROUGH.items():
            builder.column(n, dtype)
        rowtime, expression = declared.watermark
        builder.watermark(rowtime, expression)
        flat = t_env.from_data_stream(t_env.to_data_stream(flat), builder.build())
    t_env.create_temporary_view(quote(all_view), flat)

    errors_table = options["errors.table"] or f"{declared.name}_errors"
    view_sql = _declared_view_sql(declared, all_view, flat_types)
    if declared.temporary:
        t_env.execute_sql(f"DROP TEMPORARY TABLE {quote(declared.name)}")
    t_env.execute_sql(f"CREATE TEMPORARY VIEW {quote(declared.name)} AS {view_sql}")
    t_env.execute_sql(f"DROP TEMPORARY VIEW IF EXISTS {quote(errors_table)}")
    t_env.execute_sql(f"CREATE TEMPORARY VIEW {quote(errors_table)} AS {_errors_view_sql(all_view, options, full)}")
    return Built(declared.name, errors_table, all_view, full.name)


def flat_type_of(dtype: pa.DataType):  # type: ignore[no-untyped-def]
    from connector.flink.types import flink_type

    return flink_type(dtype)
