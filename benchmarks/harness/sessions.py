"""The benchmark as a client: starting sessions, and waiting for them to get
where a phase needs them."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from benchmarks.harness.database import BENCH_TAG
from resumable.broker.choice import build_broker
from resumable.client import Client
from resumable.models.database import Database
from resumable.settings import Settings


@contextlib.contextmanager
def bench_client(settings: Settings, pool_size: int) -> Iterator[Client]:
    """A Client on its own pool and broker, closed on the way out."""
    assert settings.database_url and settings.redis_url
    db = Database(
        settings.database_url,
        pool_size=pool_size,
        prepared_statements=settings.db_prepared_statements,
    )
    broker = build_broker(settings, settings.redis_url)
    try:
        yield Client(settings, db, broker)
    finally:
        broker.close()
        db.close()


def start_sessions(
    client: Client, agent: str, inputs: Iterable[dict[str, Any] | None], threads: int
) -> list[Any]:
    """``Client.start`` of `agent` once per input, from `threads` threads; the ids."""
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda session_input: client.start(agent, session_input), inputs))


def wait_sessions(
    conn: psycopg.Connection[Any],
    done: Callable[[Counter[str]], bool],
    *,
    what: str,
    timeout: float,
    ids: Sequence[Any] | None = None,
    agent: str | None = None,
    alive: Callable[[], None] = lambda: None,
    interval: float = 0.01,
) -> int:
    """Poll the sessions' counts by status (of `ids`, of `agent`'s, or all)
    until `done(counts)`.

    By `agent` for thousands of sessions: ``id = ANY(<10,000 ids>)`` in a
    prepared statement planned on a table analyzed when it was nearly empty
    is a sequential scan comparing every row with every id (0.7-0.9 s a poll
    in a 10,000-session burst, measured: a core taken from what it measured).

    Raises if a session failed or was cancelled, if `alive()` raises (a process
    died) or after `timeout` seconds. Returns the number of polls, one
    transaction each on an autocommit connection.
    """
    where, params = "", list[Any]()
    if ids is not None:
        where, params = " WHERE id = ANY(%s::uuid[])", [[str(session_id) for session_id in ids]]
    elif agent is not None:
        where, params = " WHERE agent = %s", [agent]
    sql = f"SELECT status, count(*) FROM sessions {BENCH_TAG}{where} GROUP BY status"
    deadline = time.monotonic() + timeout
    polls = 0
    with conn.cursor(row_factory=tuple_row) as cursor:
        while True:
            counts = Counter({str(status): int(n) for status, n in cursor.execute(sql, params)})
            polls += 1
            if counts["failed"] or counts["cancelled"]:
                raise RuntimeError(f"sessions failed ({dict(counts)}); see the worker logs")
            if done(counts):
                return polls
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}: {counts}")
            alive()
            time.sleep(interval)
