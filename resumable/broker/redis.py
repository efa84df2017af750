"""A Redis broker whose idle consumers block instead of sleeping.

dramatiq's Redis consumer polls: with nothing to fetch it sleeps with an
exponential backoff up to the worker timeout, and with its prefetch full it
sleeps too, so a message sent to an idle worker waits tens of milliseconds
(up to the whole timeout) before anyone looks. A resumed agent should start
within milliseconds of its callback, so here every immediate enqueue also
pushes a token on a per-queue wake-up list, and an idle consumer waits on it
with BLPOP; a consumer whose prefetch is full waits for one of its own
messages to be acked. Tokens are hints (the list is trimmed; a stale token
only costs one empty fetch), and the message itself is still stored and
acknowledged by dramatiq's own scripts.

Sending costs one Redis round trip however many messages go at once: the
messages (dramatiq's own encoding, stored where its scripts look for them)
and their wake-up tokens go in one MULTI/EXEC, so a token is never visible
before the message it announces. A scheduler waking thousands of due timers
therefore sends them faster than workers run them, not one round trip (or
two, as dramatiq's script call plus the token did) per session. Enqueues no
longer take part in dramatiq's maintenance lottery; the consumers' fetches,
which run it too, still do.

A stopping worker must not take more work: once ``stop_fetching`` is called,
its consumers fetch nothing (they still heartbeat, so the messages in flight
are not redelivered elsewhere), and what they had prefetched goes straight
back to the queue, with wake-up tokens, for the other workers.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import redis
import redis.asyncio
from dramatiq.broker import MessageProxy
from dramatiq.brokers.redis import RedisBroker, _RedisConsumer
from dramatiq.common import current_millis
from dramatiq.message import Message
from dramatiq.middleware import CurrentMessage

from resumable.broker.consumer import (
    _MAX_TOKENS,
    ENQUEUED_AT,
    Owed,
    Pulse,
    WakingConsumer,
    wakeup_key,
)
from resumable.broker.lanes import LANE_OPTION, delayed_on_base, lanes
from resumable.settings import Settings

NAMESPACE = "resumable"

# How long a Redis command or connection may take before it fails (redis-py
# 8 defaults to 5 s too; before 8, which pyproject admits, it waits for
# ever). A Redis that takes connections and answers nothing, a hung server or
# a stalled proxy, must not hang a sender: a callback's receiver enqueues
# while it holds the session row (see ``inbox``), and a failed enqueue is
# left to the reconciler. Well above a consumer's blocking wait for a wake-up
# (dramatiq's worker timeout, 1 s). A ``socket_timeout`` or
# ``socket_connect_timeout`` in REDIS_URL wins.
REDIS_TIMEOUT_SECONDS = 5.0


def build_broker(settings: Settings, redis_url: str) -> WakingRedisBroker:
    """The broker every process uses, with no dramatiq middleware.

    dramatiq's defaults (AgeLimit, TimeLimit, ShutdownNotifications,
    Callbacks, Pipelines, Retries) all do nothing for our one actor: sessions
    have their own retry policy and per-step time limits (``time_limits.py``),
    and a message only says "run session X". Each would still run its hooks
    for every message (TimeLimit takes a lock twice and keeps a timer
    thread). Without Retries a message whose run raised (the database
    dropped mid-run) is acked rather than moved to dramatiq's dead-letter
    list, which nothing reads: either way the reconciler re-enqueues the
    session from PostgreSQL once its lease expires. The one middleware kept,
    ``CurrentMessage``, only sets a context variable per message.
    """
    broker = WakingRedisBroker(
        connection_pool=_pool(redis_url),
        namespace=NAMESPACE,
        heartbeat_timeout=settings.heartbeat_timeout_ms,
        maintenance_chance=settings.maintenance_chance,
        middleware=[],
    )
    # A step can read the message that ran it (``CurrentMessage.get_current_message()``),
    # with its queue timings (``consumer.ENQUEUED_AT``, ``FETCHED_AT``): a context
    # variable set per message, nothing more.
    broker.add_middleware(CurrentMessage())
    return broker


def _pool(redis_url: str) -> redis.ConnectionPool:
    return redis.ConnectionPool.from_url(
        redis_url,
        socket_timeout=REDIS_TIMEOUT_SECONDS,
        socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
    )


def async_redis_client(redis_url: str) -> redis.asyncio.Redis:
    """An asyncio client with the same timeouts (a URL's own still win)."""
    # Its own pool, which aclose() closes with it.
    return redis.asyncio.Redis.from_url(
        redis_url,
        socket_timeout=REDIS_TIMEOUT_SECONDS,
        socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
    )


def redis_client(redis_url: str) -> redis.Redis:
    """A client with the timeouts every sender's has (rate limits' turns
    when RabbitMQ carries the messages, ``broker/rabbitmq.py``)."""
    return redis.Redis(connection_pool=_pool(redis_url))


# Set in Redis by the reconciler; gone means Redis lost its keys (flushed, or
# restarted without persistence) and every queue message with them.
MARKER_KEY = f"{NAMESPACE}:reconciler-marker"


class WakingRedisBroker(RedisBroker):
    """RedisBroker plus a wake-up token per immediate enqueue."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self.fetching = threading.Event()
        self.fetching.set()
        #: The worker threads that run this process's messages (set by the
        #: worker process; 0 when unknown): how many prefetched messages are
        #: spare, which lets a busy consumer refill them in batches.
        self.worker_threads = 0
        self._owed: dict[str, Owed] = {}
        self._pulses: dict[str, Pulse] = {}
        self._owed_lock = threading.Lock()

    @property
    def consumer_class(self) -> type[_RedisConsumer]:
        return WakingConsumer

    def stop_fetching(self) -> None:
        """This process is stopping: its consumers take no more messages."""
        self.fetching.clear()

    @property
    def rate_store(self) -> redis.Redis:
        """Where rate limits keep their turns: this Redis."""
        return self.client

    def ping(self) -> None:
        self.client.ping()

    def queue_depths(self, names: Sequence[str]) -> dict[str, int]:
        """Messages waiting in each queue (not yet fetched by a worker)."""
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.llen(f"{self.namespace}:{name}")
        return {name: int(depth) for name, depth in zip(names, pipe.execute(), strict=True)}

    def messages_lost(self) -> bool:
        """Whether Redis lost its keys since the last call (also true on the
        first call against a fresh Redis). Atomic, so of several schedulers
        one sees it."""
        return bool(self.client.set(MARKER_KEY, "1", nx=True))

    def forget_marker(self) -> None:
        self.client.delete(MARKER_KEY)

    def enqueue(self, message: Message[Any], *, delay: int | None = None) -> Message[Any]:
        if delay is not None:
            delayed: Message[Any] = super().enqueue(delayed_on_base(message), delay=delay)
            return delayed
        return self.enqueue_many([message])[0]

    def declare_lanes(self, queue_name: str) -> None:
        """Declare the configured queue and its priority lanes (``lanes.py``),
        the lanes without delay queues: a worker then consumes them all."""
        self.declare_queue(queue_name)
        for name in lanes(queue_name):
            if name not in self.queues:
                self.emit_before("declare_queue", name)
                self.queues.add(name)
                self.emit_after("declare_queue", name)

    def enqueue_many(self, messages: Sequence[Message[Any]]) -> list[Message[Any]]:
        """Enqueue immediate messages and their wake-up tokens in one round trip.

        Each message gets a fresh ``redis_message_id`` and the before/after
        enqueue middleware hooks, as ``RedisBroker.enqueue`` does, and is stored
        where dramatiq's ``dispatch`` script stores it: its encoded body in the
        ``<namespace>:<queue>.msgs`` hash under that id, the id pushed on the
        ``<namespace>:<queue>`` list (what the script's ``enqueue`` command does;
        its other work, a heartbeat for this sender and a maintenance lottery,
        is for consumers). One MULTI/EXEC per call: a message's id is never on
        the list without its body, and a token never precedes its message."""
        prepared = self._prepared(messages)
        if prepared:
            pipe = self.client.pipeline(transaction=True)
            self._enqueue_in(pipe, prepared)
            pipe.execute()
            self._sent(prepared)
        return prepared

    async def aenqueue_many(
        self, client: redis.asyncio.Redis, messages: Sequence[Message[Any]]
    ) -> list[Message[Any]]:
        """``enqueue_many`` awaited on an asyncio client of the same server
        (the web's callback route, see ``background_sends``)."""
        prepared = self._prepared(messages)
        if prepared:
            pipe = client.pipeline(transaction=True)
            self._enqueue_in(pipe, prepared)
            await pipe.execute()
            self._sent(prepared)
        return prepared

    def _prepared(self, messages: Sequence[Message[Any]]) -> list[Message[Any]]:
        sent_at = time.time()
        prepared = [
            message.copy(
                # A delayed message now due goes back to its lane (see ``enqueue``).
                queue_name=message.options.get(LANE_OPTION, message.queue_name),
                options={"redis_message_id": str(uuid.uuid4()), ENQUEUED_AT: sent_at},
            )
            for message in messages
        ]
        for message in prepared:
            self.emit_before("enqueue", message, None)
        return prepared

    def _enqueue_in(self, pipe: Any, prepared: list[Message[Any]]) -> None:
        """The MULTI/EXEC's commands, on a sync or an asyncio pipeline."""
        by_queue: dict[str, list[Message[Any]]] = {}
        for message in prepared:
            by_queue.setdefault(message.queue_name, []).append(message)
        for queue_name, queued in by_queue.items():
            ids = [message.options["redis_message_id"] for message in queued]
            key = f"{self.namespace}:{queue_name}"
            pipe.hset(
                f"{key}.msgs", mapping=dict(zip(ids, (m.encode() for m in queued), strict=True))
            )
            pipe.rpush(key, *ids)
        for queue_name, queued in by_queue.items():
            self._wake_in(pipe, queue_name, len(queued))

    def _sent(self, prepared: list[Message[Any]]) -> None:
        for message in prepared:
            self.emit_after("enqueue", message, None)

    def wake(self, queue_name: str, tokens: int) -> None:
        """Wake up to `tokens` idle consumers of the queue (in any process)."""
        pipe = self.client.pipeline(transaction=False)
        self._wake_in(pipe, queue_name, tokens)
        pipe.execute()

    def _wake_in(self, pipe: Any, queue_name: str, tokens: int) -> None:
        key = wakeup_key(self.namespace, queue_name)
        pipe.lpush(key, *([b"1"] * min(tokens, _MAX_TOKENS)))
        pipe.ltrim(key, 0, _MAX_TOKENS - 1)

    def _dispatch_in(self, pipe: Any, command: str, queue_name: str, *args: object) -> None:
        """Queue a call of dramatiq's dispatch script on `pipe`, by its SHA,
        with the arguments ``RedisBroker._dispatch`` gives it."""
        pipe.evalsha(
            self.scripts["dispatch"].sha,
            1,
            self.namespace,
            command,
            current_millis(),
            queue_name,
            self.broker_id,
            self.heartbeat_timeout,
            self.dead_message_ttl,
            self._should_do_maintenance(command),
            self._max_unpack_size(),  # type: ignore[no-untyped-call]
            *args,
        )

    def owed(self, queue_name: str) -> Owed:
        """What this process's consumers of `queue_name` still owe Redis."""
        with self._owed_lock:
            return self._owed.setdefault(queue_name, Owed())

    def pulse(self, queue_name: str) -> Pulse:
        """Beats each time a consumer of `queue_name` in this process goes
        round its loop, whichever consumer dramatiq has made (it makes a new
        one after a connection error): silence means no consumer is running
        (see ``vitals.py``)."""
        with self._owed_lock:
            return self._pulses.setdefault(queue_name, Pulse())

    def fetch(
        self,
        queue_name: str,
        count: int,
        *,
        acks: Sequence[str] = (),
        requeue: Sequence[str] = (),
        wait: float | None = None,
    ) -> list[bytes | None]:
        """Ack these messages (by ``redis_message_id``), put back those in
        `requeue` (fetched, never started) with a wake-up token each,
        optionally block until a wake-up token arrives (or `wait` seconds
        pass), then fetch up to `count` messages: all in ONE round trip. The
        acks, the BLPOP and dramatiq's fetch go in one pipeline, and Redis runs
        a blocked client's next command as soon as the BLPOP returns, so a
        woken consumer has its message without asking again.

        A fetch after a wait carries a timestamp (its heartbeat) taken before
        the wait, up to `wait` old: far inside ``heartbeat_timeout``. The script
        is called by its SHA (loaded by the first plain fetch of every
        consumer); after a Redis restart forgot it, dramatiq's own calls, which
        load it, do the acks, the requeue and the fetch instead (an ack twice
        is harmless)."""
        pipe = self.client.pipeline(transaction=False)
        for message_id in acks:
            self._dispatch_in(pipe, "ack", queue_name, message_id)
        if requeue:
            self._dispatch_in(pipe, "requeue", queue_name, *requeue)
            self._wake_in(pipe, queue_name, len(requeue))
        if wait is not None:
            pipe.blpop([wakeup_key(self.namespace, queue_name)], timeout=wait)
        self._dispatch_in(pipe, "fetch", queue_name, count)
        try:
            messages = pipe.execute()[-1]
        except redis.exceptions.NoScriptError:
            for message_id in acks:
                self.do_ack(queue_name, message_id)
            if requeue:
                self.do_requeue(queue_name, *requeue)
            messages = self.do_fetch(queue_name, count)
        return list(messages)

    def requeue(self, queue_name: str, messages: Sequence[MessageProxy | Message[Any]]) -> None:
        """Put fetched-but-unstarted messages back on their queue and wake
        consumers for them."""
        ids = [message.options["redis_message_id"] for message in messages]
        if ids:
            self.do_requeue(queue_name, *ids)
            self.wake(queue_name, len(ids))
