"""parse_batch: the one entry point of the deserializer (implementation in progress)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from connector.profiles import Profile

__all__ = ["ParseResult", "parse_batch"]


@dataclass
class ParseResult:
    """Rows parsed from a batch, and one error row for every body that could not be parsed.

    `table` has the schema `connector.schema.columns.output_schema(profile)` (first column `line`: the
    1-based position of the body in the input). `errors` has columns line (int64), reason (string),
    field (string, null when not about one field) and body (binary, the raw body).
    `backend` is the backend that parsed the batch ("cpu" or "gpu"); `fallback_reason` says why "auto"
    did not use the GPU.
    """

    table: pa.Table
    errors: pa.Table
    backend: str
    fallback_reason: str | None = None
    stats: dict[str, float] = field(default_factory=dict)


def parse_batch(
    bodies: Sequence[bytes | str],
    profile: Profile | str = "openai",
    backend: str = "auto",
    first_line: int = 1,
) -> ParseResult:
    raise NotImplementedError
