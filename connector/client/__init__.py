"""The client side: vLLM's OpenAI-compatible API -> raw response bytes plus request facts (`Outcome`)."""

from __future__ import annotations

from connector.client.client import API_KEY_ENV, ClientConfig, VllmClient, endpoint_for
from connector.client.outcome import Outcome
from connector.client.ratelimit import RateLimiter
from connector.client.retry import RETRYABLE_STATUS, backoff_delay, parse_retry_after
from connector.client.sse import StreamAssembler, StreamError
from connector.client.sync import BlockingClient, run_sync

__all__ = [
    "API_KEY_ENV",
    "RETRYABLE_STATUS",
    "BlockingClient",
    "ClientConfig",
    "Outcome",
    "RateLimiter",
    "StreamAssembler",
    "StreamError",
    "VllmClient",
    "backoff_delay",
    "endpoint_for",
    "parse_retry_after",
    "run_sync",
]
