"""A declared column's layout: which flat columns of the profile it reads and how the JVM makes it of them
(`io.dspark.vllm.engine.RowShape`), and which declared types a flat column may be cast to (those whose CAST cannot
fail at run time). Shared by the table, model and format plans."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from connector.errors import OptionsError
from connector.plan.records import (
    Layout,
    RowField,
)

__all__ = ["check_cast", "column_layout", "refuse_not_null", "sql_root"]


def _same_type(declared: str, produced: str) -> bool:
    """Whether a declared type (as Flink writes it: `ARRAY<VARCHAR(2147483647)>`) is a flat column's type (as
    the planner writes it: `ARRAY<STRING>`)."""

    def canonical(sql: str) -> str:
        return sql.replace("VARCHAR(2147483647)", "STRING").replace("VARBINARY(2147483647)", "BYTES")

    return canonical(declared.removesuffix(" NOT NULL")) == canonical(produced)


# The declared types a flat column may be cast to, by the flat column's type: those whose CAST cannot fail at
# run time. Text to a number, a boolean or a time fails on the first value that is not one (`id INT` over
# 'cmpl-0' fails the job), and a number to BOOLEAN is TRUE for any but 0 (a token count read as TRUE).
_NUMBERS = ("BIGINT", "INTEGER", "SMALLINT", "TINYINT", "DOUBLE", "FLOAT", "DECIMAL")
_TEXT = ("VARCHAR", "CHAR")
_TABLE_CASTS = {
    "STRING": _TEXT,
    "BIGINT": _NUMBERS + _TEXT,
    "DOUBLE": _NUMBERS + _TEXT,
    "BOOLEAN": ("BOOLEAN", *_TEXT),
    "TIMESTAMP(3)": (
        "TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE", "DATE", "TIME_WITHOUT_TIME_ZONE", *_TEXT
    ),
}  # fmt: skip
# Flink's serializable type names (`LogicalType.asSerializableString`) and their type roots, for array elements.
_SQL_ROOTS = {
    "STRING": "VARCHAR", "BYTES": "VARBINARY", "INT": "INTEGER", "TIMESTAMP": "TIMESTAMP_WITHOUT_TIME_ZONE",
    "TIMESTAMP_LTZ": "TIMESTAMP_WITH_LOCAL_TIME_ZONE", "TIME": "TIME_WITHOUT_TIME_ZONE",
}  # fmt: skip


def sql_root(sql: str) -> str:
    """The type root of a type as Flink writes it: `VARCHAR(2147483647)` VARCHAR, `INT` INTEGER."""
    if " WITH LOCAL TIME ZONE" in sql:
        return "TIMESTAMP_WITH_LOCAL_TIME_ZONE"
    name = re.split(r"[(<\s]", sql.strip(), maxsplit=1)[0].upper()
    return _SQL_ROOTS.get(name, name)


def _castable(flat_type: str, declared: str, root: str) -> bool:
    """Whether a flat column of `flat_type` cast to the declared type (`declared`, of type root `root`) cannot
    fail at run time (`_TABLE_CASTS`); an array's elements by the same rule."""
    if flat_type.startswith("ARRAY<"):
        if root in _TEXT:
            return True
        if root != "ARRAY" or not declared.startswith("ARRAY<"):
            return False
        element = declared.removeprefix("ARRAY<").removesuffix(" NOT NULL").removesuffix(">")
        inner = flat_type.removeprefix("ARRAY<").removesuffix(">")
        return _castable(inner, element, sql_root(element))
    return root in _TABLE_CASTS.get(flat_type, (root,))


def refuse_not_null(ftype: Mapping[str, Any], where: str) -> None:
    """Refuses a declared column (or ROW field) at `where` that is NOT NULL or holds a NOT NULL element, naming it:
    an error row (a body that cannot be read, a failed request) has no value for it, and Flink's not-null enforcer
    would fail the job on the first one."""
    declared = str(ftype["sql"])
    if declared.endswith(" NOT NULL"):
        raise OptionsError(
            f"Column '{where}' is declared NOT NULL, but an error row (a body that cannot be read, a failed "
            "request) has no value for it: declare it nullable (a PRIMARY KEY makes its columns NOT NULL: declare "
            "the key on the sink), and filter on 'error.reason' IS NULL where a query needs values."
        )
    if ftype.get("root") == "ROW":
        for field in ftype.get("fields", []):
            refuse_not_null(field["type"], f"{where}.{field['name']}")
    elif " NOT NULL" in declared:
        shown = declared.replace("VARCHAR(2147483647)", "STRING")
        raise OptionsError(
            f"Column '{where}' is {shown}, with a NOT NULL inside, but an error row (a body that cannot be read, a "
            "failed request) or a value the body lacks has none there: drop the NOT NULL inside it."
        )


def column_layout(name: str, ftype: Mapping[str, Any], flat: Mapping[str, str], where: str) -> tuple[list[str], Layout]:
    """The flat columns a declared column (or ROW field) reads, and its layout (`column`, cast to the declared
    type by the parse step, `io.dspark.vllm.engine.Casts`, or `row`: its fields' layouts)."""
    refuse_not_null(ftype, where)
    if ftype.get("root") == "ROW":
        needs: list[str] = []
        fields: list[RowField] = []
        for field in ftype.get("fields", []):
            part_needs, layout = column_layout(field["name"], field["type"], flat, f"{where}.{field['name']}")
            needs += part_needs
            fields.append(RowField(name=field["name"], from_=layout))
        return needs, Layout(row=tuple(fields))
    if name not in flat:
        known = ", ".join(sorted(flat))
        raise OptionsError(
            f"Column '{where}' is not produced by this profile; declare one of: {known} "
            "(or a ROW whose fields are among them), or a METADATA column."
        )
    check_cast(flat[name], ftype, where)
    return [name], Layout(column=name)


def check_cast(flat_type: str, ftype: Mapping[str, Any], where: str) -> bool:
    """Whether a column the profile makes as `flat_type` is declared as that type (True) or as one the parse step
    casts it to (False, `io.dspark.vllm.engine.Casts`); raises where the cast could fail or mislead."""
    sql_type = str(ftype["sql"]).removesuffix(" NOT NULL")
    root = str(ftype.get("root") or sql_root(sql_type))
    same = _same_type(sql_type, flat_type)
    if not _castable(flat_type, sql_type, root) or (flat_type.startswith("MAP<") and not same):
        text = "" if flat_type == "STRING" or flat_type.startswith("MAP<") else " (or STRING)"
        raise OptionsError(
            f"Column '{where}' is {flat_type} in this profile; declared {sql_type}, its CAST would fail or mislead "
            f"at run time: declare it {flat_type}{text}."
        )
    return same
