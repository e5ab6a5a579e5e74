"""Which failures are retried and how long to wait: exponential backoff with jitter, or `Retry-After`."""

from __future__ import annotations

import email.utils
import random
import time

__all__ = ["RETRYABLE_STATUS", "backoff_delay", "parse_retry_after"]

# 429 (honouring Retry-After) and the statuses of an overloaded or restarting server or gateway. Not 500:
# vLLM answers 500 for requests that fail the same way every time.
RETRYABLE_STATUS = frozenset({429, 502, 503, 504})


def backoff_delay(attempt: int, initial_s: float, max_s: float, rng: random.Random) -> float:
    """Seconds to wait after failed attempt `attempt` (1-based): equal jitter over an exponential step."""
    step = min(max_s, initial_s * (2 ** (attempt - 1)))
    return step / 2 + rng.random() * step / 2


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """`Retry-After` in seconds: delta-seconds (a fraction is accepted) or an HTTP-date; None if invalid."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if seconds == seconds else None  # NaN -> None
