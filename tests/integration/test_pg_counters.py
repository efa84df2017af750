"""The benchmarks' reading of PostgreSQL's statistics: row counts of a
connection that stays open (a worker's) are all in once they settle, not
only those it flushed before its last second."""

from __future__ import annotations

import time
import uuid

import psycopg
from psycopg import sql

from benchmarks.harness.pg_counters import settled_counters
from resumable._internal.database_urls import libpq_url
from resumable._internal.embedded import ServiceURLs


def test_the_rows_of_a_connection_left_idle_are_all_counted(urls: ServiceURLs) -> None:
    url = libpq_url(urls.database_url)
    table = f"counted_{uuid.uuid4().hex[:12]}"  # new: its counts start at nothing
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (x int)").format(sql.Identifier(table)))
        try:
            insert = sql.SQL("INSERT INTO {} VALUES (1)").format(sql.Identifier(table))
            inserted = 0
            ends = time.monotonic() + 1.5  # past the once-a-second flush of its counts
            while time.monotonic() < ends:
                conn.execute(insert)
                inserted += 1
            # The connection stays open and idle, as a worker's does after a burst.
            settled = settled_counters(url, [table])
            assert settled.counters.rows[table][0] == inserted
        finally:
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
