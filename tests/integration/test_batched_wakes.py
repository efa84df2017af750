"""Waking many sessions at once: the scheduler commits a batch of due wake-ups
and sends their queue messages and wake-up tokens in one Redis round trip, in
dramatiq's own message format, once per session however many schedulers run."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import redis
from dramatiq.broker import MessageProxy
from dramatiq.message import Message

from resumable.client import Client
from resumable.models.database import Database
from resumable.queue.broker import SESSION_ACTOR, enqueue_sessions
from resumable.queue.wakeup import ENQUEUED_AT, FETCHED_AT, WakingRedisBroker, wakeup_key
from resumable.scheduler.jobs import SchedulerJobs
from resumable.settings import Settings


def _queued(redis_client: redis.Redis, settings: Settings) -> list[Message[None]]:
    """Every message waiting on the session queue, decoded as a worker would."""
    key = f"resumable:{settings.queue_name}"
    ids = redis_client.lrange(key, 0, -1)
    stored = redis_client.hmget(f"{key}.msgs", ids) if ids else []
    return [Message.decode(data) for data in stored if isinstance(data, bytes)]


def _suspend_due(db: Database, count: int, kind: str) -> list[uuid.UUID]:
    """`count` sessions suspended on a timer (or a retry) that is already due."""
    ids = [uuid.uuid4() for _ in range(count)]
    status, wait = ("suspended", '{"timer_at": "2000-01-01T00:00:00+00:00"}')
    if kind == "retry":
        status, wait = "retrying", "null"
    with db.connection() as conn:
        conn.execute(
            """
            INSERT INTO sessions (id, agent, status, state, wait, wake_at)
            SELECT u, 'nap', %(status)s, '{}'::jsonb, %(wait)s::jsonb, now() - interval '1 s'
            FROM unnest(%(ids)s::uuid[]) AS u
            """,
            {"ids": ids, "status": status, "wait": wait},
        )
    return ids


def test_a_batch_is_stored_as_dramatiq_messages_with_a_token_each(
    client: Client, settings: Settings, redis_client: redis.Redis
) -> None:
    ids = [uuid.uuid4() for _ in range(3)]
    assert enqueue_sessions(client.broker, settings, ids) == 3
    queued = _queued(redis_client, settings)
    assert [m.args for m in queued] == [(str(i),) for i in ids]
    assert {m.actor_name for m in queued} == {SESSION_ACTOR}
    assert len({m.options["redis_message_id"] for m in queued}) == 3
    assert redis_client.llen(wakeup_key("resumable", settings.queue_name)) == 3


def test_dramatiqs_own_consumer_fetches_and_acks_a_batch(
    client: Client, settings: Settings, redis_client: redis.Redis
) -> None:
    """The batch is stored where dramatiq's fetch and ack scripts look."""
    ids = [str(uuid.uuid4()) for _ in range(5)]
    enqueue_sessions(client.broker, settings, ids)
    consumer = client.broker.consume(settings.queue_name, prefetch=10, timeout=100)
    fetched: list[MessageProxy] = []
    deadline = time.monotonic() + 10
    while len(fetched) < len(ids) and time.monotonic() < deadline:
        message = next(consumer)
        if message is not None:
            fetched.append(message)
            consumer.ack(message)
    consumer.close()
    assert [m.args[0] for m in fetched] == ids
    assert _queued(redis_client, settings) == []
    assert redis_client.hlen(f"resumable:{settings.queue_name}.msgs") == 0


def test_two_schedulers_wake_a_burst_of_due_timers_once_each(
    client: Client, settings: Settings, db: Database, redis_client: redis.Redis
) -> None:
    ids = _suspend_due(db, 1_200, "timer")
    schedulers = [SchedulerJobs(settings, db, client.broker, batch=100) for _ in range(2)]
    counts: list[dict[str, int]] = []
    threads = [threading.Thread(target=lambda s=s: counts.append(s.wake_due())) for s in schedulers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sum(c.get("timer", 0) for c in counts) == len(ids)
    sent = Counter(m.args[0] for m in _queued(redis_client, settings))
    assert sent == Counter(str(i) for i in ids)  # every one, none twice
    with db.connection() as conn:
        pending = conn.execute("SELECT count(*) AS n FROM sessions WHERE status = 'pending'")
        assert pending.fetchone() == {"n": len(ids)}


def test_due_retries_beyond_one_batch_are_all_woken(
    client: Client, settings: Settings, db: Database, redis_client: redis.Redis
) -> None:
    ids = _suspend_due(db, 250, "retry")
    assert SchedulerJobs(settings, db, client.broker, batch=100).wake_due_retries() == len(ids)
    assert Counter(m.args[0] for m in _queued(redis_client, settings)) == Counter(
        str(i) for i in ids
    )


def test_an_idle_consumer_gets_its_message_in_the_call_that_waited(
    client: Client, settings: Settings, redis_client: redis.Redis
) -> None:
    """The wake-up and the fetch are one round trip: the ``next()`` that blocked
    on an empty queue returns the message that woke it (not None, to ask again)."""
    consumer = client.broker.consume(settings.queue_name, prefetch=4, timeout=5_000)
    try:
        session_id = str(uuid.uuid4())
        waiting = threading.Event()
        got: list[MessageProxy | None] = []

        def wait_for_one() -> None:
            waiting.set()
            got.append(next(consumer))

        thread = threading.Thread(target=wait_for_one)
        thread.start()
        waiting.wait(timeout=10)
        # Only once the consumer is blocked on the wake-up list (its fetch of
        # nothing came first) does the message go.
        deadline = time.monotonic() + 10
        while not any(c.get("cmd") == "blpop" for c in redis_client.client_list()):
            assert time.monotonic() < deadline, "the consumer never blocked"
            time.sleep(0.005)
        enqueue_sessions(client.broker, settings, [session_id])
        thread.join(timeout=10)
        assert not thread.is_alive()
        assert len(got) == 1 and got[0] is not None
        assert got[0].args == (session_id,)
        sent, fetched = got[0].options[ENQUEUED_AT], got[0].options[FETCHED_AT]
        assert sent <= fetched <= time.time()
        consumer.ack(got[0])
    finally:
        consumer.close()


def test_the_waiting_fetch_works_after_redis_forgot_the_fetch_script(
    client: Client, settings: Settings, redis_client: redis.Redis
) -> None:
    """After a Redis restart (no scripts loaded) the one-round-trip fetch, which
    calls dramatiq's script by its SHA, falls back to dramatiq's own fetch."""
    broker = client.broker
    assert isinstance(broker, WakingRedisBroker)
    assert broker.do_fetch(settings.queue_name, 1) == []  # the script is loaded
    session_id = str(uuid.uuid4())
    enqueue_sessions(client.broker, settings, [session_id])  # its token is waiting
    redis_client.script_flush()
    try:
        fetched = broker.fetch(settings.queue_name, 4, wait=1.0)
    finally:
        # Left to the garbage collector, a connection of this test's pool is
        # reported unclosed (a ResourceWarning) after the failed EVALSHA.
        broker.client.connection_pool.disconnect()
    assert [Message.decode(data).args for data in fetched if data is not None] == [(session_id,)]
    assert redis_client.llen(wakeup_key("resumable", settings.queue_name)) == 0


def test_acks_ride_with_the_next_fetch(
    client: Client, settings: Settings, redis_client: redis.Redis
) -> None:
    """A worker thread's ack costs no round trip of its own: it is sent with the
    consumer's next fetch (or when the consumer closes)."""
    ids = [str(uuid.uuid4()) for _ in range(2)]
    enqueue_sessions(client.broker, settings, ids[:1])
    consumer = client.broker.consume(settings.queue_name, prefetch=4, timeout=100)
    try:
        first = None
        deadline = time.monotonic() + 10
        while first is None and time.monotonic() < deadline:
            first = next(consumer)
        assert first is not None
        stored = f"resumable:{settings.queue_name}.msgs"
        consumer.ack(first)
        assert redis_client.hexists(stored, first.options["redis_message_id"])  # not yet sent
        enqueue_sessions(client.broker, settings, ids[1:])
        second = None
        while second is None and time.monotonic() < deadline:
            second = next(consumer)
        assert second is not None and second.args == (ids[1],)
        assert not redis_client.hexists(stored, first.options["redis_message_id"])
        consumer.ack(second)
    finally:
        consumer.close()
    assert redis_client.hlen(f"resumable:{settings.queue_name}.msgs") == 0
