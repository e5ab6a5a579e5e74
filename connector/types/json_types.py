"""The JSON Schema type name of a value `json.loads` gave (one definition for the whole package)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["PRIMITIVE_TYPES", "declared_types", "json_type"]

PRIMITIVE_TYPES = ("string", "integer", "number", "boolean")


def json_type(value: Any) -> str:
    """ "null", "boolean", "integer", "number", "string", "array" or "object" (bool is not an integer here)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    return "object"


def declared_types(schema: Mapping[str, Any]) -> list[str]:
    """The types a JSON Schema node declares, "null" left out (`{"type": ["string", "null"]}` -> ["string"])."""
    declared = schema.get("type", [])
    return [t for t in (declared if isinstance(declared, list) else [declared]) if t != "null"]
