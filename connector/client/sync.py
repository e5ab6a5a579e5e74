"""Blocking use of `VllmClient` from code that has no event loop (pandas UDFs, scripts).

    >>> from connector.client import BlockingClient
    >>> with BlockingClient("http://127.0.0.1:8000", concurrency=64) as client:  # doctest: +SKIP
    ...     outcomes = client.send_all([{"prompt": "hi"}])

The client lives on an event loop in a background thread, so its keep-alive connections are reused from one
call to the next; calls from several threads are fine.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, TypeVar

from connector.client.client import VllmClient
from connector.client.outcome import Outcome

__all__ = ["BlockingClient", "run_blocking", "run_sync"]

T = TypeVar("T")


class BlockingClient:
    def __init__(self, base_url: str | None = None, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="dspark-vllm-client", daemon=True)
        self._thread.start()

        async def make() -> VllmClient:
            return VllmClient(base_url, **options)

        try:
            self.client = asyncio.run_coroutine_threadsafe(make(), self._loop).result()
        except BaseException:
            self._stop()
            raise

    def send(self, payload: Mapping[str, Any], request_id: str | None = None) -> Outcome:
        return asyncio.run_coroutine_threadsafe(self.client.send(payload, request_id=request_id), self._loop).result()

    def send_all(self, payloads: Iterable[Mapping[str, Any]]) -> list[Outcome]:
        """One outcome per request, in the order given."""
        return asyncio.run_coroutine_threadsafe(self.client.send_all(payloads), self._loop).result()

    def close(self) -> None:
        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self.client.aclose(), self._loop).result()
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def run_sync(base_url: str, payloads: Iterable[Mapping[str, Any]], **options: Any) -> list[Outcome]:
    """Send `payloads` with a client made for this one call; one outcome per request, in order."""
    with BlockingClient(base_url, **options) as client:
        return client.send_all(payloads)


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to its end on a new event loop, in this thread, or in a helper thread when this thread
    already runs a loop (a notebook, an async caller of a blocking API)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        in_loop = False
    else:
        in_loop = True
    if not in_loop:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1, thread_name_prefix="dspark-vllm-blocking") as pool:
        return pool.submit(asyncio.run, coro).result()
