"""RabbitMQ as the broker (``RESUMABLE_BROKER_URL=amqp://...``), through
dramatiq's own RabbitMQ broker.

What differs from Redis, and why nothing else has to:

- Delivery is pushed. A consumer holds a channel with ``basic.qos`` set to
  its prefetch and RabbitMQ sends it messages as they arrive, so there is no
  wake-up list to block on (``broker/redis.py``): an idle worker gets a
  resumed session's message in one network hop.
- A worker that dies loses nothing and delays nothing: RabbitMQ puts its
  unacknowledged messages back the moment its connection closes, where
  Redis waits out a heartbeat timeout.
- Every send waits for RabbitMQ's publisher confirm, so a send that returned
  is on disk (queues are durable, messages persistent), and a queue deleted
  under us is declared again (dramatiq needs confirms for that). A confirm
  costs a round trip per message, where Redis sends a burst in one.
- Its connections and channels are not thread-safe: dramatiq gives each
  sending thread its own connection, and acks from worker threads reach the
  consumer's connection as callbacks run by its I/O loop. A consumer made
  after a lost connection must not ack deliveries of the one before (tags
  restart at 1 on every channel, so a stale tag would ack another message):
  each message remembers the consumer that received it.
- Rate limits' turns stay in Redis (``broker/rate_limiter.py``): ``REDIS_URL``
  (or the embedded one), connected on a rate-limited call's first turn, so a
  deployment whose agents declare no limits never talks to it.

Every connection fails within ``AMQP_TIMEOUT_SECONDS`` (pika's defaults wait
10-15 s, and a publish to a broker that blocks publishers, say on a memory
alarm, waits for ever), so an unreachable RabbitMQ fails a send the way an
unreachable Redis does, down ``enqueue_after_commit``'s path.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

import pika
import pika.exceptions
import redis
from dramatiq.broker import MessageProxy
from dramatiq.brokers.rabbitmq import RabbitmqBroker, _RabbitmqConsumer
from dramatiq.common import current_millis, dq_name, q_name
from dramatiq.errors import ConnectionClosed
from dramatiq.message import Message
from dramatiq.middleware import CurrentMessage

from resumable._internal.reachability import amqp_parameters
from resumable.broker.consumer import ENQUEUED_AT, FETCHED_AT, Pulse
from resumable.broker.lanes import LANE_OPTION, delayed_on_base, lanes
from resumable.settings import Settings

logger = logging.getLogger(__name__)

#: The longest a connection, a read or a blocked publish may take.
AMQP_TIMEOUT_SECONDS = 5.0

# A durable queue the reconciler declares: gone means RabbitMQ lost its
# definitions (a node reset, a new node), and every queue message with them.
MARKER_QUEUE = "resumable.reconciler-marker"

# A send that failed sooner than this found its connection already dead (the
# server closed it while it idled) and is tried once more on a new one.
_FAILED_AT_ONCE_SECONDS = 1.0

_T = TypeVar("_T")


def connection_parameters(url: str) -> list[pika.URLParameters]:
    """The parameters every connection of the broker uses: `url`'s, with
    ``AMQP_TIMEOUT_SECONDS`` wherever it names no timeout (see
    ``reachability.amqp_parameters``)."""
    return amqp_parameters(url, AMQP_TIMEOUT_SECONDS)


def build_rabbitmq_broker(settings: Settings, url: str, redis_url: str) -> RabbitBroker:
    """The broker every process uses when RESUMABLE_BROKER_URL is an AMQP URL:
    no dramatiq middleware but ``CurrentMessage`` (see ``redis.build_broker``)."""
    broker = RabbitBroker(url, redis_url)
    broker.add_middleware(CurrentMessage())
    return broker


class RabbitBroker(RabbitmqBroker):
    """dramatiq's RabbitMQ broker with what resumable's processes ask of a
    broker (the same names as ``WakingRedisBroker``'s)."""

    def __init__(self, url: str, redis_url: str) -> None:
        super().__init__(url=url, confirm_delivery=True, middleware=[])
        params = connection_parameters(url)
        self.parameters = params[0] if len(params) == 1 else params
        self.fetching = threading.Event()
        self.fetching.set()
        #: Set by the worker process (as on ``WakingRedisBroker``); unused here.
        self.worker_threads = 0
        self._redis_url = redis_url
        self._rate_store: redis.Redis | None = None
        self._pulses: dict[str, Pulse] = {}
        self._lock = threading.Lock()

    @property
    def consumer_class(self) -> type[RabbitConsumer]:
        return RabbitConsumer

    @property
    def rate_store(self) -> redis.Redis:
        """The Redis that keeps rate limits' turns; redis-py connects on the
        first command, so only a rate-limited call does."""
        with self._lock:
            if self._rate_store is None:
                from resumable.broker.redis import redis_client

                self._rate_store = redis_client(self._redis_url)
            return self._rate_store

    def close(self) -> None:
        super().close()
        if self._rate_store is not None:
            self._rate_store.close()

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000) -> RabbitConsumer:
        # A consumer that cannot connect is made again every second by
        # dramatiq: each try is a turn of its loop (``vitals.py``).
        self.pulse(queue_name).beat()
        try:
            consumer: RabbitConsumer = super().consume(queue_name, prefetch, timeout)  # type: ignore[assignment]
        except ConnectionClosed:
            # Perhaps the queue is gone (deleted, or the node lost its
            # definitions): dramatiq only declares a queue it thinks is
            # missing, so without this the consumer would fail every second
            # for ever. Declaring one that exists costs a round trip.
            self.queues_pending.add(q_name(queue_name))
            raise
        return consumer

    def pulse(self, queue_name: str) -> Pulse:
        """See ``WakingRedisBroker.pulse``."""
        with self._lock:
            return self._pulses.setdefault(queue_name, Pulse())

    def stop_fetching(self) -> None:
        """This process is stopping: its consumers cancel their subscriptions
        (RabbitMQ takes back what they had not handed on) and take no more."""
        self.fetching.clear()

    def declare_lanes(self, queue_name: str) -> None:
        """The configured queue (with its delay queue) and its priority lanes
        (without: see ``lanes.py``)."""
        self.declare_queue(queue_name)
        for name in lanes(queue_name):
            if name not in self.queues:
                self.emit_before("declare_queue", name)
                self.queues.add(name)
                self.queues_pending.add(name)
                self.emit_after("declare_queue", name)

    def enqueue(self, message: Message[Any], *, delay: int | None = None) -> Message[Any]:
        if delay is None:
            return self.enqueue_many([message])[0]
        message = delayed_on_base(message)
        delayed = message.copy(
            queue_name=dq_name(message.queue_name), options={"eta": current_millis() + delay}
        )
        self._publish(delayed, delay)
        return delayed

    def enqueue_many(self, messages: Sequence[Message[Any]]) -> list[Message[Any]]:
        """Publish immediate messages, each confirmed by RabbitMQ before the
        next goes (a round trip each: ``pika``'s blocking channel waits for
        every confirm)."""
        sent_at = time.time()
        sent = []
        for message in messages:
            prepared = message.copy(
                # A delayed message now due goes back to its lane (see ``enqueue``).
                queue_name=message.options.get(LANE_OPTION, message.queue_name),
                options={ENQUEUED_AT: sent_at},
            )
            self._publish(prepared, None)
            sent.append(prepared)
        return sent

    def _publish(self, message: Message[Any], delay: int | None) -> None:
        """Publish one message on this thread's channel and wait for its
        confirm, as ``RabbitmqBroker.enqueue`` does, but tried again only
        when the first try failed at once (a connection the server closed
        while it idled), not after it waited out a timeout: dramatiq tries
        six times, each waiting for its connection timeout when RabbitMQ is
        out of reach, 30 s for one send."""
        base = q_name(message.queue_name)
        for attempt in (1, 2):
            started = time.monotonic()
            try:
                self.declare_queue(base, ensure=True)
                self.emit_before("enqueue", message, delay)
                self.channel.basic_publish(
                    exchange="",
                    routing_key=message.queue_name,
                    body=message.encode(),
                    properties=pika.BasicProperties(delivery_mode=2),
                    mandatory=True,  # a queue deleted under us: UnroutableError, declared again
                )
                self.emit_after("enqueue", message, delay)
                return
            except (pika.exceptions.AMQPConnectionError, pika.exceptions.AMQPChannelError) as exc:
                del self.connection  # the next try, and the next send, connect afresh
                unroutable = isinstance(exc, pika.exceptions.UnroutableError)
                if unroutable:
                    self.queues_pending.add(base)
                waited = time.monotonic() - started > _FAILED_AT_ONCE_SECONDS
                if attempt == 2 or (waited and not unroutable):
                    raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]

    def requeue(self, queue_name: str, messages: Sequence[MessageProxy | Message[Any]]) -> None:
        """Give fetched-but-unstarted messages back to RabbitMQ now (a
        stopping worker's), through the consumer that received each."""
        by_consumer: dict[int, tuple[RabbitConsumer, list[MessageProxy]]] = {}
        for message in messages:
            owner = getattr(message, "_resumable_consumer", None)
            if isinstance(owner, RabbitConsumer) and isinstance(message, MessageProxy):
                by_consumer.setdefault(id(owner), (owner, []))[1].append(message)
        for owner, mine in by_consumer.values():
            owner.give_back(mine)

    def ping(self) -> None:
        """One round trip on this thread's connection (``send_gate.py``)."""
        try:
            self.channel.exchange_declare(exchange="amq.direct", passive=True)
        except Exception:
            del self.connection  # the next use connects afresh
            raise

    def _on_a_live_connection(self, call: Callable[[], _T]) -> _T:
        """`call`, tried once more on a new connection when the first try
        failed at once: this thread's connection may be one RabbitMQ dropped
        while it idled, or one from before the node restarted (each of the
        scheduler's job threads holds one, and each failed its first
        reconcile after a restart; measured in the fault matrix)."""
        started = time.monotonic()
        try:
            return call()
        except pika.exceptions.AMQPConnectionError:
            if time.monotonic() - started > _FAILED_AT_ONCE_SECONDS:
                raise
        return call()

    def queue_depths(self, names: Sequence[str]) -> dict[str, int]:
        """Messages ready in each queue (not delivered to a consumer); a
        queue not declared yet holds none."""
        return self._on_a_live_connection(partial(self._queue_depths, names))

    def _queue_depths(self, names: Sequence[str]) -> dict[str, int]:
        depths = {}
        for name in names:
            try:
                declared = self.channel.queue_declare(queue=name, passive=True)
                depths[name] = int(declared.method.message_count)
            except pika.exceptions.ChannelClosedByBroker as exc:
                if exc.reply_code != 404:
                    raise
                del self.channel
                depths[name] = 0
            except Exception:
                del self.connection
                raise
        return depths

    def messages_lost(self) -> bool:
        """Whether RabbitMQ lost its queues since the last call (true on the
        first call against a new node); see ``reconcile.broker_was_reset``."""
        return self._on_a_live_connection(self._messages_lost)

    def _messages_lost(self) -> bool:
        try:
            self.channel.queue_declare(queue=MARKER_QUEUE, passive=True)
            return False
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code != 404:
                raise
            del self.channel
        except Exception:
            del self.connection
            raise
        self.channel.queue_declare(queue=MARKER_QUEUE, durable=True)
        return True

    def forget_marker(self) -> None:
        self.channel.queue_delete(queue=MARKER_QUEUE)


class RabbitConsumer(_RabbitmqConsumer):
    """dramatiq's consumer, with a pulse, a stop that hands back, and acks
    only for deliveries of its own channel (see the module)."""

    def __init__(self, broker: RabbitBroker, queue_name: str, prefetch: int, timeout: int) -> None:
        self._pulse = broker.pulse(queue_name)
        self._fetching = broker.fetching
        self._cancelled = False
        self._idle = min(timeout / 1000, 0.1)
        super().__init__(broker, queue_name, prefetch, timeout)  # type: ignore[no-untyped-call]

    def __next__(self) -> MessageProxy | None:
        # Lets a worker thread just handed a message take the GIL now (see
        # ``WakingConsumer.__next__``).
        time.sleep(0)
        self._pulse.beat()
        if not self._fetching.is_set():
            self._idle_while_stopping()
            return None
        try:
            message: MessageProxy | None = super().__next__()  # type: ignore[no-untyped-call]
        except StopIteration:
            # RabbitMQ cancelled the subscription (its queue was deleted): the
            # consumer is made again, declaring the queue first.
            self.broker.queues_pending.add(q_name(self.queue_name))
            cancelled = RuntimeError("RabbitMQ cancelled the consumer")
            raise ConnectionClosed(cancelled) from None  # type: ignore[no-untyped-call]
        if message is not None:
            message.options[FETCHED_AT] = time.time()
            message._resumable_consumer = self  # type: ignore[attr-defined]
            if not self._fetching.is_set():
                # Stopped while waiting: the stop already returned what the
                # threads had not started, and this one would wait for them.
                self.give_back([message])
                return None
        return message

    def _idle_while_stopping(self) -> None:
        """Cancel the subscription once (RabbitMQ takes back what was
        delivered and not yet handed on), then keep the connection's I/O
        going: the acks of the steps still finishing are sent by it."""
        try:
            if not self._cancelled:
                self._cancelled = True
                self.channel.cancel()
            self.connection.process_data_events(time_limit=self._idle)
        except (pika.exceptions.AMQPError, AssertionError) as exc:
            raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]

    def _mine(self, message: MessageProxy) -> bool:
        return getattr(message, "_resumable_consumer", None) is self

    def ack(self, message: MessageProxy) -> None:
        """A delivery of a consumer since replaced is not acked: its channel
        closed, and RabbitMQ has already put the message back (a duplicate
        run finds nothing to claim)."""
        if self._mine(message):
            super().ack(message)  # type: ignore[no-untyped-call]

    def nack(self, message: MessageProxy) -> None:
        if self._mine(message):
            super().nack(message)  # type: ignore[no-untyped-call]

    def give_back(self, messages: Sequence[MessageProxy]) -> None:
        """Return delivered, unstarted messages to their queue at once."""
        for message in messages:
            tag = message._tag
            if tag not in self.known_tags:
                continue
            self.known_tags.discard(tag)
            try:
                self.connection.add_callback_threadsafe(
                    partial(self.channel.basic_nack, tag, requeue=True)
                )
            except pika.exceptions.AMQPError:
                return  # the connection is gone: RabbitMQ returns them itself
