"""The event loop's database threads: short synchronous writes, handed off in batches.

Every database write of a run on the event loop (a tool call's claim and
record, a step's commit, a retry, a hand-back) is one of the fenced
statements the worker threads make, run on a thread so the loop never waits
on PostgreSQL. ``asyncio.to_thread`` does that one call at a time: a work
item, a ``concurrent.futures`` future chained to an asyncio one, a thread
woken through a condition and a write to the loop's self-pipe for each call.
With hundreds of runs in flight those hops cost as much CPU as the writes.

Here a run appends its call to one queue and awaits a plain asyncio future.
A thread that wakes takes its share of everything queued (all of it, split
between the threads when several are idle), runs the calls one after the
other, and settles all their futures with a single ``call_soon_threadsafe``.
Each call is still its own transaction (its own fenced statement, committed
before its future is settled): batching saves the hops, never merges two
sessions' writes.

These threads are not the loop's default executor. ``asyncio.to_thread`` in
agent code (an async compensation, a check) runs on the default executor, so
agent code can never take the threads that our writes, and so the sagas
waiting on that code, need (see ``async_runs.py``).
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

# A thread hands back its results at least this often (bounds a run's wait
# behind the other calls of a batch to this many statements).
_MAX_BATCH = 64

_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, DatabaseThreads] = (
    weakref.WeakKeyDictionary()
)


class DatabaseThreads:
    """`threads` dedicated threads running short sync calls for one loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int) -> None:
        self._loop = loop
        self._calls: deque[_Call] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._idle = 0
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._work, name=f"resumable-db-{n}", daemon=True)
            for n in range(threads)
        ]
        for thread in self._threads:
            thread.start()
        _BY_LOOP[loop] = self
        #: Batches run and calls settled (for tests and the benchmark's notes).
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
                # My share: all of it, or an equal part when others are idle too.
                share = -(-len(self._calls) // (self._idle + 1))
                batch = [self._calls.popleft() for _ in range(min(share, _MAX_BATCH))]
                if self._calls and self._idle:
                    self._wake.notify()
            settled: list[_Settled] = []
            for context, fn, args, future in batch:
                try:
                    settled.append((future, context.run(fn, *args), None))
                except BaseException as exc:  # handed to the awaiting run, as to_thread does
                    settled.append((future, None, exc))
            self.batches += 1
            self.calls += len(settled)
            try:
                self._loop.call_soon_threadsafe(_settle, settled)
            except RuntimeError:  # the loop is closed: nobody awaits these any more
                return

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
        else:
            future.set_exception(exc)


async def on_database_thread(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a short synchronous database call from a coroutine: on the
    running loop's database threads when it has them (the worker's loop),
    else with ``asyncio.to_thread``."""
    loop = asyncio.get_running_loop()
    threads = _BY_LOOP.get(loop)
    if threads is None:
        return await asyncio.to_thread(fn, *args, **kwargs)
    return await threads.run(fn, *args, **kwargs)
