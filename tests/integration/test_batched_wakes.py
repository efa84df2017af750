"""Waking many sessions at once: the scheduler commits a batch of due wake-ups
and sends their queue messages and wake-up tokens in one Redis round trip, in
dramatiq's own message format, once per session however many schedulers run."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest
import redis
from dramatiq.broker import MessageProxy
from dramatiq.message import Message

from resumable.broker.consumer import ENQUEUED_AT, FETCHED_AT, refill_batch, wakeup_key
from resumable.broker.messages import SESSION_ACTOR, enqueue_sessions
from resumable.broker.redis import WakingRedisBroker, build_broker
from resumable.client import Client
from resumable.models.database import Database
from resumable.scheduler.jobs import SchedulerJobs
from resumable.settings import Settings
from tests.conftest import queued_messages

# Tests of the Redis broker itself (its lists, tokens and scripts).
pytestmark = pytest.mark.redis_broker


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
    queued = queued_messages(redis_client, settings)
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
    assert queued_messages(redis_client, settings) == []
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
    sent = Counter(m.args[0] for m in queued_messages(redis_client, settings))
    assert sent == Counter(str(i) for i in ids)  # every one, none twice
    with db.connection() as conn:
        pending = conn.execute("SELECT count(*) AS n FROM sessions WHERE status = 'pending'")
        assert pending.fetchone() == {"n": len(ids)}


def test_due_retries_beyond_one_batch_are_all_woken(
    client: Client, settings: Settings, db: Database, redis_client: redis.Redis
) -> None:
    ids = _suspend_due(db, 250, "retry")
    assert SchedulerJobs(settings, db, client.broker, batch=100).wake_due_retries() == len(ids)
    assert Counter(m.args[0] for m in queued_messages(redis_client, settings)) == Counter(
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


class _Counting:
    """Mixed into a redis-py connection class: counts what it sends, one call
    per round trip (a pipeline's commands go in one)."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        _Counting.sent += 1
        super().send_packed_command(command, check_health)  # type: ignore[misc]


def test_a_message_that_finds_the_consumer_idle_costs_it_one_round_trip(
    client: Client, settings: Settings, redis_client: redis.Redis
) -> None:
    """Once a fetch has found the queue empty, the next one waits for a token
    and fetches in one pipeline at once: each message that arrives while the
    consumer is idle costs one round trip, not a fetch of nothing and a wait."""
    broker = build_broker(settings, settings.redis_url or "")
    pool = broker.client.connection_pool
    pool.connection_class = type("Counted", (_Counting, pool.connection_class), {})
    pool.connection_kwargs["client_name"] = "counted-consumer"
    assert broker.do_fetch(settings.queue_name, 1) == []  # the fetch script is loaded
    consumer = broker.consume(settings.queue_name, prefetch=4, timeout=5_000)

    def blocked() -> bool:
        return any(
            c.get("name") == "counted-consumer" and c.get("cmd") == "blpop"
            for c in redis_client.client_list()
        )

    try:
        _Counting.sent = 0
        for _ in range(5):
            session_id = str(uuid.uuid4())
            got: list[MessageProxy | None] = []
            thread = threading.Thread(target=lambda got=got: got.append(next(consumer)))
            thread.start()
            deadline = time.monotonic() + 10
            while not blocked():
                assert time.monotonic() < deadline, "the consumer never waited"
                time.sleep(0.002)
            enqueue_sessions(client.broker, settings, [session_id])
            thread.join(timeout=10)
            assert len(got) == 1 and got[0] is not None and got[0].args == (session_id,)
            consumer.ack(got[0])  # sent with the next fetch: no round trip of its own
        # The first message: a fetch of nothing, then the wait; each other: the wait.
        assert _Counting.sent == 6
    finally:
        consumer.close()
        broker.close()


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


def test_the_refill_batch_never_leaves_a_thread_idle() -> None:
    """A thread idles only with fewer than `threads` messages outstanding, so
    with more than ``prefetch - threads`` slots free: the batch a busy consumer
    waits for is never more than one above that."""
    assert refill_batch(16, 0) == 1  # thread count unknown: dramatiq's own refill
    assert refill_batch(16, 8) == 5
    for threads in range(1, 40):
        for prefetch in range(1, 120):
            batch = refill_batch(prefetch, threads)
            assert 1 <= batch <= max(1, prefetch - threads + 1), (prefetch, threads)


def _full_consumer(
    broker: WakingRedisBroker, settings: Settings, ids: list[str], timeout: int
) -> tuple[Any, list[MessageProxy]]:
    """A consumer of 2 threads' worth with a prefetch of 6 (a refill batch of
    3), holding the first 6 of `ids` (enqueued here), none acked yet."""
    enqueue_sessions(broker, settings, ids)
    broker.worker_threads = 2
    try:
        consumer = broker.consume(settings.queue_name, prefetch=6, timeout=timeout)
    finally:
        broker.worker_threads = 0
    deadline = time.monotonic() + 10
    taken: list[MessageProxy] = []
    while len(taken) < 6:
        assert time.monotonic() < deadline, "the consumer fetched nothing"
        message = next(consumer)
        if message is not None:
            taken.append(message)
    return consumer, taken


def test_a_busy_consumer_refills_its_prefetch_in_batches(
    client: Client, settings: Settings, redis_client: redis.Redis
) -> None:
    """A full consumer waits for 3 free slots, then fetches 3 messages (and
    sends the 3 acks) in one round trip, instead of a round trip per finished
    message."""
    assert isinstance(client.broker, WakingRedisBroker)
    ids = [str(uuid.uuid4()) for _ in range(20)]
    key, stored = f"resumable:{settings.queue_name}", f"resumable:{settings.queue_name}.msgs"
    consumer, taken = _full_consumer(client.broker, settings, ids, timeout=5_000)
    try:
        assert redis_client.llen(key) == 14  # one fetch of 6
        consumer.ack(taken[0])  # one slot free: not worth a round trip yet
        answers: list[MessageProxy | None] = []
        waiting = threading.Thread(target=lambda: answers.append(next(consumer)))
        waiting.start()
        capacity = consumer._capacity
        deadline = time.monotonic() + 10
        while capacity.is_set():  # until the consumer has started to wait
            assert time.monotonic() < deadline, "the consumer never waited"
            time.sleep(0.001)
        consumer.ack(taken[1])
        consumer.ack(taken[2])
        waiting.join(timeout=10)
        assert answers == [None]  # woken by the acks, it asks again: nothing fetched meanwhile
        assert redis_client.llen(key) == 14
        assert redis_client.hexists(stored, taken[0].options["redis_message_id"])  # not sent yet
        refilled = [next(consumer) for _ in range(3)]  # three free: one round trip for three
        assert [m.args if m else None for m in refilled] == [(i,) for i in ids[6:9]]
        assert redis_client.llen(key) == 11
        assert not any(
            redis_client.hexists(stored, m.options["redis_message_id"]) for m in taken[:3]
        )
    finally:
        consumer.close()


def test_a_slot_left_free_a_whole_timeout_is_filled(
    client: Client, settings: Settings, redis_client: redis.Redis
) -> None:
    """Fewer free slots than a batch, for as long as the consumer's timeout
    (long steps): it fetches for them anyway, and its acks go out."""
    assert isinstance(client.broker, WakingRedisBroker)
    ids = [str(uuid.uuid4()) for _ in range(10)]
    key, stored = f"resumable:{settings.queue_name}", f"resumable:{settings.queue_name}.msgs"
    consumer, taken = _full_consumer(client.broker, settings, ids, timeout=200)
    try:
        consumer.ack(taken[0])
        started = time.monotonic()
        late = next(consumer)
        assert late is not None and late.args == (ids[6],)
        assert time.monotonic() - started >= 0.19  # after the timeout, not at once
        assert redis_client.llen(key) == 3
        assert not redis_client.hexists(stored, taken[0].options["redis_message_id"])
    finally:
        consumer.close()
