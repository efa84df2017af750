"""The worker's event loop has one long-lived task, which anyio takes for the
loop's root: sync code that frameworks hand to ``anyio.to_thread`` from one
session's task after another runs on the same kept thread, not on a new
thread per call, and stopping the loop still ends it cleanly."""

from __future__ import annotations

import asyncio
import threading

import anyio.to_thread

from resumable.queue.event_loop import EventLoopThread


def _thread_of_a_sync_call_from_a_new_task(loop: EventLoopThread) -> int:
    """Like one session's step: a task of its own, one sync call, then done.
    The thread's kernel id (a pthread id is reused by the next thread)."""

    async def step() -> int:
        return await anyio.to_thread.run_sync(threading.get_native_id)

    return asyncio.run_coroutine_threadsafe(step(), loop.loop).result(10)


def test_sync_calls_from_short_lived_tasks_share_anyios_kept_threads() -> None:
    loop = EventLoopThread(db_threads=1, step_threads=1)
    try:
        threads = {_thread_of_a_sync_call_from_a_new_task(loop) for _ in range(20)}
        # Without a root task each call's thread was stopped with its task,
        # and the next call started another: 20 threads for 20 calls.
        assert len(threads) == 1
        assert threads != {threading.get_native_id()}
    finally:
        loop.stop()


def test_stop_cancels_the_sessions_tasks_and_ends_the_loop() -> None:
    loop = EventLoopThread(db_threads=1, step_threads=1)
    cancelled = threading.Event()

    async def waits_forever() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    asyncio.run_coroutine_threadsafe(waits_forever(), loop.loop)
    loop.stop(timeout=5)
    assert cancelled.wait(5)
    assert not any(
        thread.name == "resumable-event-loop" and thread.is_alive()
        for thread in threading.enumerate()
    )
