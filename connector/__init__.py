"""dspark-vllm: vLLM (OpenAI-compatible) responses as typed Arrow tables and Flink SQL streams.

>>> from connector import parse_batch
>>> parse_batch([b'{"id": "c1", "created": 0}'], backend="cpu").table.column("id").to_pylist()
['c1']
"""

from __future__ import annotations

from connector.decode import ParseResult, parse_batch
from connector.errors import (
    BackendUnavailable,
    ClientError,
    DsparkError,
    OptionsError,
    ProfileError,
    SchemaDiscoveryError,
)
from connector.profiles import Profile, builtin_profiles, load_profile
from connector.schema.columns import output_schema

__all__ = [
    "BackendUnavailable",
    "ClientError",
    "DsparkError",
    "OptionsError",
    "ParseResult",
    "Profile",
    "ProfileError",
    "SchemaDiscoveryError",
    "builtin_profiles",
    "load_profile",
    "output_schema",
    "parse_batch",
]
