"""A private event loop in a daemon thread, on which a blocking client runs its asyncio calls.

Why: the Kubeflow SDK's client is synchronous, kubedl-py's machinery is asyncio. Running every call on a
loop of the client's own (rather than ``asyncio.run`` per call) keeps one connection pool for the client's
life and works where the caller already runs a loop (Jupyter). The loop and its connection pool are closed
by :meth:`LoopThread.close`, or when the client is garbage collected (the Kubeflow client has no ``close``,
so scripts never call one).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["LoopThread"]


class LoopThread:
    """An event loop running in a daemon thread; :meth:`run` hands it a coroutine and waits for the result."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    @property
    def closed(self) -> bool:
        return self.loop.is_closed()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """The coroutine's result; ``TimeoutError`` (the coroutine cancelled) after ``timeout`` seconds."""
        if self.loop.is_closed():
            coro.close()
            raise RuntimeError("the TrainingClient is closed")
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("a TrainingClient call cannot be made from its own callbacks' event loop")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError from None
        except BaseException:
            future.cancel()
            raise

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start the coroutine on the loop without waiting (cancel the future to cancel it)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self, cleanup: Callable[[], Coroutine[Any, Any, None]] | None = None) -> None:
        """Run ``cleanup`` (closing connections) on the loop, then stop the loop and its thread."""
        if self.loop.is_closed():
            return
        if cleanup is not None and self.thread.is_alive() and threading.current_thread() is not self.thread:
            # Best effort: the connections die with the loop anyway.
            with contextlib.suppress(Exception):
                self.submit(cleanup()).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self.thread:
            self.thread.join(10)
            if not self.thread.is_alive():
                self.loop.close()
