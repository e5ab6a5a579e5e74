"""The metadata columns of a 'dspark-vllm' table: the one registry (pure code).

    latency_ms DOUBLE METADATA FROM 'request.latency-ms' VIRTUAL,
    reason STRING METADATA FROM 'error.reason' VIRTUAL

Each key is read from an internal column of the table's pipeline (see `connector.plan`); the Java
factory lists these keys to Flink (`SupportsReadingMetadata`) from the plan, so this table is the only place
they are declared. `docs/flink.md` shows `metadata_markdown()`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["METADATA", "MetadataKey", "metadata_for", "metadata_markdown"]


@dataclass(frozen=True)
class MetadataKey:
    key: str
    column: str  # internal column of the pipeline
    type: str  # Flink SQL type
    modes: tuple[str, ...]
    description: str


METADATA: tuple[MetadataKey, ...] = (
    MetadataKey(
        "error.reason",
        "_error",
        "STRING",
        ("request", "replay"),
        "why this row is an error row (the body was rejected or the request failed); NULL for a parsed row",
    ),
    MetadataKey(
        "error.field", "_error_field", "STRING", ("request", "replay"), "the body field the error is about, if one"
    ),
    MetadataKey("raw.body", "_body", "BYTES", ("request", "replay"), "the raw response body, as received"),
    MetadataKey(
        "parse.backend", "_backend", "STRING", ("request", "replay"), "'gpu' or 'cpu': which backend parsed the row"
    ),
    MetadataKey("source.path", "_source", "STRING", ("replay",), "replay mode: the file the body came from"),
    MetadataKey(
        "source.line",
        "_line",
        "BIGINT",
        ("request", "replay"),
        "replay: the body's line in its file; request mode: the response's sequence number in its subtask",
    ),
    MetadataKey(
        "request.id",
        "_request_id",
        "STRING",
        ("request",),
        "the request id, deterministic: `<table>-<n>` for 'prompts.rate'; for 'prompts.path' the hex MD5 of "
        "`<file>\\n<line number>\\n<line>` (the file's absolute path, or its URI when not local; lines counted "
        "from 1), so two identical lines are two requests",
    ),
    MetadataKey("request.prompt", "_prompt", "STRING", ("request",), "the prompt sent"),
    MetadataKey(
        "request.http-status", "_http_status", "INT", ("request",), "HTTP status of the last attempt (NULL if none)"
    ),
    MetadataKey(
        "request.latency-ms",
        "_latency_ms",
        "DOUBLE",
        ("request",),
        "time from the first attempt's start to the last byte of the response, retries included",
    ),
    MetadataKey("request.attempts", "_attempts", "INT", ("request",), "attempts made (1 = no retry)"),
    MetadataKey(
        "request.received-at",
        "_received_ms",
        "TIMESTAMP_LTZ(3)",
        ("request",),
        "when the response's last byte was read (or the request gave up)",  # epoch ms, made TIMESTAMP_LTZ(3)
    ),
    MetadataKey(
        "request.error", "_request_error", "STRING", ("request",), "why the request failed (NULL when it got a body)"
    ),
    MetadataKey(
        "request.key",
        "_request_key",
        "STRING",
        ("request",),
        "the request's key in 'request.store' (hex SHA-256 of the endpoint, the body and the row: the request id, "
        "or a model's name and whole INPUT row); NULL for a prompt that could not be sent",
    ),
    MetadataKey(
        "request.cached",
        "_cached",
        "BOOLEAN",
        ("request",),
        "TRUE when the answer came from 'request.store' (a restore, or 'request.cache') and nothing was sent",
    ),
    MetadataKey(
        "request.replica",
        "_replica",
        "STRING",
        ("request",),
        "the replica that answered the last attempt: `host:port` of its URL in 'endpoint' (`host:port/path` where "
        "base URLs differ in their path only), `host:port/address` for one of the addresses a host name resolves "
        "to; NULL when none answered or the answer came from 'request.store'",
    ),
)


def metadata_for(mode: str) -> tuple[MetadataKey, ...]:
    """The keys a table in `mode` can read."""
    return tuple(m for m in METADATA if mode in m.modes)


def metadata_markdown() -> str:
    """The registry as Markdown: docs/flink.md holds it between `<!-- metadata:start -->` and `:end -->`."""
    lines = ["| Key | Type | Modes | What |", "|---|---|---|---|"]
    for m in METADATA:
        lines.append(f"| `{m.key}` | {m.type} | {', '.join(m.modes)} | {m.description} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys
    from pathlib import Path

    doc = Path(sys.argv[1])
    head, rest = doc.read_text(encoding="utf-8").split("<!-- metadata:start -->\n", 1)
    doc.write_text(
        head
        + "<!-- metadata:start -->\n"
        + metadata_markdown()
        + "<!-- metadata:end -->"
        + rest.split("<!-- metadata:end -->", 1)[1],
        encoding="utf-8",
    )
