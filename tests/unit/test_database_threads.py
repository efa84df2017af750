"""The event loop's database threads: each call settled with its own result
or exception, in its caller's context, as soon as it is done, and a busy
loop woken once for many results."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from resumable.queue.database_threads import DatabaseThreads, on_database_thread

_who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def _slow_square(n: int, gate: threading.Event) -> tuple[int, str, str]:
    gate.wait(5)
    return n * n, _who.get(), threading.current_thread().name


def test_calls_done_while_the_loop_is_busy_share_one_wake_up_in_their_callers_context() -> None:
    async def main() -> tuple[list[tuple[int, str, str]], DatabaseThreads]:
        threads = DatabaseThreads(asyncio.get_running_loop(), 2)
        gate = threading.Event()

        async def one(n: int) -> tuple[int, str, str]:
            _who.set(f"run {n}")
            return await on_database_thread(_slow_square, n, gate)

        tasks = [asyncio.create_task(one(n)) for n in range(200)]
        await asyncio.sleep(0.05)  # all queued while the first calls hold the threads
        gate.set()
        # The loop is busy while the threads run every call: their results wait
        # behind one request to settle them, not one wake-up each.
        time.sleep(0.5)
        results = await asyncio.gather(*tasks)
        threads.stop()
        return results, threads

    results, threads = asyncio.run(main())
    assert [r[0] for r in results] == [n * n for n in range(200)]
    assert [r[1] for r in results] == [f"run {n}" for n in range(200)]
    assert {r[2] for r in results} <= {"resumable-db-0", "resumable-db-1"}
    assert threads.calls == 200
    assert threads.batches <= 2  # not one hop per call


def test_an_exception_reaches_its_own_caller_only() -> None:
    def fails(n: int) -> int:
        if n == 3:
            raise ValueError("three")
        return n

    async def main() -> list[int | BaseException]:
        threads = DatabaseThreads(asyncio.get_running_loop(), 1)
        results = await asyncio.gather(
            *(on_database_thread(fails, n) for n in range(6)), return_exceptions=True
        )
        threads.stop()
        return results

    results = asyncio.run(main())
    assert [r for r in results if not isinstance(r, BaseException)] == [0, 1, 2, 4, 5]
    assert isinstance(results[3], ValueError)


def test_a_cancelled_caller_leaves_the_others_settled() -> None:
    async def main() -> list[int]:
        threads = DatabaseThreads(asyncio.get_running_loop(), 1)
        gate = threading.Event()
        first = asyncio.create_task(on_database_thread(lambda: gate.wait(5) and 1))
        cancelled = asyncio.create_task(on_database_thread(lambda: 2))
        last = asyncio.create_task(on_database_thread(lambda: 3))
        await asyncio.sleep(0.05)
        cancelled.cancel()
        gate.set()
        results = [await first, await last]
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        threads.stop()
        return results

    assert asyncio.run(main()) == [1, 3]


def test_without_database_threads_a_call_goes_to_a_plain_thread() -> None:
    async def main() -> str:
        return await on_database_thread(lambda: threading.current_thread().name)

    assert asyncio.run(main()) != threading.main_thread().name


def test_a_finished_call_is_not_held_back_behind_the_calls_queued_after_it() -> None:
    """One thread, a quick call queued before a slow one: the quick call's
    result reaches its caller while the slow one still runs."""

    async def main() -> bool:
        threads = DatabaseThreads(asyncio.get_running_loop(), 1)
        first, slow_gate = threading.Event(), threading.Event()
        blocker = asyncio.create_task(on_database_thread(lambda: first.wait(5)))
        quick = asyncio.create_task(on_database_thread(lambda: "quick"))
        slow = asyncio.create_task(on_database_thread(lambda: slow_gate.wait(5)))
        await asyncio.sleep(0.05)  # both queued behind the blocker
        first.set()
        try:
            assert await asyncio.wait_for(quick, timeout=2) == "quick"
            return not slow.done()
        finally:
            slow_gate.set()
            await asyncio.gather(blocker, slow)
            threads.stop()

    assert asyncio.run(main())


def test_a_stop_iteration_reaches_its_caller_as_a_runtime_error_and_the_batch_settles() -> None:
    """A future refuses StopIteration (TypeError): that one and every other
    call finished in the same batch stayed unsettled, their runs awaiting
    for ever (found by an audit)."""

    def call(n: int) -> int:
        if n == 2:
            raise StopIteration
        return n

    async def main() -> list[int | BaseException]:
        threads = DatabaseThreads(asyncio.get_running_loop(), 1)
        results = await asyncio.wait_for(
            asyncio.gather(
                *(on_database_thread(call, n) for n in range(5)), return_exceptions=True
            ),
            10,
        )
        threads.stop()
        return results

    results = asyncio.run(main())
    assert [r for r in results if not isinstance(r, BaseException)] == [0, 1, 3, 4]
    assert isinstance(results[2], RuntimeError)
    assert isinstance(results[2].__cause__, StopIteration)
