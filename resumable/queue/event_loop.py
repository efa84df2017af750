"""One asyncio event loop per worker process, on a thread of its own.

Async steps, tools, checks and compensations are awaited here. The loop never
runs blocking work itself: every database write (tool-call claims, step
commits, retries) is handed to a few database threads of its own
(``database_threads.py``); sync steps met by a run on the loop, and the
failure handling that may run compensations, go to a second pool, so neither
a slow sync step nor a saga can take the database threads away. The loop's
default executor (what ``asyncio.to_thread`` in agent code uses) is neither.

A blocking call inside an ``async def`` step (``time.sleep``, ``requests``)
would stall every other session on the loop. A watchdog thread notices a loop
that has not ticked for ``RESUMABLE_LOOP_LAG_WARNING_SECONDS`` and logs which
step is holding it; leases are renewed by the lease keeper's own thread, so a
stalled loop does not cost the other sessions their leases.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from resumable.queue.database_threads import DatabaseThreads

logger = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")

# How often the loop says it is alive (the watchdog's resolution).
_TICK_SECONDS = 0.1


class EventLoopThread:
    """The worker's event loop, started on first use and stopped with the worker."""

    def __init__(
        self,
        *,
        db_threads: int,
        step_threads: int,
        lag_warning_seconds: float = 1.0,
        describe_task: Callable[[asyncio.Task[Any]], str | None] = lambda task: None,
    ) -> None:
        self._db_threads = db_threads
        self._step_threads = step_threads
        self._lag_warning = lag_warning_seconds
        self._describe_task = describe_task
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._steps: concurrent.futures.ThreadPoolExecutor | None = None
        self._database: DatabaseThreads | None = None
        self._last_tick = time.monotonic()
        self._stop = threading.Event()
        #: Times the watchdog found the loop blocked (for tests and metrics).
        self.stalls = 0

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (started now if it was not)."""
        with self._lock:
            if self._loop is None:
                self._start()
            assert self._loop is not None
            return self._loop

    def _start(self) -> None:
        loop = asyncio.new_event_loop()
        self._database = DatabaseThreads(loop, self._db_threads)
        self._steps = concurrent.futures.ThreadPoolExecutor(
            self._step_threads, thread_name_prefix="resumable-sync-step"
        )
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.call_soon(self._tick, loop)
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="resumable-event-loop", daemon=True)
        self._thread.start()
        ready.wait()
        self._loop = loop
        threading.Thread(target=self._watch, name="resumable-loop-watchdog", daemon=True).start()

    @property
    def started(self) -> bool:
        return self._loop is not None

    @property
    def thread(self) -> threading.Thread | None:
        """The loop's thread once started (a vital: see ``vitals.py``)."""
        return self._thread

    def on_loop(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run `coro` as a task on the loop; the calling thread's context
        (its log context) goes with it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def wait(self, awaitable: Awaitable[T]) -> T:
        """Await `awaitable` on the loop and block this (non-loop) thread for
        its result: how a sync caller (a poll check, a compensation) runs an
        async function."""
        if self.on_loop():
            raise RuntimeError("EventLoopThread.wait called on the loop itself")

        async def await_it() -> T:
            return await awaitable

        return self.submit(await_it()).result()

    async def in_step_thread(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a sync step from a run on the loop, on the sync-step threads,
        in the caller's context (log context, session)."""
        assert self._steps is not None
        context = contextvars.copy_context()
        call = functools.partial(context.run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._steps, call)

    @property
    def database(self) -> DatabaseThreads:
        """The loop's database threads (the loop is started if it was not)."""
        self.loop  # noqa: B018 (starts it)
        assert self._database is not None
        return self._database

    # -- the watchdog -----------------------------------------------------------------

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self._last_tick = time.monotonic()
        if not self._stop.is_set():
            loop.call_later(_TICK_SECONDS, self._tick, loop)

    def _watch(self) -> None:
        reported = 0.0
        while not self._stop.wait(_TICK_SECONDS):
            lag = time.monotonic() - self._last_tick
            if lag < self._lag_warning:
                reported = 0.0
                continue
            if reported and lag < reported * 2:
                continue  # said already; say it again when it doubles
            reported = lag
            self.stalls += 1
            loop = self._loop
            task = asyncio.current_task(loop) if loop is not None else None
            what = (self._describe_task(task) if task is not None else None) or "unknown code"
            logger.warning(
                "the event loop has been blocked for %.1f s by %s: a blocking call inside "
                "an async step stalls every async session of this worker (use an async "
                "client or asyncio.to_thread)",
                lag,
                what,
                extra={"action": "event_loop_blocked", "blocked_by": what},
            )

    # -- stopping ---------------------------------------------------------------------

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel what is still on the loop and stop it (the worker is exiting)."""
        self._stop.set()
        loop = self._loop
        if loop is None or self._thread is None:
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=timeout) if tasks else None

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout + 1)
        except Exception:
            logger.warning("tasks still on the event loop at exit", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout)
        if self._steps is not None:
            self._steps.shutdown(wait=False, cancel_futures=True)
        if self._database is not None:
            self._database.stop(timeout)
        if not self._thread.is_alive():
            loop.close()


def resolve(value: Any, loop: EventLoopThread | None) -> Any:
    """`value`, or, if a sync caller got an awaitable (an async check or
    compensation called from a worker thread), its result, awaited on the
    worker's loop (or on a loop of its own when there is none)."""
    if not inspect.isawaitable(value):
        return value

    async def await_it() -> Any:
        return await value

    if loop is not None:
        return loop.wait(value)
    return asyncio.run(await_it())
