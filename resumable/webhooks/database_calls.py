"""Database work from a request handler, with a deadline.

A route's database work runs on a thread (psycopg and SQLAlchemy block).
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

from collections.abc import Callable
from functools import partial
from typing import TypeVar

import anyio
import anyio.to_thread
import psycopg

from resumable.queue.broker import REDIS_TIMEOUT_SECONDS

T = TypeVar("T")

#: How long a request waits for the database's answer. It is longer than the
#: pool's wait for a connection (``app.POOL_TIMEOUT_SECONDS``), so a pool
#: emptied by hung statements still answers with its own, quicker, error. It
#: also leaves room for one stalled Redis command (``REDIS_TIMEOUT_SECONDS``):
#: a callback whose enqueue times out still commits and answers 202, and the
#: reconciler sends its message.
DATABASE_DEADLINE_SECONDS = REDIS_TIMEOUT_SECONDS + 5.0


class DatabaseDidNotAnswer(psycopg.OperationalError):
    """The database took the request's statements and did not answer in time.

    An ``OperationalError``, so that the web and console error handlers answer
    it as they answer a database that cannot be reached."""


async def database_call(
    work: Callable[..., T],
    *args: object,
    deadline: float = DATABASE_DEADLINE_SECONDS,
    **kwargs: object,
) -> T:
    """``work(*args, **kwargs)`` on a worker thread; DatabaseDidNotAnswer
    after `deadline` seconds (the thread is abandoned, not stopped)."""
    with anyio.move_on_after(deadline):
        return await anyio.to_thread.run_sync(
            partial(work, *args, **kwargs), abandon_on_cancel=True
        )
    raise DatabaseDidNotAnswer(f"the database did not answer within {deadline:g} s")
