"""The kinds of a failed request: the first word of its error row's reason ("kind: message").

Declared here once and generated into the jar (`connector.plan.contract` -> `PlanContract.ERROR_KINDS`), where
the JVM's request step (`io.dspark.vllm.request.Outcome`) gives each failed request one of them.
"""

from __future__ import annotations

__all__ = ["ERROR_KINDS"]

# "status": a non-2xx answer; "request": the payload itself cannot be sent; the others are also the kinds of
# `connector.errors.ClientError`, which discovery's transport raises.
ERROR_KINDS = ("timeout", "connect", "status", "stream", "tls", "protocol", "too-large", "request")
