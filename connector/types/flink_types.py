"""Arrow types -> Flink SQL types, for DDL column lists (`dspark-vllm columns`, the Flink layer).

>>> import pyarrow as pa
>>> arrow_to_flink_sql(pa.timestamp("ms", tz="UTC")), arrow_to_flink_sql(pa.list_(pa.string()))
('TIMESTAMP(3)', 'ARRAY<STRING>')
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["arrow_to_flink_sql", "ddl_columns", "quote_identifier", "sql_literal"]

_PRECISION = {"s": 0, "ms": 3, "us": 6, "ns": 9}
_SIMPLE = [
    (pa.types.is_boolean, "BOOLEAN"),
    (pa.types.is_int8, "TINYINT"),
    (pa.types.is_int16, "SMALLINT"),
    (pa.types.is_int32, "INT"),
    (pa.types.is_int64, "BIGINT"),
    (pa.types.is_uint8, "SMALLINT"),
    (pa.types.is_uint16, "INT"),
    (pa.types.is_uint32, "BIGINT"),
    (pa.types.is_uint64, "DECIMAL(20, 0)"),
    (pa.types.is_float16, "FLOAT"),
    (pa.types.is_float32, "FLOAT"),
    (pa.types.is_float64, "DOUBLE"),
    (pa.types.is_string, "STRING"),
    (pa.types.is_large_string, "STRING"),
    (pa.types.is_binary, "BYTES"),
    (pa.types.is_large_binary, "BYTES"),
    (pa.types.is_date32, "DATE"),
    (pa.types.is_date64, "DATE"),
]


def quote_identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def sql_literal(text: str) -> str:
    """A Flink SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def arrow_to_flink_sql(dtype: pa.DataType) -> str:
    """The Flink SQL type of an Arrow type (a timestamp's zone is dropped: TIMESTAMP(p) holds UTC here)."""
    for check, sql in _SIMPLE:
        if check(dtype):
            return sql
    if pa.types.is_timestamp(dtype):
        return f"TIMESTAMP({_PRECISION[dtype.unit]})"
    if pa.types.is_time(dtype):
        return f"TIME({_PRECISION[dtype.unit]})"
    if pa.types.is_fixed_size_binary(dtype):
        return f"BINARY({dtype.byte_width})"
    if pa.types.is_decimal(dtype):
        return f"DECIMAL({dtype.precision}, {dtype.scale})"
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_fixed_size_list(dtype):
        return f"ARRAY<{_nested(dtype.value_field)}>"
    if pa.types.is_map(dtype):
        return f"MAP<{_nested(dtype.key_field)}, {_nested(dtype.item_field)}>"
    if pa.types.is_struct(dtype):
        inner = ", ".join(f"{quote_identifier(f.name)} {_nested(f)}" for f in dtype)
        return f"ROW<{inner}>"
    raise TypeError(f"no Flink SQL type for the Arrow type {dtype}")


def _nested(field: pa.Field) -> str:
    sql = arrow_to_flink_sql(field.type)
    return sql if field.nullable else f"{sql} NOT NULL"


def ddl_columns(schema: pa.Schema, indent: str = "  ") -> str:
    """The column list of a CREATE TABLE for `schema`: one `name TYPE` per line, comma-separated."""
    return ",\n".join(f"{indent}{quote_identifier(f.name)} {_nested(f)}" for f in schema)
