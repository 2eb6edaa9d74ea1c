"""One long-lived asyncio loop on a daemon thread, for calling async code from sync code.

`asyncio.run` per call would build and tear down a loop each time, which breaks clients that keep
connections (httpx, MCP sessions) bound to a loop. `LoopThread` keeps one loop alive; any thread
can submit coroutines to it with `run`. `shared_loop()` is the process-wide instance.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An event loop running forever on its own daemon thread, started on first use."""

    def __init__(self, name: str = "mcprl-loop") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, started if needed (also after `close`)."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(target=self._serve, args=(loop, ready), name=self.name, daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule `coro` on the loop and return a thread-safe future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and wait for its result; raises TimeoutError after `timeout` s."""
        if self._thread is not None and threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(
                f"LoopThread.run called from its own loop thread {self.name!r}; await the coroutine instead"
            )
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"coroutine did not finish within {timeout} s on {self.name!r}") from None

    def close(self, timeout: float = 5.0) -> None:
        """Cancel pending tasks, stop the loop and join the thread; a later use starts a new one."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        if thread is threading.current_thread():
            raise RuntimeError("LoopThread.close cannot be called from its own loop thread")
        try:
            asyncio.run_coroutine_threadsafe(_cancel_pending(), loop).result(timeout)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if not thread.is_alive():
            loop.close()

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()


async def _cancel_pending() -> None:
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


_shared: LoopThread | None = None
_shared_lock = threading.Lock()


def shared_loop() -> LoopThread:
    """The process-wide `LoopThread` (closed at interpreter exit)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = LoopThread("mcprl-shared-loop")
            atexit.register(_shared.close)
        return _shared
