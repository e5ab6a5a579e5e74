"""What we ask of and learn from the inference server (vLLM's OpenAI-compatible API): the request body a table
sends (`ClientConfig`, `prepare_request`), the kinds of a failed request (`ERROR_KINDS`), discovery (which
columns an endpoint's answers give, `connector.server.discovery`) and the transport discovery reads an endpoint
with. Prompts are sent by the JVM's request step (`io.dspark.vllm.request`), which every Flink job uses.
"""

from __future__ import annotations

from connector.params import REQUEST_PARAMS, RequestParam
from connector.server.outcome import ERROR_KINDS
from connector.server.request import USER_AGENT, ClientConfig, open_transport, prepare_request, response_format_of
from connector.server.transport import Transport, tls_context

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
