"""The typed functions beside the named statements (issue 37): every filter
a read composes is valid SQL alone and with the others, and every read of a
session row carries the live state, folded by ``live_state.apply`` alone."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from resumable.client import Client
from resumable.models import (
    dead_letter_queries,
    event_queries,
    live_state,
    rows,
    session_queries,
    step_ops,
)
from resumable.models.database import Database


def _sessions(client: Client, db: Database, n: int) -> list[uuid.UUID]:
    """`n` pending sessions, the first of agent `a`, the rest of agent `b`."""
    return [client.start("a" if i == 0 else "b", {"i": i}) for i in range(n)]


def _set(db: Database, session_id: uuid.UUID, **columns: object) -> None:
    assignments = ", ".join(f"{name} = %({name})s" for name in columns)
    with db.connection() as conn:
        conn.execute(
            f"UPDATE sessions SET {assignments} WHERE id = %(id)s", {**columns, "id": session_id}
        )


def test_a_session_read_and_a_claim_carry_the_same_live_state(client: Client, db: Database) -> None:
    session_id = client.start("a", {"x": 1})
    patch: list[dict[str, Any]] = [
        {"op": "add", "path": "/count", "value": 2},
        {"op": "add", "path": "/l", "value": []},
    ]
    _set(db, session_id, state=json.dumps({"count": 1}), state_patch=json.dumps(patch))
    with db.connection() as conn:
        row = session_queries.get(conn, session_id)
        claimed = step_ops.claim(
            conn,
            session_id,
            owner="test:1:1",
            versions=json.dumps({"a": 0}),
            starts=json.dumps({}),
            lease_seconds=30,
        )
    assert row is not None and claimed is not None
    expected = live_state.apply({"count": 1}, patch)
    assert row.state == claimed.state == expected == {"count": 2, "l": []}
    assert row.state_patch == patch  # the stored patch is left as it is
    assert client.state(session_id) == expected


def test_each_session_filter_alone_and_all_together(client: Client, db: Database) -> None:
    first, *others = _sessions(client, db, 4)
    parent = others[0]
    _set(db, others[1], parent_id=parent)
    _set(db, others[2], status="running", step_started_at=datetime.now(UTC) - timedelta(hours=1))
    with db.connection() as conn:
        newest = session_queries.page(conn, limit=10)
        assert [row.id for row in newest] == [others[2], others[1], others[0], first]
        assert [row.id for row in session_queries.page(conn, limit=10, status="running")] == [
            others[2]
        ]
        assert [row.id for row in session_queries.page(conn, limit=10, agent="a")] == [first]
        assert [row.id for row in session_queries.page(conn, limit=10, parent=parent)] == [
            others[1]
        ]
        hung = session_queries.page(conn, limit=10, hung_after=60.0)
        assert [row.id for row in hung] == [others[2]]
        unserved = session_queries.page(conn, limit=10, unserved=True)  # no worker is alive
        assert {row.id for row in unserved} == {first, *others}
        last = newest[1]
        older = session_queries.page(conn, limit=10, before=(last.created_at, last.id))
        assert [row.id for row in older] == [others[0], first]
        everything = session_queries.page(
            conn,
            limit=10,
            status="running",
            agent="b",
            parent=parent,
            hung_after=60.0,
            unserved=True,
            before=(last.created_at, last.id),
        )
        assert everything == []


def test_each_summary_filter_alone_and_all_together(client: Client, db: Database) -> None:
    first, second = _sessions(client, db, 2)
    now = datetime.now(UTC)
    with db.connection() as conn:
        summaries = session_queries.summaries(conn, limit=10)
        assert [row.id for row in summaries] == [second, first]
        prefix = str(first)[:8]
        found = session_queries.summaries(conn, limit=10, id_prefix=prefix)
        assert first in [row.id for row in found]
        assert session_queries.summaries(conn, limit=10, created_before=now - timedelta(1)) == []
        assert len(session_queries.summaries(conn, limit=10, created_after=now - timedelta(1))) == 2
        assert session_queries.summaries(
            conn,
            limit=10,
            status="pending",
            agent="a",
            id_prefix=prefix,
            created_before=now + timedelta(1),
            created_after=now - timedelta(1),
            before=(summaries[0].created_at, summaries[0].id),
        ) == [row for row in summaries if row.id == first]


def test_dead_letter_filters_and_lookups(client: Client, db: Database) -> None:
    session_id = client.start("a", {})
    with db.connection() as conn:
        ids = [
            int(
                rows.value(
                    conn,
                    "INSERT INTO dead_letters (session_id, agent, step, error_code, error_type,"
                    " error_message, attempts, compensation, status)"
                    " VALUES (%s, 'a', 'go', 'step_failed', 'ValueError', 'no', 1, 'none', %s)"
                    " RETURNING id",
                    (session_id, status),
                )
            )
            for status in ("retried", "open")
        ]
        assert [row.id for row in dead_letter_queries.find(conn, limit=10)] == ids[::-1]
        opened = dead_letter_queries.find(conn, limit=10, status="open")
        assert [row.id for row in opened] == [ids[1]]
        assert [row.id for row in dead_letter_queries.find(conn, limit=10, before_id=ids[1])] == [
            ids[0]
        ]
        everything = dead_letter_queries.find(
            conn,
            limit=10,
            before_id=ids[1] + 1,
            status="open",
            agent="a",
            error_type="ValueError",
            step="go",
            since=datetime.now(UTC) - timedelta(1),
            until=datetime.now(UTC) + timedelta(1),
            compensation="none",
        )
        assert [row.id for row in everything] == [ids[1]]
        assert [row.id for row in dead_letter_queries.by_id(conn, [ids[1], -1, ids[0]])] == [
            ids[1],
            ids[0],
        ]
        assert [row.id for row in dead_letter_queries.of_session(conn, session_id, limit=1)] == [
            ids[1]
        ]


def test_events_oldest_first_all_or_the_latest(client: Client, db: Database) -> None:
    session_id = client.start("a", {})
    client.cancel(session_id, actor="test")
    with db.connection() as conn:
        every = event_queries.events(conn, session_id, limit=None)
        assert [e.event_type for e in every] == ["session_created", "session_cancelled"]
        ids = [e.id for e in every]
        assert [e.id for e in event_queries.latest_events(conn, session_id, limit=1)] == ids[1:]
        after_first = event_queries.events(conn, session_id, after=ids[0] or 0, limit=5)
        assert [e.id for e in after_first] == ids[1:]
        assert event_queries.events(conn, session_id, limit=0) == []
