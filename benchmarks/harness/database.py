"""The benchmark's own statements: connections, one-value reads, and the
tables emptied or settled before a measured phase."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import psycopg
import redis

from resumable.models.database import PREPARE_THRESHOLD
from resumable.settings import Settings

BENCH_TAG = "/* bench */"  # marks the benchmark's own statements in pg_stat_statements


# Kept by triggers on `sessions` (metrics_queries): emptied with it.
SESSION_COUNT_TABLES = ("finished_session_counts", "resting_session_counts")


def prepare_threshold() -> int | None:
    """psycopg's threshold for the benchmark's own connections, as the
    deployment's: None (prepare nothing) when RESUMABLE_DB_PREPARED_STATEMENTS
    is false, as behind PgBouncer in transaction mode, where a statement
    prepared by a poll would not exist on the next poll's server connection."""
    return None if Settings().db_prepared_statements is False else PREPARE_THRESHOLD


def connect(url: str, *, autocommit: bool = True) -> psycopg.Connection[tuple[Any, ...]]:
    return psycopg.connect(url, autocommit=autocommit, prepare_threshold=prepare_threshold())


def scalar(url: str, sql: str) -> Any:
    with connect(url) as conn:
        row = conn.execute(sql).fetchone()
    return None if row is None else row[0]


def reset_data(
    url: str, redis_url: str, truncate: Sequence[str], vacuum: Sequence[str] = ()
) -> None:
    """Empty `truncate` (CASCADE), VACUUM ANALYZE `vacuum`, flush the Redis database.

    Emptying ``sessions`` empties the counts that triggers keep of its rows
    too (a TRUNCATE fires no delete trigger): they would count sessions gone."""
    if "sessions" in truncate:
        truncate = [*truncate, *SESSION_COUNT_TABLES]
    with connect(url) as conn:
        conn.execute(f"TRUNCATE {', '.join(dict.fromkeys(truncate))} CASCADE")
        if vacuum:
            conn.execute(f"VACUUM ANALYZE {', '.join(vacuum)}")
    client = redis.Redis.from_url(redis_url)
    try:
        client.flushdb()
    finally:
        client.close()


def settle(conn: psycopg.Connection[Any], tables: Sequence[str]) -> None:
    """VACUUM ANALYZE `tables`, then CHECKPOINT (where allowed): a measured phase
    then starts from the same state whatever ran before it. Otherwise the dead
    rows and dirty pages of the phase before are cleaned up during the next one
    (autovacuum, the checkpointer), whose PostgreSQL CPU and time they swell:
    a 10,000-timer burst right after bursts.py's step-rate phase took 13-28 s
    (PostgreSQL 1.6-4.4 ms of CPU per session), settled first 9.1-9.3 s (0.9 ms),
    and whichever of the burst and the direct wake ran first paid for it."""
    conn.execute(f"VACUUM ANALYZE {', '.join(tables)}")
    with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
        conn.execute("CHECKPOINT")
