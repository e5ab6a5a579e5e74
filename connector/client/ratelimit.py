"""A rate limit in requests per second: each request gets the next free slot, 1/rate apart."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

__all__ = ["RateLimiter"]


class RateLimiter:
    """Spaces starts 1/rate apart (no burst beyond one). Retries take slots too."""

    def __init__(
        self,
        rate: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0 requests/s, got {rate}")
        self.interval = 1.0 / rate
        self._clock = clock
        self._sleep = sleep
        self._next = float("-inf")

    async def acquire(self) -> float:
        """Wait for the next slot; returns the seconds waited."""
        now = self._clock()
        slot = max(now, self._next)
        self._next = slot + self.interval
        delay = slot - now
        if delay > 0:
            await self._sleep(delay)
        return delay
