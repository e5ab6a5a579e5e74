"""The deserializer: batches of raw vLLM response bodies -> typed Arrow tables (see `parse_batch`)."""

from __future__ import annotations

from connector.parse.batch import ParseResult, parse_batch

__all__ = ["ParseResult", "parse_batch"]
