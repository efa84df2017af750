"""The event loop's database threads: short synchronous writes, settled with few wake-ups.

Every database write of a run on the event loop (a tool call's claim and
record, a step's commit, a retry, a hand-back) is one of the fenced
statements the worker threads make, run on a thread so the loop never waits
on PostgreSQL. ``asyncio.to_thread`` does that one call at a time: a work
item, a ``concurrent.futures`` future chained to an asyncio one, a thread
woken through a condition and a write to the loop's self-pipe for each call.
With hundreds of runs in flight those hops cost as much CPU as the writes.

Here a run appends its call to one queue and awaits a plain asyncio future.
Each thread takes the next call, runs it and puts its result on a shared
list of finished calls; whoever finds that list empty asks the loop, with
one ``call_soon_threadsafe``, to settle everything on it. While the loop is
busy, results gather behind that one request, so a loaded loop is woken far
less than once a call; an idle one learns of each result at once. A call is
never held back behind other calls: an earlier design handed each thread a
batch of up to 64 calls and settled them together, and with 500 runs in
flight a commit waited behind the batch's other statements (p90 140 ms per
hop, three hops a step). Each call is still its own transaction (its own
fenced statement, committed before its future is settled): this saves hops,
and never merges two sessions' writes.

These threads are not the loop's default executor. ``asyncio.to_thread`` in
agent code (an async compensation, a check) runs on the default executor, so
agent code can never take the threads that our writes, and so the sagas
waiting on that code, need (see ``loop_driver.py``).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")

_Call = tuple[contextvars.Context, Callable[..., Any], tuple[Any, ...], "asyncio.Future[Any]"]
_Settled = tuple["asyncio.Future[Any]", Any, BaseException | None]

_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, DatabaseThreads] = (
    weakref.WeakKeyDictionary()
)


def threads_for_pool(pool_size: int, worker_threads: int) -> int:
    """How many database threads the event loop gets: the pool's connections
    the worker threads, lease keeper and heartbeat leave (at least 2), so a
    write never waits for a connection."""
    return max(2, pool_size - worker_threads - 2)


class DatabaseThreads:
    """`threads` dedicated threads running short sync calls for one loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int) -> None:
        self._loop = loop
        self._calls: deque[_Call] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._idle = 0
        self._stopping = False
        # Finished calls the loop has not settled yet; a request to settle them
        # is pending whenever this list is not empty.
        self._finished: list[_Settled] = []
        self._finished_lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._work, name=f"resumable-db-{n}", daemon=True)
            for n in range(threads)
        ]
        for thread in self._threads:
            thread.start()
        _BY_LOOP[loop] = self
        #: Loop wake-ups asked for and calls run (for tests and the benchmark's notes).
        self.batches = 0
        self.calls = 0

    def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> asyncio.Future[T]:
        """Queue `fn(*args)` (on the loop); await the returned future for its
        result. The caller's context (its log context) goes with it."""
        if kwargs:
            call: Callable[..., T] = lambda *a: fn(*a, **kwargs)  # noqa: E731
        else:
            call = fn
        future: asyncio.Future[T] = self._loop.create_future()
        with self._lock:
            if self._stopping:
                raise RuntimeError("the database threads are stopped")
            self._calls.append((contextvars.copy_context(), call, args, future))
            if self._idle:
                self._wake.notify()
        return future

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._calls:
                    if self._stopping:
                        return
                    self._idle += 1
                    self._wake.wait()
                    self._idle -= 1
                context, fn, args, future = self._calls.popleft()
            try:
                done: _Settled = (future, context.run(fn, *args), None)
            except BaseException as exc:  # handed to the awaiting run, as to_thread does
                done = (future, None, exc)
            with self._finished_lock:
                self._finished.append(done)
                self.calls += 1
                ask = len(self._finished) == 1
                if ask:
                    self.batches += 1
            if ask:
                try:
                    self._loop.call_soon_threadsafe(self._settle_finished)
                except RuntimeError:  # the loop is closed: nobody awaits these any more
                    return

    def _settle_finished(self) -> None:
        """On the loop: settle every call finished since the last time."""
        with self._finished_lock:
            finished, self._finished = self._finished, []
        _settle(finished)

    def stop(self, timeout: float = 5.0) -> None:
        """Run what is queued, then end the threads."""
        with self._lock:
            self._stopping = True
            self._wake.notify_all()
        for thread in self._threads:
            thread.join(timeout)


def _settle(settled: list[_Settled]) -> None:
    for future, result, exc in settled:
        if future.cancelled():
            continue  # its run was cancelled meanwhile; the write itself happened
        if exc is None:
            future.set_result(result)
        elif isinstance(exc, StopIteration | StopAsyncIteration):
            # A future refuses these (TypeError), which left this one and the
            # rest of the batch unsettled, their runs awaiting for ever; as
            # asyncio.to_thread does, the awaiting run gets a RuntimeError.
            wrapped = RuntimeError(f"{type(exc).__name__} raised by a database call")
            wrapped.__cause__ = exc
            future.set_exception(wrapped)
        else:
            future.set_exception(exc)


def threads_of_running_loop() -> DatabaseThreads | None:
    """The running loop's database threads, if it has them (the worker's loop)."""
    return _BY_LOOP.get(asyncio.get_running_loop())


async def on_database_thread(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a short synchronous database call from a coroutine: on the
    running loop's database threads when it has them (the worker's loop),
    else with ``asyncio.to_thread``."""
    loop = asyncio.get_running_loop()
    threads = _BY_LOOP.get(loop)
    if threads is None:
        return await asyncio.to_thread(fn, *args, **kwargs)
    return await threads.run(fn, *args, **kwargs)
