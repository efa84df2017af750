"""A callback is stored and wakes its session in one transaction that locks the
session row first, so it races safely with the worker suspending the session:
whichever commits second wakes it, exactly once."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from resumable.client import Client
from resumable.inbox import Inbox, Receipt, Verdict
from resumable.models import wait_queries
from resumable.models.database import Database, libpq_url
from resumable.settings import Settings
from tests.conftest import wait_until

TOKEN = "tok-race"
WAIT = '{"then": "b", "callbacks": ["tok-race"], "signals": []}'


@pytest.fixture
def running_session(db: Database) -> uuid.UUID:
    """A running session whose step has just created a callback and is about
    to commit its suspension on it."""
    session_id = uuid.uuid4()
    with db.connection() as conn:
        conn.execute(
            "INSERT INTO sessions (id, agent, status, cursor, state, lease_epoch)"
            " VALUES (%s, 'race', 'running', 'a', '{}', 1)",
            [session_id],
        )
        conn.execute(
            "INSERT INTO callbacks (token, session_id, step_seq, call_index, topic, status)"
            " VALUES (%s, %s, 0, 0, 't', 'open')",
            [TOKEN, session_id],
        )
    return session_id


def _in_thread(run: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(run()))
    thread.start()
    return thread, out


def _waiting_on_a_lock(settings: Settings) -> bool:
    with psycopg.connect(libpq_url(settings.database_url or ""), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database()"
        ).fetchone()
    return row is not None and row[0] > 0


def _suspend(conn: psycopg.Connection[Any], session_id: uuid.UUID) -> None:
    conn.execute(
        "UPDATE sessions SET status = 'suspended', wait = %s::jsonb WHERE id = %s",
        [WAIT, session_id],
    )


def _state(db: Database, session_id: uuid.UUID) -> tuple[str, Any]:
    with db.connection() as conn:
        row = conn.execute("SELECT status, wake FROM sessions WHERE id = %s", [session_id])
        found = row.fetchone()
    assert found is not None
    return str(found["status"]), found["wake"]


def test_a_callback_during_the_suspension_commit_waits_for_it_and_wakes_the_session(
    client: Client, settings: Settings, db: Database, running_session: uuid.UUID
) -> None:
    inbox = Inbox(settings, db, client.broker)
    url = libpq_url(settings.database_url or "")
    with psycopg.connect(url) as worker:  # the suspension, not yet committed
        _suspend(worker, running_session)
        thread, out = _in_thread(lambda: inbox.callback(TOKEN, {"ok": 1}, "d-1"))
        wait_until(lambda: _waiting_on_a_lock(settings), timeout=10)
        worker.commit()
    thread.join(timeout=10)
    receipt: Receipt = out[0]
    assert receipt.verdict is Verdict.ACCEPTED and receipt.woke
    status, wake = _state(db, running_session)
    assert status == "pending" and wake["delivery_id"] == receipt.delivery_id


def test_a_suspension_during_the_callback_waits_for_it_and_then_finds_the_delivery(
    client: Client, settings: Settings, db: Database, running_session: uuid.UUID
) -> None:
    inbox = Inbox(settings, db, client.broker)
    url = libpq_url(settings.database_url or "")
    with psycopg.connect(url) as holder:
        # Hold the callback row so the receiver stops after locking the session.
        holder.execute("SELECT 1 FROM callbacks WHERE token = %s FOR UPDATE", [TOKEN])
        thread, out = _in_thread(lambda: inbox.callback(TOKEN, {"ok": 1}, "d-1"))
        wait_until(lambda: _waiting_on_a_lock(settings), timeout=10)

        def suspend_then_wake() -> Any:
            with psycopg.connect(url) as worker:
                _suspend(worker, running_session)  # blocks on the receiver's lock
                worker.commit()
                # What the worker runs once its suspension committed.
                return worker.execute(
                    wait_queries.WAKE_FROM_DELIVERIES, {"id": running_session}
                ).fetchone()

        suspender, woken = _in_thread(suspend_then_wake)
        wait_until(lambda: not suspender.is_alive() or _two_waiting(settings), timeout=10)
        assert suspender.is_alive(), "the suspension did not wait for the receiver"
        holder.rollback()
    thread.join(timeout=10)
    suspender.join(timeout=10)
    receipt: Receipt = out[0]
    assert receipt.verdict is Verdict.ACCEPTED and not receipt.woke  # still running then
    assert woken[0] is not None  # the worker's own wake found the delivery
    status, wake = _state(db, running_session)
    assert status == "pending" and wake["delivery_id"] == receipt.delivery_id


def _two_waiting(settings: Settings) -> bool:
    with psycopg.connect(libpq_url(settings.database_url or ""), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database()"
        ).fetchone()
    return row is not None and row[0] >= 2
