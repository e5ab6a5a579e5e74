"""Arrow types of parsed columns -> PyFlink DataTypes and Flink SQL type text (pyflink)."""

from __future__ import annotations

import pyarrow as pa
from pyflink.table import DataTypes
from pyflink.table.types import DataType

__all__ = ["flink_sql", "flink_type"]


def flink_type(dtype: pa.DataType) -> DataType:
    """The DataType a vectorized function declares for an Arrow column (flat: primitives and arrays)."""
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return DataTypes.STRING()
    if pa.types.is_int64(dtype):
        return DataTypes.BIGINT()
    if pa.types.is_int32(dtype):
        return DataTypes.INT()
    if pa.types.is_floating(dtype):
        return DataTypes.DOUBLE()
    if pa.types.is_boolean(dtype):
        return DataTypes.BOOLEAN()
    if pa.types.is_timestamp(dtype):
        return DataTypes.TIMESTAMP(3)
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return DataTypes.BYTES()
    if pa.types.is_list(dtype):
        return DataTypes.ARRAY(flink_type(dtype.value_type))
    raise TypeError(f"no Flink type for the Arrow type {dtype}")


_SQL = {"STRING": "STRING", "BIGINT": "BIGINT", "INT": "INT", "DOUBLE": "DOUBLE", "BOOLEAN": "BOOLEAN"}


def flink_sql(dtype: pa.DataType) -> str:
    """The Flink SQL text of `flink_type(dtype)`, as the catalog writes it (`asSerializableString`)."""
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return "VARCHAR(2147483647)"
    if pa.types.is_int64(dtype):
        return "BIGINT"
    if pa.types.is_int32(dtype):
        return "INT"
    if pa.types.is_floating(dtype):
        return "DOUBLE"
    if pa.types.is_boolean(dtype):
        return "BOOLEAN"
    if pa.types.is_timestamp(dtype):
        return "TIMESTAMP(3)"
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return "VARBINARY(2147483647)"
    if pa.types.is_list(dtype):
        return f"ARRAY<{flink_sql(dtype.value_type)}>"
    raise TypeError(f"no Flink type for the Arrow type {dtype}")
