"""The client side: vLLM's OpenAI-compatible API -> raw response bytes plus request facts (`Outcome`)."""

from __future__ import annotations

from connector.client.client import ClientConfig, VllmClient, endpoint_for, open_transport
from connector.client.gate import Gate
from connector.client.outcome import ERROR_KINDS, Outcome
from connector.client.ratelimit import RateLimiter
from connector.client.retry import RETRYABLE_STATUS, backoff_delay, parse_retry_after
from connector.client.sse import StreamAssembler
from connector.client.sync import BlockingClient, run_blocking, run_sync
from connector.client.transport import Transport, tls_context
from connector.params import REQUEST_PARAMS, RequestParam

__all__ = [
    "ERROR_KINDS",
    "REQUEST_PARAMS",
    "RETRYABLE_STATUS",
    "BlockingClient",
    "ClientConfig",
    "Gate",
    "Outcome",
    "RateLimiter",
    "RequestParam",
    "StreamAssembler",
    "Transport",
    "VllmClient",
    "backoff_delay",
    "endpoint_for",
    "open_transport",
    "parse_retry_after",
    "run_blocking",
    "run_sync",
    "tls_context",
]
