"""The exceptions of dspark-vllm.

    DsparkError
    ├── ProfileError          a profile file is missing or malformed (names the file and the key)
    ├── OptionsError          table options or CLI arguments are invalid (names the option and the fix)
    ├── BackendUnavailable    the asked-for parse backend cannot run here (says what to install or set)
    ├── SchemaDiscoveryError  the endpoint's schema could not be fetched or understood
    └── ClientError           a request to the inference server failed for good (after retries)

Errors in the *data* are never raised: a bad body becomes an error row (see `connector.decode`).
"""

from __future__ import annotations

__all__ = [
    "BackendUnavailable",
    "ClientError",
    "DsparkError",
    "OptionsError",
    "ProfileError",
    "SchemaDiscoveryError",
]


class DsparkError(Exception):
    """Base class of every exception this package raises on purpose."""


class ProfileError(DsparkError):
    """A model profile could not be loaded: the message names the file, the key and what was expected."""


class OptionsError(DsparkError):
    """Invalid connector options or command-line arguments."""


class BackendUnavailable(DsparkError):
    """The parse backend that was asked for cannot run on this machine."""


class SchemaDiscoveryError(DsparkError):
    """The schema of an endpoint could not be discovered."""


class ClientError(DsparkError):
    """A request to the inference server failed for good."""
