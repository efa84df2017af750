"""Sessions at rest (suspended, blocked) are counted by triggers, not rows
(migration 0023): a /metrics scrape reads their kept counts, so it costs the
same with 200,000 sessions waiting on people as with none. The counts must be
exact after every way a session comes to rest or leaves it."""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from resumable.client import Client
from resumable.models import metrics_queries
from resumable.models.database import Database
from tests.conftest import LocalDeployment, scraped_session_counts, wait_until

ACTUAL = """SELECT agent, status, count(*) AS n FROM sessions
WHERE status IN ('suspended', 'blocked') GROUP BY agent, status"""


def _counts(conn: psycopg.Connection[Any], sql: str) -> dict[tuple[str, str], int]:
    found = conn.execute(sql).fetchall()
    return {(str(r["agent"]), str(r["status"])): int(r["n"]) for r in found if r["n"]}


def _assert_exact(conn: psycopg.Connection[Any]) -> dict[tuple[str, str], int]:
    kept = _counts(conn, metrics_queries.RESTING_SESSIONS_BY_AGENT_AND_STATUS)
    assert kept == _counts(conn, ACTUAL)
    return kept


def test_every_way_in_and_out_of_rest_keeps_the_counts_exact(db: Database) -> None:
    insert = """INSERT INTO sessions (id, agent, status, state, input)
        SELECT gen_random_uuid(), %(agent)s, %(status)s, '{}', '{}'
        FROM generate_series(1, %(n)s)"""

    def move(conn: psycopg.Connection[Any], frm: str, to: str, n: int, agent: str = "a") -> None:
        conn.execute(
            "UPDATE sessions SET status = %(to)s WHERE id IN (SELECT id FROM sessions"
            " WHERE agent = %(agent)s AND status = %(frm)s ORDER BY id LIMIT %(n)s)",
            {"to": to, "frm": frm, "n": n, "agent": agent},
        )

    with db.connection() as conn:
        conn.execute(insert, {"agent": "a", "status": "pending", "n": 40})
        conn.execute(insert, {"agent": "b", "status": "suspended", "n": 5})  # a fork at rest
        assert _assert_exact(conn) == {("b", "suspended"): 5}
        move(conn, "pending", "suspended", 30)  # suspend
        move(conn, "suspended", "pending", 10)  # resume
        move(conn, "suspended", "cancelled", 3)  # cancelled while waiting
        move(conn, "suspended", "blocked", 4)  # parked by a diverged replay
        move(conn, "blocked", "pending", 1)  # unblocked
        conn.execute("UPDATE sessions SET updated_at = now() WHERE status = 'suspended'")  # no move
        conn.execute(
            "UPDATE sessions SET agent = 'c' WHERE id IN (SELECT id FROM sessions"
            " WHERE agent = 'a' AND status = 'suspended' ORDER BY id LIMIT 2)"
        )
        assert _assert_exact(conn) == {
            ("a", "suspended"): 11,
            ("a", "blocked"): 3,
            ("b", "suspended"): 5,
            ("c", "suspended"): 2,
        }
        # A delete of resting and other sessions in one statement counts down once.
        conn.execute(
            "DELETE FROM sessions WHERE agent = 'a' AND status IN ('suspended', 'pending')"
        )
        assert _assert_exact(conn) == {
            ("a", "blocked"): 3,
            ("b", "suspended"): 5,
            ("c", "suspended"): 2,
        }


def test_concurrent_connections_moving_sessions_keep_the_counts_exact(db: Database) -> None:
    """Each connection adds to its own shard: none waits for another's row,
    and the sums stay exact."""
    with db.connection() as conn:
        conn.execute(
            "INSERT INTO sessions (id, agent, status, state, input)"
            " SELECT gen_random_uuid(), 'busy', 'pending', '{}', '{}' FROM generate_series(1, 400)"
        )
        ids = [r["id"] for r in conn.execute("SELECT id FROM sessions ORDER BY id").fetchall()]
    errors: list[BaseException] = []

    def churn(mine: list[Any]) -> None:
        try:
            with db.connection() as conn:
                for session_id in mine:
                    for status in ("suspended", "pending", "suspended"):
                        conn.execute(
                            "UPDATE sessions SET status = %s WHERE id = %s", [status, session_id]
                        )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(ids[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    with db.connection() as conn:
        assert _assert_exact(conn) == {("busy", "suspended"): 400}
        shards = conn.execute("SELECT count(*) AS n FROM resting_session_counts").fetchone()
    assert shards is not None and shards["n"] > 1  # type: ignore[operator]


def test_the_scrape_counts_suspended_sessions_of_a_real_worker(
    client: Client, db: Database, deployment: LocalDeployment
) -> None:
    deployment.worker()
    ids = [client.start("approval", {}) for _ in range(4)]
    wait_until(
        lambda: all(client.get(i).status == "suspended" for i in ids),
        30,
        what="sessions to suspend",
    )
    client.cancel(ids[0], actor="test")
    exported = scraped_session_counts(db)
    assert exported == {("approval", "suspended"): 3.0, ("approval", "cancelled"): 1.0}


def test_count_by_status_is_exact_without_reading_every_row(client: Client, db: Database) -> None:
    """The console's counts by status come from the active index and the kept
    counts; they must equal a full count of the table."""
    with db.connection() as conn:
        for status, n in [("pending", 3), ("suspended", 7), ("blocked", 2), ("completed", 9)]:
            conn.execute(
                "INSERT INTO sessions (id, agent, status, state, input, finished_at)"
                " SELECT gen_random_uuid(), 'mix', %(status)s, '{}', '{}',"
                " CASE WHEN %(status)s = 'completed' THEN now() END"
                " FROM generate_series(1, %(n)s)",
                {"status": status, "n": n},
            )
        conn.execute(
            "UPDATE sessions SET status = 'cancelled', finished_at = now() WHERE id IN"
            " (SELECT id FROM sessions WHERE status = 'suspended' ORDER BY id LIMIT 2)"
        )
        full = conn.execute("SELECT status, count(*) AS n FROM sessions GROUP BY status").fetchall()
    assert client.count_by_status() == {r["status"]: r["n"] for r in full}
    assert client.count_by_status() == {
        "pending": 3,
        "suspended": 5,
        "blocked": 2,
        "completed": 9,
        "cancelled": 2,
    }
