"""What the command line and the planner need of vLLM's OpenAI-compatible API: the request body a table
sends (`ClientConfig`, `prepare_request`), the error kinds (`ERROR_KINDS`), and the transport discovery
(`dspark-vllm schema`) reads an endpoint with. The one engine that sends prompts is the JVM's request step
(`io.dspark.vllm.request`), which every Flink job uses; docs/client-and-simulator.md says what replaces the
Python client that was here.
"""

from __future__ import annotations

from connector.client.outcome import ERROR_KINDS
from connector.client.request import USER_AGENT, ClientConfig, open_transport, prepare_request, response_format_of
from connector.client.transport import Transport, tls_context
from connector.params import REQUEST_PARAMS, RequestParam

__all__ = [
    "ERROR_KINDS",
    "REQUEST_PARAMS",
    "USER_AGENT",
    "ClientConfig",
    "RequestParam",
    "Transport",
    "open_transport",
    "prepare_request",
    "response_format_of",
    "tls_context",
]
