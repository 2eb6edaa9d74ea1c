"""The background event-loop thread used by sync callers of async code."""

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from mcprl.aio import LoopThread, shared_loop


async def loop_identity(delay=0.0):
    await asyncio.sleep(delay)
    return id(asyncio.get_running_loop()), threading.current_thread().name


def test_runs_coroutines_on_one_loop_from_many_threads():
    runner = LoopThread("test-loop")
    try:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda _: runner.run(loop_identity(0.01)), range(32)))
        assert len(set(results)) == 1
        assert results[0][1] == "test-loop"
    finally:
        runner.close()


def test_errors_propagate_and_timeouts_cancel():
    runner = LoopThread()
    cancelled = threading.Event()

    async def boom():
        raise KeyError("x")

    async def slow():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    try:
        with pytest.raises(KeyError):
            runner.run(boom())
        with pytest.raises(TimeoutError):
            runner.run(slow(), timeout=0.05)
        assert cancelled.wait(2)
    finally:
        runner.close()


def test_close_stops_the_thread_and_a_later_run_restarts_it():
    runner = LoopThread()
    runner.run(loop_identity())
    thread = runner._thread
    runner.close()
    assert not thread.is_alive()
    assert runner.run(loop_identity())[1] == runner.name
    assert runner._thread is not thread and runner._thread.is_alive()
    runner.close()


def test_run_from_the_loop_thread_is_refused():
    runner = LoopThread()

    async def nested():
        inner = loop_identity()
        with pytest.raises(RuntimeError, match="own loop thread"):
            runner.run(inner)
        return True

    try:
        assert runner.run(nested())
    finally:
        runner.close()


def test_shared_loop_is_a_singleton():
    assert shared_loop() is shared_loop()
    assert shared_loop().run(loop_identity())[1] == "mcprl-shared-loop"
