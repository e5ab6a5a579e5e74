"""dspark-vllm: vLLM (OpenAI-compatible) responses as typed Arrow tables and Flink SQL streams.

>>> from connector import parse_batch
>>> parse_batch([b'{"id": "c1", "created": 0}'], backend="cpu").table.column("id").to_pylist()
['c1']

The names below are imported on first use (PEP 562): `import connector.cli` does not load pyarrow and
numpy, so the command line can start light and set up the process before they load.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from connector.errors import (
        BackendUnavailable,
        ClientError,
        DsparkError,
        OptionsError,
        ProfileError,
        SchemaDiscoveryError,
    )
    from connector.parse import ParseResult, parse_batch
    from connector.profiles import Profile, builtin_profiles, load_profile
    from connector.types.columns import output_schema

# Each public name and the module that defines it.
_WHERE = {
    "ParseResult": "connector.parse",
    "parse_batch": "connector.parse",
    "BackendUnavailable": "connector.errors",
    "ClientError": "connector.errors",
    "DsparkError": "connector.errors",
    "OptionsError": "connector.errors",
    "ProfileError": "connector.errors",
    "SchemaDiscoveryError": "connector.errors",
    "Profile": "connector.profiles",
    "builtin_profiles": "connector.profiles",
    "load_profile": "connector.profiles",
    "output_schema": "connector.types.columns",
}

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


def __getattr__(name: str) -> _typing.Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'connector' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
