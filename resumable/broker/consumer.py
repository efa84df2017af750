"""The consumer side of the Redis broker (``redis.py``): how a worker's
consumer fetches, waits for wake-up tokens, acks and gives messages back.

An idle consumer blocks on its queue's wake-up list (BLPOP) instead of
sleeping, and the fetch that follows a wake-up rides in the same round trip;
a busy one waits for its threads to free enough prefetch slots to be worth a
fetch; acks ride with the next fetch. What a consumer could not send (a
broken connection) is owed by the queue, not the consumer, so the consumer
dramatiq makes in its place sends it (see ``Owed``), and ``close`` never
raises: dramatiq calls it where an exception ends the consumer thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import redis
from dramatiq.broker import MessageProxy
from dramatiq.brokers.redis import _RedisConsumer
from dramatiq.errors import ConnectionClosed
from dramatiq.message import Message

if TYPE_CHECKING:
    from resumable.broker.redis import WakingRedisBroker

logger = logging.getLogger(__name__)


_MAX_TOKENS = 64

# Wall-clock times (epoch seconds) a message carries: when it was sent (in its
# options, so every process sees it) and when this process's consumer handed
# it to a worker thread (set on that copy only). A step reads them through dramatiq's
# ``CurrentMessage``; ``benchmarks/resume.py`` splits a resume's hops with them.
ENQUEUED_AT = "enqueued_at"
FETCHED_AT = "fetched_at"


def wakeup_key(namespace: str, queue_name: str) -> str:
    return f"{namespace}:{queue_name}.wakeup"


class Pulse:
    """A consumer loop's sign of life (watched by the worker's vital signs,
    ``queue/vitals.py``): ``beat()`` each time round, ``age()`` since."""

    def __init__(self) -> None:
        self._last = time.monotonic()

    def beat(self) -> None:
        self._last = time.monotonic()

    def age(self) -> float:
        return time.monotonic() - self._last


class Owed:
    """Acks and returns a queue's consumers in this process have not sent yet.

    They belong to the queue, not to one consumer: dramatiq replaces a
    consumer whose connection failed with a new one (a Redis restart, a
    network cut), and what the old one could not send (the acks of messages
    its threads finished, the messages it had prefetched and not started)
    goes with the new one's first fetch instead of being dropped or, worse,
    raised from the old one's ``close``. Worker threads add acks from their
    own threads, hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._acks: list[str] = []
        self._requeue: list[str] = []

    def add(self, acks: Sequence[str] = (), requeue: Sequence[str] = ()) -> None:
        with self._lock:
            self._acks.extend(acks)
            self._requeue.extend(requeue)

    def take(self) -> tuple[list[str], list[str]]:
        with self._lock:
            taken = self._acks, self._requeue
            self._acks, self._requeue = [], []
        return taken

    def give_back(self, acks: Sequence[str], requeue: Sequence[str]) -> None:
        """Not sent after all: first in line for the next try."""
        with self._lock:
            self._acks[:0] = acks
            self._requeue[:0] = requeue

    def __len__(self) -> int:
        with self._lock:
            return len(self._acks) + len(self._requeue)


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


class WakingConsumer(_RedisConsumer):
    def __init__(self, broker: WakingRedisBroker, queue_name: str, prefetch: int, timeout: int):
        super().__init__(broker, queue_name, prefetch, timeout)  # type: ignore[no-untyped-call]
        self._broker = broker
        self._key = wakeup_key(broker.namespace, queue_name)
        self._capacity = threading.Event()
        # Acks of finished messages not yet sent ride with this queue's next
        # fetch (see ``ack``), as do prefetched messages to put back.
        self._owed = broker.owed(queue_name)
        self._pulse = broker.pulse(queue_name)
        self._refill = refill_batch(prefetch, broker.worker_threads)
        # The last fetch got fewer messages than it asked for: the queue was
        # empty then, and every message sent since left a wake-up token, so
        # the next fetch can wait for one at once (see ``__next__``).
        self._drained = False

    def _free_slots(self) -> int:
        return int(self.prefetch - self.outstanding_message_count)

    def _fetch(self, count: int, wait: float | None = None) -> list[bytes | None]:
        """What is owed (acks, messages to put back), then (after a wake-up,
        when `wait` is given) up to `count` messages: one round trip."""
        acks, requeue = self._owed.take()
        try:
            messages = self._broker.fetch(
                self.queue_name, count, acks=acks, requeue=requeue, wait=wait
            )
        except BaseException:
            self._owed.give_back(acks, requeue)  # not sent: kept for the next try
            raise
        return messages

    def _fetch_more(self, wait: float | None = None) -> list[bytes | None]:
        count = self._free_slots()
        messages = self._fetch(count, wait)
        self._drained = len(messages) < count
        return messages

    def _put_back_prefetched(self) -> None:
        """What was prefetched and not started is owed back to the queue."""
        cached = [Message.decode(data) for data in self.message_cache if data is not None]
        self.message_cache = []
        self._owed.add(requeue=[message.options["redis_message_id"] for message in cached])

    def close(self) -> None:
        """Send what is owed, and never raise.

        dramatiq calls this outside any ``try`` after the consumer's
        connection failed (``ConsumerThread.run``), and swallows only its own
        connection error: anything raised here would end the consumer thread
        for good while the process looked alive (the Redis-restart outage of
        issue 36). With Redis still down, what is owed waits for the next
        consumer's first fetch."""
        try:
            self._put_back_prefetched()
            if len(self._owed):
                self._fetch(0)
        except Exception as exc:
            logger.warning(
                "could not settle with Redis while closing a consumer of %r (%s: %s);"
                " %d ack(s) and return(s) go with the next fetch",
                self.queue_name,
                type(exc).__name__,
                exc,
                len(self._owed),
                extra={"action": "consumer_close_deferred"},
            )

    def _idle_while_stopping(self) -> None:
        self._put_back_prefetched()
        # A fetch of nothing still records this process's heartbeat, so the
        # messages it is finishing are not handed to another worker meanwhile;
        # the acks of those it finished and the returns go with it.
        self._fetch(0)
        time.sleep(min(self.timeout / 1000, 0.1))

    def ack(self, message: MessageProxy) -> None:
        """Noted, and sent with this queue's next fetch (or when the consumer
        closes), not in a round trip of the worker thread's own: under a
        burst, many acks share one. Delivery stays at-least-once: a process
        killed before the acks went out has those messages redelivered, and a
        duplicate message is harmless (its claim finds nothing to run)."""
        self._owed.add(acks=[message.options["redis_message_id"]])
        self.queued_message_ids.discard(message.message_id)
        self._capacity.set()

    def nack(self, message: MessageProxy) -> None:
        try:
            super().nack(message)  # type: ignore[no-untyped-call]
        except redis.RedisError as exc:  # a timeout too: dramatiq retries its own error
            raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]
        finally:
            self._capacity.set()

    def __next__(self) -> MessageProxy | None:
        # Called right after dramatiq put the last message on the work queue:
        # the woken worker thread needs the GIL, which this thread would keep
        # through the Python of its next fetch (0.3 ms, measured: most of the
        # consumer-to-thread hand-off of a resume) before a socket call let go
        # of it. A zero sleep lets it go now (0.09 ms).
        time.sleep(0)
        self._pulse.beat()
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
                    self.message_cache = self._fetch_more()
                    if self.message_cache:
                        continue
                # Idle: the last fetch found the queue empty, and an enqueue
                # since then left a token behind, so no wake-up is lost. The
                # fetch that follows the wake-up rides in the same round trip:
                # a message that arrives while the consumer is idle costs it
                # one round trip, not a fetch of nothing and then a wait.
                self.message_cache = self._fetch_more(wait=self.timeout / 1000)
                if not self.message_cache:
                    return None
                if not self._broker.fetching.is_set():
                    # Stopped while waiting: what was just fetched goes back.
                    self._put_back_prefetched()
                    return None
        except redis.RedisError as exc:
            # A lost connection, a stalled Redis (a timeout, see
            # ``broker.REDIS_TIMEOUT_SECONDS``) or one that restarted mid-call
            # (a script or a reply it no longer knows): one line, and the
            # consumer restarts.
            raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]
