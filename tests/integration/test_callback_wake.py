"""A callback is stored and wakes its session in one transaction that locks the
session row first, so it races safely with the worker suspending the session:
whichever commits second wakes it, exactly once."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import redis

from resumable._internal.database_urls import libpq_url
from resumable.broker.background_sends import sender_for
from resumable.broker.redis import REDIS_TIMEOUT_SECONDS, build_broker
from resumable.client import Client
from resumable.models import step_queries, wait_queries
from resumable.models.async_database import AsyncDatabase
from resumable.models.database import Database
from resumable.services.async_callbacks import AsyncCallbacks
from resumable.services.inbox import Inbox, Receipt, Verdict
from resumable.settings import Settings
from tests.conftest import queued_messages, wait_until
from tests.relay import Relay, redis_target, redis_url_via

TOKEN = "tok-race"
WAIT = '{"then": "b", "callbacks": ["tok-race"], "signals": []}'

# Tests of the Redis broker itself (its lists, tokens and scripts).
pytestmark = pytest.mark.redis_broker


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


Receive = Callable[[str, Any, str | None], Receipt]


@pytest.fixture(params=["thread", "event_loop"])
def receive(
    request: pytest.FixtureRequest, settings: Settings, db: Database, client: Client
) -> Receive:
    """A callback's receipt as ``Inbox.callback`` takes it on a thread (the
    CLI's path), or as the web's route awaits it on an event loop
    (``AsyncCallbacks``, its message sent by the loop's ``Sender``): the
    same statements, so the same races end the same way."""
    if request.param == "thread":
        return Inbox(settings, db, client.broker).callback

    def on_a_loop(token: str, payload: Any, dedupe_key: str | None) -> Receipt:
        async def run() -> Receipt:
            adb = AsyncDatabase(
                settings.database_url or "", pool_size=2, pool_timeout=5, prepare_threshold=5
            )
            await adb.open()
            sender = sender_for(
                client.broker, settings, settings.redis_url or "", why="test callback"
            )
            await sender.start()
            try:
                return await AsyncCallbacks(adb, sender.send).callback(token, payload, dedupe_key)
            finally:
                await sender.close(timeout=REDIS_TIMEOUT_SECONDS)
                await adb.close()

        return asyncio.run(run())

    return on_a_loop


def _in_thread(run: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(run()))
    thread.start()
    return thread, out


def _lock_waiters(settings: Settings) -> int:
    """How many of this database's sessions wait on a lock right now."""
    with psycopg.connect(libpq_url(settings.database_url or ""), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database()"
        ).fetchone()
    return 0 if row is None else int(row[0])


def _waiting_on_a_lock(settings: Settings) -> bool:
    return _lock_waiters(settings) > 0


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
    receive: Receive, settings: Settings, db: Database, running_session: uuid.UUID
) -> None:
    url = libpq_url(settings.database_url or "")
    with psycopg.connect(url) as worker:  # the suspension, not yet committed
        _suspend(worker, running_session)
        thread, out = _in_thread(lambda: receive(TOKEN, {"ok": 1}, "d-1"))
        wait_until(lambda: _waiting_on_a_lock(settings), timeout=10)
        worker.commit()
    thread.join(timeout=10)
    receipt: Receipt = out[0]
    assert receipt.verdict is Verdict.ACCEPTED and receipt.woke
    status, wake = _state(db, running_session)
    assert status == "pending" and wake["delivery_id"] == receipt.delivery_id


def test_a_suspension_during_the_callback_waits_for_it_and_then_finds_the_delivery(
    receive: Receive, settings: Settings, db: Database, running_session: uuid.UUID
) -> None:
    url = libpq_url(settings.database_url or "")
    with psycopg.connect(url) as holder:
        # Hold the callback row so the receiver stops after locking the session.
        holder.execute("SELECT 1 FROM callbacks WHERE token = %s FOR UPDATE", [TOKEN])
        thread, out = _in_thread(lambda: receive(TOKEN, {"ok": 1}, "d-1"))
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
    return _lock_waiters(settings) >= 2


# -- the queue message goes out before the commit -------------------------------------
#
# The receiver sends the woken session's message while its transaction (and its
# lock on the session row) is still open, so the worker's way to the claim runs
# alongside the commit's WAL flush; the claim waits for the row lock and sees
# the commit. These tests hold the receiver's COMMIT (or make it fail) with a
# deferred constraint trigger on deliveries.

COMMIT_GATE = 4242  # the advisory lock a held COMMIT waits for


def _gate_commits(conn: psycopg.Connection[Any], *, fail: bool) -> None:
    body = (
        "RAISE EXCEPTION 'commit refused by the test'"
        if fail
        else f"PERFORM pg_advisory_xact_lock({COMMIT_GATE})"
    )
    conn.execute(
        f"CREATE FUNCTION test_commit_gate() RETURNS trigger LANGUAGE plpgsql AS $$"
        f" BEGIN {body}; RETURN NULL; END $$"
    )
    conn.execute(
        "CREATE CONSTRAINT TRIGGER test_commit_gate AFTER INSERT ON deliveries"
        " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_commit_gate()"
    )


def _ungate_commits(conn: psycopg.Connection[Any]) -> None:
    conn.execute("DROP TRIGGER IF EXISTS test_commit_gate ON deliveries")
    conn.execute("DROP FUNCTION IF EXISTS test_commit_gate()")


def _claim(url: str, session_id: uuid.UUID) -> Any:
    """The worker's claim statement, as a worker that loads `race` runs it
    (autocommitted)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            step_queries.CLAIM_LEASE,
            {
                "id": session_id,
                "owner": "test-worker:1",
                "versions": '{"race": 0}',
                "starts": "{}",
                "limits": "{}",
                "lease_seconds": 30,
            },
        ).fetchone()


@pytest.fixture
def suspended_session(settings: Settings, running_session: uuid.UUID) -> Iterator[uuid.UUID]:
    url = libpq_url(settings.database_url or "")
    with psycopg.connect(url) as conn:
        _suspend(conn, running_session)
    yield running_session
    with psycopg.connect(url, autocommit=True) as conn:
        _ungate_commits(conn)


def _sent_before_its_commit(
    settings: Settings,
    db: Database,
    redis_client: redis.Redis,
    session_id: uuid.UUID,
    receive: Callable[[], Receipt],
    while_held: Callable[[], None] = lambda: None,
) -> Receipt:
    """Run `receive` with its COMMIT held: check that the session still reads
    suspended and its message is already queued, run `while_held`, then let the
    commit go and return the receipt."""
    with psycopg.connect(libpq_url(settings.database_url or ""), autocommit=True) as gate:
        _gate_commits(gate, fail=False)
        gate.execute("SELECT pg_advisory_lock(%s)", [COMMIT_GATE])
        receiver, out = _in_thread(receive)
        wait_until(lambda: _waiting_on_a_lock(settings), timeout=10, what="the held COMMIT")
        assert _state(db, session_id)[0] == "suspended"
        # Sent by now (the event loop's sender may trail the statement a moment).
        wait_until(
            lambda: (
                [m.args for m in queued_messages(redis_client, settings)] == [(str(session_id),)]
            ),
            timeout=5,
            what="the session's message queued before the commit",
        )
        while_held()
        gate.execute("SELECT pg_advisory_unlock(%s)", [COMMIT_GATE])
        receiver.join(timeout=10)
    receipt: Receipt = out[0]
    assert receipt.verdict is Verdict.ACCEPTED and receipt.woke
    return receipt


def test_the_message_is_sent_before_the_commit_and_the_claim_waits_for_the_commit(
    receive: Receive,
    settings: Settings,
    db: Database,
    redis_client: redis.Redis,
    suspended_session: uuid.UUID,
) -> None:
    url = libpq_url(settings.database_url or "")
    claims: list[tuple[threading.Thread, list[Any]]] = []

    def claim_while_held() -> None:
        claimer, claimed = _in_thread(lambda: _claim(url, suspended_session))
        claims.append((claimer, claimed))
        wait_until(lambda: not claimer.is_alive() or _two_waiting(settings), timeout=10)
        assert claimer.is_alive(), "the claim did not wait for the receiver's commit"

    _sent_before_its_commit(
        settings,
        db,
        redis_client,
        suspended_session,
        lambda: receive(TOKEN, {"ok": 1}, "d-1"),
        claim_while_held,
    )
    claimer, claimed = claims[0]
    claimer.join(timeout=10)
    row = claimed[0]
    assert row is not None, "the claim missed the wake it waited for"
    assert row[0] == suspended_session
    assert _state(db, suspended_session)[0] == "running"


def test_a_commit_that_fails_after_the_message_leaves_the_session_waiting(
    receive: Receive, settings: Settings, db: Database, suspended_session: uuid.UUID
) -> None:
    url = libpq_url(settings.database_url or "")
    with psycopg.connect(url, autocommit=True) as gate:
        _gate_commits(gate, fail=True)
        with pytest.raises(psycopg.errors.RaiseException):
            receive(TOKEN, {"ok": 1}, "d-1")
        # The message it sent finds nothing to claim; nothing was stored.
        assert _claim(url, suspended_session) is None
        assert _state(db, suspended_session) == ("suspended", None)
        with db.connection() as conn:
            assert conn.execute("SELECT count(*) AS n FROM deliveries").fetchone() == {"n": 0}
        _ungate_commits(gate)
    again = receive(TOKEN, {"ok": 1}, "d-1")  # the sender's retry
    assert again.verdict is Verdict.ACCEPTED and again.woke
    assert _state(db, suspended_session)[0] == "pending"


def test_a_stalled_redis_does_not_hold_the_callback_or_its_session(
    settings: Settings, db: Database, suspended_session: uuid.UUID
) -> None:
    """Redis takes connections and answers nothing (a hung server, a stalled
    proxy): the enqueue gives up after its timeout, the delivery commits and
    the session is pending, for the reconciler to send once Redis is back."""
    relay = Relay(redis_target(settings.redis_url or "")).open()
    broker = build_broker(settings, redis_url_via(settings.redis_url or "", relay))
    try:
        inbox = Inbox(settings, db, broker)
        relay.stall()
        began = time.monotonic()
        receiver, out = _in_thread(lambda: inbox.callback(TOKEN, {"ok": 1}, "d-1"))
        receiver.join(timeout=REDIS_TIMEOUT_SECONDS * 3)
        assert not receiver.is_alive(), "the callback hangs on the stalled Redis"
        assert time.monotonic() - began < REDIS_TIMEOUT_SECONDS * 2 + 2
    finally:
        relay.flow()
        broker.close()
        relay.cut()
    receipt: Receipt = out[0]
    assert receipt.verdict is Verdict.ACCEPTED and receipt.woke
    assert _state(db, suspended_session)[0] == "pending"


def test_a_signal_also_sends_its_message_before_the_commit(
    client: Client,
    settings: Settings,
    db: Database,
    redis_client: redis.Redis,
    suspended_session: uuid.UUID,
) -> None:
    with db.connection() as conn:
        conn.execute(
            "UPDATE sessions SET wait = jsonb_set(wait, '{signals}', '[\"go\"]') WHERE id = %s",
            [suspended_session],
        )
    inbox = Inbox(settings, db, client.broker)
    _sent_before_its_commit(
        settings,
        db,
        redis_client,
        suspended_session,
        lambda: inbox.signal(suspended_session, "go", {"ok": 1}, "s-1", "test"),
    )
    assert _state(db, suspended_session)[0] == "pending"
