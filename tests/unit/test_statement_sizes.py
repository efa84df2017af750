"""The statements a worker runs for every session or step stay within what
psycopg caches: above 4 KB it parses a query's placeholders again at every
call, on the worker's hot path."""

from __future__ import annotations

import re

import pytest
from psycopg import _queries

from resumable.models import step_queries, tool_call_queries

HOT = {
    "CLAIM_LEASE": step_queries.CLAIM_LEASE,
    "TAKE_OVER": step_queries.TAKE_OVER,
    "COMMIT_STEP": step_queries.COMMIT_STEP,
    "COMMIT_STEP_WITH_RECORDS": step_queries.COMMIT_STEP_WITH_RECORDS,
    "CLAIM_TOOL_CALL": tool_call_queries.CLAIM_TOOL_CALL,
    "COMPLETE_TOOL_CALL": tool_call_queries.COMPLETE_TOOL_CALL,
}


@pytest.mark.parametrize("name", sorted(HOT))
def test_a_hot_statement_fits_psycopgs_query_cache(name: str) -> None:
    limit = getattr(_queries, "MAX_CACHED_STATEMENT_LENGTH", 4096)
    assert len(HOT[name].encode()) <= limit


def test_compact_drops_comments_and_runs_of_spaces_only() -> None:
    sql = "SELECT 'a b' AS x, -- a comment\n   y\n\tFROM t -- another\n"
    assert step_queries.compact(sql) == "SELECT 'a b' AS x, y FROM t"


def test_the_commits_checkpoint_insert_is_within_what_pg_stat_activity_shows() -> None:
    """pg_stat_activity shows the first 1024 bytes of a query (as the server
    got it, with $n placeholders); the lease tests find a queued commit there
    by its checkpoint insert."""
    numbers: dict[str, int] = {}

    def placeholder(match: re.Match[str]) -> str:
        return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"

    for sql in (step_queries.COMMIT_STEP, step_queries.COMMIT_STEP_WITH_RECORDS):
        numbers.clear()
        sent = re.sub(r"%\((\w+)\)s", placeholder, sql).replace("%%", "%")
        assert sent.encode().index(b"INSERT INTO checkpoints") + 23 <= 1024
