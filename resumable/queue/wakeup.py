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
        #: The worker threads that run this process's messages (set by the
        #: worker process; 0 when unknown): how many prefetched messages are
        #: spare, which lets a busy consumer refill them in batches.
        self.worker_threads = 0

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

    def fetch(
        self, queue_name: str, count: int, *, acks: Sequence[str] = (), wait: float | None = None
    ) -> list[bytes | None]:
        """Ack these messages (by ``redis_message_id``), optionally block until a
        wake-up token arrives (or `wait` seconds pass), then fetch up to `count`
        messages: all in ONE round trip. The acks, the BLPOP and dramatiq's
        fetch go in one pipeline, and Redis runs a blocked client's next
        command as soon as the BLPOP returns, so a woken consumer has its
        message without asking again.

        A fetch after a wait carries a timestamp (its heartbeat) taken before
        the wait, up to `wait` old: far inside ``heartbeat_timeout``. The script
        is called by its SHA (loaded by the first plain fetch of every
        consumer); after a Redis restart forgot it, dramatiq's own calls, which
        load it, do the acks and the fetch instead (an ack twice is harmless)."""
        pipe = self.client.pipeline(transaction=False)
        for message_id in acks:
            self._dispatch_in(pipe, "ack", queue_name, message_id)
        if wait is not None:
            pipe.blpop([wakeup_key(self.namespace, queue_name)], timeout=wait)
        self._dispatch_in(pipe, "fetch", queue_name, count)
        try:
            messages = pipe.execute()[-1]
        except redis.exceptions.NoScriptError:
            for message_id in acks:
                self.do_ack(queue_name, message_id)
            messages = self.do_fetch(queue_name, count)
        return list(messages)

    def requeue(self, queue_name: str, messages: Sequence[MessageProxy | Message[Any]]) -> None:
        """Put fetched-but-unstarted messages back on their queue and wake
        consumers for them."""
        ids = [message.options["redis_message_id"] for message in messages]
        if ids:
            self.do_requeue(queue_name, *ids)
            self.wake(queue_name, len(ids))


def refill_batch(prefetch: int, threads: int) -> int:
    """How many free prefetch slots a busy consumer waits for before it fetches.

    dramatiq refills as soon as one slot is free, so under load a consumer
    makes a Redis round trip (the fetch script, with the ack riding along)
    for every message. Waiting for several free slots fetches several
    messages, and sends their acks, per round trip. It must never leave a
    thread idle: a thread idles only when no message waits for it, that is
    with fewer than `threads` outstanding, so more than ``prefetch - threads``
    slots free; the batch is at most one more than that. 1 (dramatiq's own
    behaviour) when the thread count is unknown or nothing is spare.
    """
    spare = prefetch - threads
    if threads <= 0 or spare <= 0:
        return 1
    return spare // 2 + 1


class _WakingConsumer(_RedisConsumer):
    def __init__(self, broker: WakingRedisBroker, queue_name: str, prefetch: int, timeout: int):
        super().__init__(broker, queue_name, prefetch, timeout)  # type: ignore[no-untyped-call]
        self._broker = broker
        self._key = wakeup_key(broker.namespace, queue_name)
        self._capacity = threading.Event()
        # Acks of finished messages not yet sent: they ride with this
        # consumer's next fetch (see ``ack``).
        self._acks: list[str] = []
        self._acks_lock = threading.Lock()
        self._refill = refill_batch(prefetch, broker.worker_threads)
        # The last fetch got fewer messages than it asked for: the queue was
        # empty then, and every message sent since left a wake-up token, so
        # the next fetch can wait for one at once (see ``__next__``).
        self._drained = False

    def _take_acks(self) -> list[str]:
        with self._acks_lock:
            acks, self._acks = self._acks, []
        return acks

    def _free_slots(self) -> int:
        return int(self.prefetch - self.outstanding_message_count)

    def _fetch(self, wait: float | None = None) -> list[bytes | None]:
        """The pending acks, then (after a wake-up, when `wait` is given) up
        to the free prefetch of messages: one round trip."""
        acks = self._take_acks()
        count = self._free_slots()
        try:
            messages = self._broker.fetch(self.queue_name, count, acks=acks, wait=wait)
        except BaseException:
            with self._acks_lock:  # not sent: kept for the next try
                self._acks[:0] = acks
            raise
        self._drained = len(messages) < count
        return messages

    def flush_acks(self) -> None:
        acks = self._take_acks()
        for message_id in acks:
            self._broker.do_ack(self.queue_name, message_id)

    def _return_prefetched(self) -> None:
        cached = [Message.decode(data) for data in self.message_cache if data is not None]
        self.message_cache = []
        self._broker.requeue(self.queue_name, cached)

    def close(self) -> None:
        try:
            self.flush_acks()
        finally:
            self._return_prefetched()

    def _idle_while_stopping(self) -> None:
        self._return_prefetched()
        # A fetch of nothing still records this process's heartbeat, so the
        # messages it is finishing are not handed to another worker meanwhile;
        # the acks of those it finished go with it.
        self._broker.fetch(self.queue_name, 0, acks=self._take_acks())
        time.sleep(min(self.timeout / 1000, 0.1))

    def ack(self, message: MessageProxy) -> None:
        """Noted, and sent with this consumer's next fetch (or when it closes),
        not in a round trip of the worker thread's own: under a burst, many
        acks share one. Delivery stays at-least-once: a process killed before
        the acks went out has those messages redelivered, and a duplicate
        message is harmless (its claim finds nothing to run)."""
        with self._acks_lock:
            self._acks.append(message.options["redis_message_id"])
        self.queued_message_ids.discard(message.message_id)
        self._capacity.set()

    def nack(self, message: MessageProxy) -> None:
        try:
            super().nack(message)  # type: ignore[no-untyped-call]
        finally:
            self._capacity.set()

    def __next__(self) -> MessageProxy | None:
        # Called right after dramatiq put the last message on the work queue:
        # the woken worker thread needs the GIL, which this thread would keep
        # through the Python of its next fetch (0.3 ms, measured: most of the
        # consumer-to-thread hand-off of a resume) before a socket call let go
        # of it. A zero sleep lets it go now (0.09 ms).
        time.sleep(0)
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
                if self._free_slots() < self._refill:
                    # Full, or too few slots free to be worth a round trip while
                    # spare messages wait here: wait for threads to finish some.
                    self._capacity.clear()
                    if self._free_slots() < self._refill and (
                        self._capacity.wait(self.timeout / 1000) or self._free_slots() <= 0
                    ):
                        return None  # look again, or still full
                    # Enough slots freed meanwhile, or some stayed free a whole
                    # timeout (long steps): fetch for them, and send the acks.
                if not self._drained:
                    # The last fetch filled every slot it asked for: more may
                    # wait, some without a token (tokens are capped).
                    self.message_cache = self._fetch()
                    if self.message_cache:
                        continue
                # Idle: the last fetch found the queue empty, and an enqueue
                # since then left a token behind, so no wake-up is lost. The
                # fetch that follows the wake-up rides in the same round trip:
                # a message that arrives while the consumer is idle costs it
                # one round trip, not a fetch of nothing and then a wait.
                self.message_cache = self._fetch(wait=self.timeout / 1000)
                if not self.message_cache:
                    return None
                if not self._broker.fetching.is_set():
                    # Stopped while waiting: what was just fetched goes back.
                    self._return_prefetched()
                    return None
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            # A stalled Redis (a timeout, see ``broker.REDIS_TIMEOUT_SECONDS``)
            # is a lost connection too: one line, and the consumer restarts.
            raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]
