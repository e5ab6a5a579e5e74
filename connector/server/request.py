"""The request a table sends, written once: `ClientConfig` (the `request.*` options that shape a request) and
`prepare_request` (the body around a prompt). The planner (`connector.plan.contract`) renders the body the
JVM's request step (`io.dspark.vllm.request`) sends from these; discovery opens its transport with
`open_transport`. Sending, retries, the gate, Retry-After and rate limits are the JVM's alone.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from connector.errors import OptionsError
from connector.options import endpoint
from connector.params import body_defaults, check_params
from connector.profiles import Profile, load_profile
from connector.server.transport import Transport, tls_context

__all__ = ["USER_AGENT", "ClientConfig", "open_transport", "prepare_request", "response_format_of"]

USER_AGENT = "dspark-vllm/0.1"
MIB = 1024 * 1024
_BREAKS = frozenset("\r\n")


@dataclass(frozen=True)
class ClientConfig:
    """What shapes a request: the body (`model`, `params`, `structured_output`) and, for discovery's
    own few requests, the transport (TLS, headers, timeouts, body limit). The connector's `request.*` options
    map onto these; the JVM's request step has its own retry, gate and concurrency settings."""

    base_url: str
    api_key: str | None = field(default=None, repr=False)  # sent as a Bearer token; nothing is read implicitly
    model: str | None = None  # set on requests that name none
    timeout_s: float = 60.0  # deadline of one request of discovery's, first byte sent to last byte read
    connect_timeout_s: float = 10.0
    max_body_bytes: int = 32 * MIB  # a larger response is refused; its connection is closed
    verify: bool = True  # TLS verification; off only when asked
    ca_bundle: str | None = None  # PEM file of the CAs to trust (else certifi's); nothing from the environment
    client_cert: str | None = None  # PEM certificate shown to a server that asks for one
    client_key: str | None = None  # its private key, when not in the client_cert file
    structured_output: Profile | str | None = None  # send this profile's content schema as response_format
    params: Mapping[str, Any] = field(default_factory=dict)  # body defaults: n, temperature, ... (params.py)
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checks = [
            (self.timeout_s > 0, "timeout_s", "> 0"),
            (self.connect_timeout_s > 0, "connect_timeout_s", "> 0"),
            (self.max_body_bytes >= 1024, "max_body_bytes", "at least 1024"),
            (self.verify or self.ca_bundle is None, "ca_bundle", "unset when verify=False (nothing is verified)"),
            (self.client_key is None or self.client_cert is not None, "client_key", "given with client_cert"),
            (
                all(
                    isinstance(k, str) and isinstance(v, str) and not _BREAKS & set(k + v)
                    for k, v in self.headers.items()
                ),
                "headers",
                "strings without line breaks",
            ),
        ]
        for ok, name, rule in checks:
            if not ok:
                raise OptionsError(f"client option '{name}' must be {rule}")
        endpoint.checked_url(self.base_url, "client option 'base_url'", endpoint.CLI_KEYS)
        check_params(self.params)

    @property
    def root_url(self) -> str:
        """The server root: `base_url` without a trailing `/` or `/v1` (both spellings are accepted)."""
        return endpoint.root(self.base_url)


def open_transport(config: ClientConfig, connections: int = 1) -> Transport:
    """The transport a config asks for: TLS, headers (the API key only if the config has one), body limit."""
    headers = {"user-agent": USER_AGENT, **config.headers}
    if config.api_key:
        headers["authorization"] = f"Bearer {config.api_key}"
    tls: ssl.SSLContext | None = None
    if config.root_url.startswith("https://"):
        tls = tls_context(config.verify, config.ca_bundle, config.client_cert, config.client_key)
    return Transport(
        config.root_url,
        connections=connections,
        connect_timeout_s=config.connect_timeout_s,
        tls=tls,
        headers=headers,
        max_body_bytes=config.max_body_bytes,
    )


def response_format_of(config: ClientConfig) -> dict[str, Any] | None:
    """The `response_format` a config sends (its structured-output profile's content schema), or None."""
    if config.structured_output is None:
        return None
    profile = config.structured_output
    profile = profile if isinstance(profile, Profile) else load_profile(profile)
    response_format = profile.response_format()
    if response_format is None:
        raise OptionsError(f"profile {profile.name!r} has no content schema to send as response_format")
    return response_format


def prepare_request(
    config: ClientConfig,
    payload: Mapping[str, Any],
    defaults: Mapping[bool, Mapping[str, Any]] | None = None,
    response_format: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A request as sent (pure): the default model, parameters (`defaults` by chat-or-not, else made from
    `config.params`), and `response_format` filled in; the payload's own values win."""
    request = dict(payload)
    if config.model and not request.get("model"):
        request["model"] = config.model
    chat = "messages" in request
    chosen = defaults[chat] if defaults is not None else body_defaults(config.params, chat=chat)
    for name, value in chosen.items():
        # A payload that sets logprobs itself says what it wants of top_logprobs too.
        if name not in request and not (name == "top_logprobs" and "logprobs" in request):
            request[name] = value
    if response_format is not None and "response_format" not in request:
        request["response_format"] = response_format
    return request
