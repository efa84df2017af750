"""The plan past one PostgreSQL primary (issue 40, docs/scaling.md): every
table a session owns distributed by its session id, as Citus distributes a
table by a column. Proved here on plain PostgreSQL: the schema the migrations
make, copied into a schema of its own with those tables hash-partitioned by
session id, and each hot-path statement planned against it with the values a
worker or the web sends. A statement that touches at most one partition of
each such table is one a distributed PostgreSQL routes to one node.

A statement that stops pruning fails this test and is named; one that
cannot be changed would be listed in `NEEDS_CHANGE`, with why.
"""

from __future__ import annotations

import os
import re
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from resumable.models import step_queries, tool_call_queries, wait_queries
from resumable.models.database import Database

# Table -> the column that holds its session id.
SESSION_KEYED = {
    "sessions": "id",
    "checkpoints": "session_id",
    "audit_events": "session_id",
    "tool_execution_cache": "session_id",
    "callbacks": "session_id",
    "deliveries": "session_id",
}
PARTITIONS = 8

SESSION = uuid.UUID("3f1c9b7e-8d2a-4c51-9a0e-6b7f2d9c1e45")

# What each parameter is, as a worker or the web sends it.
VALUES: dict[str, Any] = {
    "actor": "ops",
    "after_wake": True,
    "args_hash": "h",
    "call_index": 0,
    "compensation": None,
    "cursor": "next",
    "dedupe_key": "d",
    "delivery_id": 1,
    "epoch": 1,
    "error": "{}",
    "events": "[]",
    "expected_seq": 0,
    "history_state": "{}",
    "id": SESSION,
    "key": "rsm_0",
    "kind": "delta",
    "lease_seconds": 30.0,
    "limits": "{}",
    "next_time_limit": 60.0,
    "owner": "host:1:1",
    "patch": "[]",
    "payload": "{}",
    "record_keys": ["rsm_0"],
    "records": "[]",
    "release": False,
    "request": "{}",
    "response": "{}",
    "result": "null",
    "session_id": SESSION,
    "starts": "{}",
    "state": "{}",
    "state_patch": "[]",
    "status": "running",
    "step": "first",
    "step_events": "[]",
    "step_seq": 1,
    "takes_over": ["a@0"],
    "terminal": ["completed", "failed", "cancelled"],
    "token": "tok",
    "tool": "charge",
    "topic": "approval",
    "versions": '{"a": 0}',
    "wait": "null",
    "wake_at": None,
}

# The hot path: the claim, the step commit, a recorded call, a callback, a
# signal, a wake and a lease renewal.
HOT = {
    "CLAIM_LEASE": step_queries.CLAIM_LEASE,
    "TAKE_OVER": step_queries.TAKE_OVER,
    "COMMIT_STEP": step_queries.COMMIT_STEP,
    "COMMIT_STEP_WITH_RECORDS": step_queries.COMMIT_STEP_WITH_RECORDS,
    "RENEW_LEASE": step_queries.RENEW_LEASE,
    "LEASE_LEFT": step_queries.LEASE_LEFT,
    "CLAIM_TOOL_CALL": tool_call_queries.CLAIM_TOOL_CALL,
    "COMPLETE_TOOL_CALL": tool_call_queries.COMPLETE_TOOL_CALL,
    "FAIL_TOOL_CALL": tool_call_queries.FAIL_TOOL_CALL,
    "CREATE_CALLBACK": wait_queries.CREATE_CALLBACK,
    "LOCK_SESSION_OF_CALLBACK": wait_queries.LOCK_SESSION_OF_CALLBACK,
    "LOCK_CALLBACK": wait_queries.LOCK_CALLBACK,
    "CALLBACK_DELIVERY": wait_queries.CALLBACK_DELIVERY,
    "INSERT_OPEN_CALLBACK_DELIVERY": wait_queries.INSERT_OPEN_CALLBACK_DELIVERY,
    "WAKE_FROM_CALLBACK": wait_queries.WAKE_FROM_CALLBACK,
    "LOCK_SESSION_FOR_SIGNAL": wait_queries.LOCK_SESSION_FOR_SIGNAL,
    "INSERT_SIGNAL_DELIVERY": wait_queries.INSERT_SIGNAL_DELIVERY,
    "WAKE_FROM_DELIVERIES": wait_queries.WAKE_FROM_DELIVERIES,
}

# The statements that reach more than one partition, and why: none left.
# Each names the session beside every join by it (a planner cannot prune on
# a value it learns only when the statement runs); a callback's receipt
# takes it from the token (models/callback_tokens.py; a token made before
# it carried its session is still found, by token alone, on every
# partition); a recorded call's insert conflicts on (idempotency_key,
# session_id), the primary key since migration 0027 (a unique index of a
# distributed table must hold the distribution column).
NEEDS_CHANGE: dict[str, str] = {}


@pytest.fixture
def sharded(db: Database) -> Iterator[psycopg.Connection[Any]]:
    """A connection whose search path is a copy of the schema with the
    session-keyed tables hash-partitioned by session id (dropped after)."""
    schema = f"sharded_{os.getpid()}"
    with db.connection() as conn:
        try:
            _copy_schema(conn, schema)
            conn.execute(f"SET search_path = {schema}")
            yield conn
        finally:
            conn.execute("RESET search_path")
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _copy_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    conn.execute(f"CREATE SCHEMA {schema}")
    tables = [
        row["tablename"]
        for row in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            " AND tablename <> 'alembic_version'"
        ).fetchall()
    ]
    for table in tables:
        key = SESSION_KEYED.get(table)
        if key is None:  # a reference table (Citus's word): copied whole
            conn.execute(f"CREATE TABLE {schema}.{table} (LIKE public.{table} INCLUDING ALL)")
            continue
        conn.execute(
            f"CREATE TABLE {schema}.{table} (LIKE public.{table} INCLUDING DEFAULTS"
            " INCLUDING IDENTITY INCLUDING GENERATED INCLUDING CONSTRAINTS)"
            f" PARTITION BY HASH ({key})"
        )
        for remainder in range(PARTITIONS):
            conn.execute(
                f"CREATE TABLE {schema}.{table}_p{remainder} PARTITION OF {schema}.{table}"
                f" FOR VALUES WITH (MODULUS {PARTITIONS}, REMAINDER {remainder})"
            )
        indexes = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = %s",
            (table,),
        ).fetchall()
        for row in indexes:
            conn.execute(_partitioned_index(row["indexdef"], table, key, schema))


def _partitioned_index(definition: str, table: str, key: str, schema: str) -> str:
    """The index on the partitioned copy: a unique one must hold the
    partition key, as it must on a distributed table."""
    sql = definition.replace(f" ON public.{table} ", f" ON {schema}.{table} ")
    if " UNIQUE " in sql:
        columns = re.search(r"USING \w+ \(([^)]*)\)", sql)
        assert columns is not None, sql
        if key not in [c.strip() for c in columns[1].split(",")]:
            sql = sql.replace(columns[0], columns[0][:-1] + f", {key})", 1)
    return sql


def _partitions_touched(conn: psycopg.Connection[Any], sql: str) -> dict[str, set[str]]:
    """Of each session-keyed table, the partitions the statement's plan scans
    (an insert is routed to its row's one partition when it runs)."""
    params = {name: VALUES[name] for name in set(re.findall(r"%\((\w+)\)s", sql))}
    [row] = conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchall()
    plan = next(iter(row.values()))
    touched: dict[str, set[str]] = defaultdict(set)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            name = node.get("Relation Name")
            match = re.fullmatch(r"(\w+)_p(\d+)", name or "")
            if match and match[1] in SESSION_KEYED:
                touched[match[1]].add(str(name))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(plan)
    return touched


def test_each_hot_statement_touches_one_partition_of_each_session_table_or_says_why(
    sharded: psycopg.Connection[Any],
) -> None:
    spread: dict[str, dict[str, int]] = {}
    for name, sql in HOT.items():
        try:
            touched = _partitions_touched(sharded, sql)
        except psycopg.errors.InvalidColumnReference:  # no unique index for ON CONFLICT
            spread[name] = {"(ON CONFLICT target)": PARTITIONS}
            continue
        wide = {table: len(parts) for table, parts in touched.items() if len(parts) > 1}
        if wide:
            spread[name] = wide
    assert set(spread) == set(NEEDS_CHANGE), {
        "reach several partitions, not listed": sorted(set(spread) - set(NEEDS_CHANGE)),
        "listed, but prune now": sorted(set(NEEDS_CHANGE) - set(spread)),
        "spread": spread,
    }
