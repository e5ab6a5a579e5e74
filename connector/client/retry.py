"""Which failures are retried and how long to wait: exponential backoff with jitter, or `Retry-After`."""

from __future__ import annotations

import email.utils
import math
import random
import time

__all__ = ["RETRYABLE_STATUS", "backoff_delay", "parse_retry_after", "retry_delay"]

# 429 (honouring Retry-After), the statuses of an overloaded or restarting server or gateway, and 408: a server
# that closed a kept-alive connection as the request went out on it answers 408 to a request it never read
# (HTTP lets a client repeat it). Not 500: vLLM answers 500 for requests that fail the same way every time.
RETRYABLE_STATUS = frozenset({408, 429, 502, 503, 504})

# 2.0 ** 62 times any backoff_initial_s passes any backoff_max_s: the step stops growing there, and a count
# of attempts (or of the gate's probes over a long outage) never overflows a float.
_MAX_EXPONENT = 62


def backoff_delay(attempt: int, initial_s: float, max_s: float, rng: random.Random) -> float:
    """Seconds to wait after failed attempt `attempt` (1-based): equal jitter over an exponential step."""
    step = min(max_s, initial_s * 2.0 ** min(max(attempt - 1, 0), _MAX_EXPONENT))
    return step / 2 + rng.random() * step / 2


def retry_delay(
    attempt: int,
    retry_after: float | None,
    initial_s: float,
    max_s: float,
    max_retry_after_s: float,
    rng: random.Random,
) -> float:
    """Seconds to wait after failed attempt `attempt`: the backoff, or the server's `Retry-After` (cut to
    `max_retry_after_s`) when that is longer. Never less than the backoff: a `Retry-After` of 0, negative or in
    the past (and a tiny one sent again and again) cannot make the retries a storm."""
    delay = backoff_delay(attempt, initial_s, max_s, rng)
    if retry_after is not None:
        delay = max(delay, min(retry_after, max_retry_after_s))
    return delay


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """`Retry-After` in seconds: delta-seconds (a fraction is accepted) or an HTTP-date; None if invalid.
    Never raises (a date beyond the calendar, an offset of any size: None); 0.0 for a time in the past."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
            seconds = when.timestamp() - (time.time() if now is None else now)
        except (TypeError, ValueError, OverflowError, OSError, IndexError):
            return None
    if math.isnan(seconds):
        return None
    return max(0.0, seconds)
