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
from dramatiq.broker import MessageProxy
from dramatiq.brokers.redis import RedisBroker, _RedisConsumer
from dramatiq.common import current_millis
from dramatiq.errors import ConnectionClosed
from dramatiq.message import Message

_MAX_TOKENS = 64

# Wall-clock times (epoch seconds) a message carries: when it was sent (in its
# options, so every process sees it) and when this process's consumer handed
# it to a worker thread (set on that copy only). A step reads them through dramatiq's
# ``CurrentMessage``; ``benchmarks/resume.py`` splits a resume's hops with them.
ENQUEUED_AT = "enqueued_at"
FETCHED_AT = "fetched_at"


def wakeup_key(namespace: str, queue_name: str) -> str:
    return f"{namespace}:{queue_name}.wakeup"


class WakingRedisBroker(RedisBroker):
    """RedisBroker plus a wake-up token per immediate enqueue."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self.fetching = threading.Event()
        self.fetching.set()

    @property
    def consumer_class(self) -> type[_RedisConsumer]:
        return _WakingConsumer

    def stop_fetching(self) -> None:
        """This process is stopping: its consumers take no more messages."""
        self.fetching.clear()

    def enqueue(self, message: Message[Any], *, delay: int | None = None) -> Message[Any]:
        if delay is not None:
            delayed: Message[Any] = super().enqueue(message, delay=delay)
            return delayed
        return self.enqueue_many([message])[0]

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
        sent_at = time.time()
        prepared = [
            message.copy(options={"redis_message_id": str(uuid.uuid4()), ENQUEUED_AT: sent_at})
            for message in messages
        ]
        if not prepared:
            return []
        for message in prepared:
            self.emit_before("enqueue", message, None)
        by_queue: dict[str, list[Message[Any]]] = {}
        for message in prepared:
            by_queue.setdefault(message.queue_name, []).append(message)
        pipe = self.client.pipeline(transaction=True)
        for queue_name, queued in by_queue.items():
            ids = [message.options["redis_message_id"] for message in queued]
            key = f"{self.namespace}:{queue_name}"
            pipe.hset(
                f"{key}.msgs", mapping=dict(zip(ids, (m.encode() for m in queued), strict=True))
            )
            pipe.rpush(key, *ids)
        for queue_name, queued in by_queue.items():
            token_key = wakeup_key(self.namespace, queue_name)
            pipe.lpush(token_key, *([b"1"] * min(len(queued), _MAX_TOKENS)))
            pipe.ltrim(token_key, 0, _MAX_TOKENS - 1)
        pipe.execute()
        for message in prepared:
            self.emit_after("enqueue", message, None)
        return prepared

    def wake(self, queue_name: str, tokens: int) -> None:
        """Wake up to `tokens` idle consumers of the queue (in any process)."""
        key = wakeup_key(self.namespace, queue_name)
        pipe = self.client.pipeline(transaction=False)
        pipe.lpush(key, *([b"1"] * min(tokens, _MAX_TOKENS)))
        pipe.ltrim(key, 0, _MAX_TOKENS - 1)
        pipe.execute()

    def wait_and_fetch(self, queue_name: str, count: int, timeout: float) -> list[bytes | None]:
        """Block until a wake-up token arrives (or `timeout` seconds pass), then
        fetch up to `count` messages, in ONE round trip: the BLPOP and
        dramatiq's fetch script go in one pipeline, and Redis runs a blocked
        client's next command as soon as the BLPOP returns, so a woken
        consumer has its message without asking again.

        The fetch's timestamp (its heartbeat) is taken before the wait, so it
        is up to `timeout` old: far inside ``heartbeat_timeout``. The script is
        called by its SHA (loaded by the fetch every consumer makes before it
        waits); after a Redis restart forgot it, the plain fetch loads it."""
        pipe = self.client.pipeline(transaction=False)
        pipe.blpop([wakeup_key(self.namespace, queue_name)], timeout=timeout)
        pipe.evalsha(
            self.scripts["dispatch"].sha,
            1,
            self.namespace,
            "fetch",
            current_millis(),
            queue_name,
            self.broker_id,
            self.heartbeat_timeout,
            self.dead_message_ttl,
            self._should_do_maintenance("fetch"),
            self._max_unpack_size(),  # type: ignore[no-untyped-call]
            count,
        )
        try:
            _, messages = pipe.execute()
        except redis.exceptions.NoScriptError:
            messages = self.do_fetch(queue_name, count)
        return list(messages)

    def requeue(self, queue_name: str, messages: Sequence[MessageProxy | Message[Any]]) -> None:
        """Put fetched-but-unstarted messages back on their queue and wake
        consumers for them."""
        ids = [message.options["redis_message_id"] for message in messages]
        if ids:
            self.do_requeue(queue_name, *ids)
            self.wake(queue_name, len(ids))


class _WakingConsumer(_RedisConsumer):
    def __init__(self, broker: WakingRedisBroker, queue_name: str, prefetch: int, timeout: int):
        super().__init__(broker, queue_name, prefetch, timeout)  # type: ignore[no-untyped-call]
        self._broker = broker
        self._key = wakeup_key(broker.namespace, queue_name)
        self._capacity = threading.Event()

    def _return_prefetched(self) -> None:
        cached = [Message.decode(data) for data in self.message_cache if data is not None]
        self.message_cache = []
        self._broker.requeue(self.queue_name, cached)

    def close(self) -> None:
        self._return_prefetched()

    def _idle_while_stopping(self) -> None:
        self._return_prefetched()
        # A fetch of nothing still records this process's heartbeat, so the
        # messages it is finishing are not handed to another worker meanwhile.
        self._broker.do_fetch(self.queue_name, 0)
        time.sleep(min(self.timeout / 1000, 0.1))

    def ack(self, message: MessageProxy) -> None:
        try:
            super().ack(message)  # type: ignore[no-untyped-call]
        finally:
            self._capacity.set()

    def nack(self, message: MessageProxy) -> None:
        try:
            super().nack(message)  # type: ignore[no-untyped-call]
        finally:
            self._capacity.set()

    def __next__(self) -> MessageProxy | None:
        try:
            if not self._broker.fetching.is_set():
                self._idle_while_stopping()
                return None
            while True:
                if self.message_cache:
                    data = self.message_cache.pop(0)
                    if data is None:
                        continue
                    message = Message.decode(data)
                    message.options[FETCHED_AT] = time.time()
                    self.queued_message_ids.add(message.message_id)
                    return MessageProxy(message)
                if self.outstanding_message_count >= self.prefetch:
                    # Full: wait for a worker thread to finish one of ours.
                    self._capacity.clear()
                    if self.outstanding_message_count >= self.prefetch:
                        self._capacity.wait(self.timeout / 1000)
                    return None
                self.message_cache = self.broker.do_fetch(
                    self.queue_name, self.prefetch - self.outstanding_message_count
                )
                if self.message_cache:
                    continue
                # Idle: an enqueue between the fetch above and this wait left a
                # token behind, so no wake-up is lost. The fetch that follows
                # the wake-up rides in the same round trip.
                self.message_cache = self._broker.wait_and_fetch(
                    self.queue_name,
                    self.prefetch - self.outstanding_message_count,
                    self.timeout / 1000,
                )
                if not self.message_cache:
                    return None
                if not self._broker.fetching.is_set():
                    # Stopped while waiting: what was just fetched goes back.
                    self._return_prefetched()
                    return None
        except redis.ConnectionError as exc:
            raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]
