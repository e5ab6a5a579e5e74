"""Back-pressure while the server is down: a gate that holds attempts back instead of letting each request
spend its retries on a server that is restarting.

An attempt that cannot connect (or gets 502/503 from a gateway in front of the server) closes the gate; from
then on attempts wait at the gate, and one probe (`GET /health`) is sent after each backoff step. The gate
opens when a probe or any attempt reaches the server again. A request waits no longer than its own deadline.

The backoff step goes back to the first only when an attempt reaches the server (`open`), not when a probe
does: a gateway that answers `/health` but 503 to every completion would otherwise close the gate after each
attempt and have it reopened by the first, shortest, probe every time. Such a gate reopens after longer and
longer steps (up to `max_s`) until an attempt gets through.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable

from connector.client.retry import backoff_delay
from connector.errors import ClientError

__all__ = ["Gate"]

logger = logging.getLogger("connector.client")


class Gate:
    def __init__(
        self,
        probe: Callable[[], Awaitable[bool]],
        initial_s: float,
        max_s: float,
        rng: random.Random,
    ) -> None:
        self._probe = probe
        self._initial_s = initial_s
        self._max_s = max_s
        self._rng = rng
        self._opened = asyncio.Event()
        self._opened.set()
        self._prober: asyncio.Task[None] | None = None
        self.closed_at: float | None = None
        self.reason: ClientError | None = None  # what closed it
        self.probes = 0
        self._step = 0  # backoff steps since an attempt last reached the server

    @property
    def is_open(self) -> bool:
        return self._opened.is_set()

    def close(self, reason: ClientError) -> None:
        self.reason = reason
        if not self.is_open:
            return
        self._opened.clear()
        self.closed_at = time.monotonic()
        logger.warning("the server looks down (%s): holding requests back until it answers again", reason)
        self._prober = asyncio.get_running_loop().create_task(self._probe_until_open())

    def open(self) -> None:
        """An attempt reached the server: open the gate, and the next outage starts from the first step."""
        self._step = 0
        self._open()

    def _open(self) -> None:
        if self.is_open:
            return
        self._opened.set()
        down = time.monotonic() - (self.closed_at or time.monotonic())
        logger.warning("the server answers again after %.1f s: requests go on", down)

    async def wait(self, timeout_s: float) -> bool:
        """Wait until the gate is open, at most `timeout_s`; False if it stayed closed."""
        if self.is_open:
            return True
        if timeout_s <= 0:
            return False
        try:
            async with asyncio.timeout(timeout_s):
                await self._opened.wait()
        except TimeoutError:
            return False
        return True

    async def _probe_until_open(self) -> None:
        while not self.is_open:
            self._step += 1
            await asyncio.sleep(backoff_delay(self._step, self._initial_s, self._max_s, self._rng))
            if self.is_open:
                return
            self.probes += 1
            try:
                answered = await self._probe()
            except Exception:  # a bug in a probe must not end the probing: the gate would stay closed for good
                logger.exception("probing the server failed unexpectedly; probing again after the next step")
                answered = False
            if answered:
                self._open()  # (the step is kept: see the module's docstring)

    async def aclose(self) -> None:
        if self._prober is not None and not self._prober.done():
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prober
