"""Tables declared with 'connector' = 'dspark-vllm': find them in the catalog and read them back (pyflink).

Flink stores a table whose connector it does not know; the factory is looked up only when the table is
read. So a declared table's schema and options can be read back from the catalog manager (temporary tables
included) and the table replaced, under the same name, by our pipeline (see `connector.flink.register`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyflink.java_gateway import get_gateway
from pyflink.table import TableEnvironment

__all__ = ["DeclaredColumn", "DeclaredTable", "FieldType", "declared_tables", "quote"]


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class FieldType:
    """A declared Flink type: its SQL text and, for ROW, its fields."""

    sql: str
    root: str  # Flink LogicalTypeRoot name: VARCHAR, BIGINT, ROW, ARRAY, TIMESTAMP_WITHOUT_TIME_ZONE ...
    fields: tuple[tuple[str, FieldType], ...] = ()
    nullable: bool = True

    @property
    def is_row(self) -> bool:
        return self.root == "ROW"

    @property
    def nullable_sql(self) -> str:
        return self.sql[: -len(" NOT NULL")] if self.sql.endswith(" NOT NULL") else self.sql


@dataclass(frozen=True)
class DeclaredColumn:
    name: str
    type: FieldType
    kind: str  # physical | metadata | computed
    metadata_key: str | None = None
    expression: str | None = None


@dataclass(frozen=True)
class DeclaredTable:
    catalog: str
    database: str
    name: str
    temporary: bool
    options: dict[str, str]
    columns: tuple[DeclaredColumn, ...]
    watermark: tuple[str, str] | None = None  # (rowtime column, SQL expression)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return ".".join(quote(p) for p in (self.catalog, self.database, self.name))


def _field_type(logical: Any) -> FieldType:
    root = logical.getTypeRoot().name()
    fields: tuple[tuple[str, FieldType], ...] = ()
    if root == "ROW":
        fields = tuple((f.getName(), _field_type(f.getType())) for f in logical.getFields())
    return FieldType(sql=logical.asSerializableString(), root=root, fields=fields, nullable=bool(logical.isNullable()))


def _read(resolved: Any, catalog: str, database: str, name: str, temporary: bool) -> DeclaredTable:
    schema = resolved.getResolvedSchema()
    columns = []
    for column in schema.getColumns():
        kind = column.getClass().getSimpleName()
        logical = column.getDataType().getLogicalType()
        if kind == "MetadataColumn":
            key = column.getMetadataKey()
            columns.append(
                DeclaredColumn(
                    column.getName(),
                    _field_type(logical),
                    "metadata",
                    metadata_key=key.get() if key.isPresent() else column.getName(),
                )
            )
        elif kind == "ComputedColumn":
            columns.append(
                DeclaredColumn(
                    column.getName(),
                    _field_type(logical),
                    "computed",
                    expression=column.getExpression().asSerializableString(),
                )
            )
        else:
            columns.append(DeclaredColumn(column.getName(), _field_type(logical), "physical"))
    watermark = None
    specs = list(schema.getWatermarkSpecs())
    if specs:
        spec = specs[0]
        watermark = (spec.getRowtimeAttribute(), spec.getWatermarkExpression().asSerializableString())
    return DeclaredTable(
        catalog=catalog,
        database=database,
        name=name,
        temporary=temporary,
        options={str(k): str(v) for k, v in dict(resolved.getOptions()).items()},
        columns=tuple(columns),
        watermark=watermark,
    )


def declared_tables(t_env: TableEnvironment, connector: str) -> Iterator[DeclaredTable]:
    """Tables of the current catalog and database whose 'connector' option is `connector`.

    Views (ours included: a table we replaced is shadowed by a temporary view) are skipped.
    """
    jvm = get_gateway().jvm
    manager = t_env._j_tenv.getCatalogManager()
    catalog = t_env.get_current_catalog()
    database = t_env.get_current_database()
    for name in t_env.list_tables():
        identifier = jvm.org.apache.flink.table.catalog.ObjectIdentifier.of(catalog, database, name)
        found = manager.getTable(identifier)
        if not found.isPresent():
            continue
        context = found.get()
        resolved = context.getResolvedTable()
        if resolved.getTableKind().name() != "TABLE":
            continue
        options = resolved.getOptions()
        if options.get("connector") != connector:
            continue
        yield _read(resolved, catalog, database, name, bool(context.isTemporary()))
