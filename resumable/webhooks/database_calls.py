"""Database work from a request handler, with a deadline.

A route's database work runs on a thread (psycopg and SQLAlchemy block),
except the callback route's, awaited on the async pool (``database_await``).
When PostgreSQL refuses connections or drops them, psycopg fails at once,
and an exhausted pool fails after the web process's short pool timeout. A
server that takes connections and statements but never answers fails neither
way: it is hung, or it sits behind a stalled network path. Its statement
would hold the request until the client gave up. Past the deadline the
request answers 503 ``database_unavailable`` (the same answer as a server
that is down), and the thread is left to finish. It ends when the server
answers or the connection drops, and it holds at most one pooled connection.

Work left running may still commit when the server comes back: a request
answered 503 may have taken effect. A retry with the same
``Idempotency-Key`` or ``webhook-id`` then gets the idempotent answer.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import anyio
import anyio.to_thread
import psycopg

from resumable.broker.redis import REDIS_TIMEOUT_SECONDS

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: How long a request waits for the database's answer. It is longer than the
#: pool's wait for a connection (``app.POOL_TIMEOUT_SECONDS``), so a pool
#: emptied by hung statements still answers with its own, quicker, error. It
#: also leaves room for one stalled Redis command (``REDIS_TIMEOUT_SECONDS``):
#: a signal whose enqueue times out still commits and answers 202, and the
#: reconciler sends its message (a callback's is sent off the request's path).
DATABASE_DEADLINE_SECONDS = REDIS_TIMEOUT_SECONDS + 5.0


class DatabaseDidNotAnswer(psycopg.OperationalError):
    """The database took the request's statements and did not answer in time.

    An ``OperationalError``, so that the web and console error handlers answer
    it as they answer a database that cannot be reached."""


class _Call(Generic[T]):
    """One call's work, which leaves the abandoned set when it ends."""

    def __init__(self, work: Callable[[], T]) -> None:
        self.work = work
        self.finished = False

    def __call__(self) -> T:
        try:
            return self.work()
        finally:
            with _lock:
                self.finished = True
                _abandoned.discard(self)


_lock = threading.Lock()
#: Calls whose caller stopped waiting and whose thread still runs.
_abandoned: set[_Call[Any]] = set()


async def database_call(
    work: Callable[..., T],
    *args: object,
    deadline: float = DATABASE_DEADLINE_SECONDS,
    **kwargs: object,
) -> T:
    """``work(*args, **kwargs)`` on a worker thread; DatabaseDidNotAnswer
    after `deadline` seconds (the thread is abandoned, not stopped)."""
    call = _Call(lambda: work(*args, **kwargs))
    with anyio.move_on_after(deadline):
        return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    with _lock:
        if not call.finished:  # it may have ended since the deadline
            _abandoned.add(call)
    raise DatabaseDidNotAnswer(f"the database did not answer within {deadline:g} s")


#: Awaited calls past their deadline, still unwinding (psycopg cancels the
#: query on the server, which a hung server may take seconds to refuse).
_abandoned_tasks: set[asyncio.Task[Any]] = set()


async def database_await(work: Awaitable[T], *, deadline: float = DATABASE_DEADLINE_SECONDS) -> T:
    """`work` (a coroutine on the async pool) within `deadline` seconds, or
    DatabaseDidNotAnswer, as ``database_call``. Past the deadline the work
    is cancelled but not awaited: psycopg answers a cancellation by asking
    the server to cancel the query (up to 5 s, then 5 s more for the answer),
    which must not hold the request's 503. Its connection goes back to the
    pool, which discards it unless it came back idle."""
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task}, timeout=deadline)
    except asyncio.CancelledError:  # the request itself was cancelled
        _abandon(task)
        raise
    if task in done:
        return task.result()
    _abandon(task)
    raise DatabaseDidNotAnswer(f"the database did not answer within {deadline:g} s")


def _abandon(task: asyncio.Task[Any]) -> None:
    task.cancel()
    _abandoned_tasks.add(task)
    task.add_done_callback(_forget)


def _forget(task: asyncio.Task[Any]) -> None:
    _abandoned_tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.debug("an abandoned database call ended with %r", task.exception())


def exit_past_abandoned_calls() -> None:
    """The web process's last act: if threads of abandoned calls still wait on
    a database that never answered, exit without them (one line says so).
    anyio's worker threads are not daemons, so the interpreter would otherwise
    join them at exit, and a SIGTERM would leave the process running for as
    long as the database hangs. Called after everything else has unwound."""
    with _lock:
        stuck = len(_abandoned)
    if not stuck:
        return
    logger.warning(
        "exiting without %d database call(s) the database never answered",
        stuck,
        extra={"action": "abandoned_database_calls"},
    )
    logging.shutdown()
    error = sys.exc_info()[1]
    clean = error is None or (isinstance(error, SystemExit) and not error.code)
    os._exit(0 if clean else 1)
