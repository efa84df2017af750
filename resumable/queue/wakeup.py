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
"""

from __future__ import annotations

import threading
from typing import Any

import redis
from dramatiq.broker import MessageProxy
from dramatiq.brokers.redis import RedisBroker, _RedisConsumer
from dramatiq.errors import ConnectionClosed
from dramatiq.message import Message

_MAX_TOKENS = 64


def wakeup_key(namespace: str, queue_name: str) -> str:
    return f"{namespace}:{queue_name}.wakeup"


class WakingRedisBroker(RedisBroker):
    """RedisBroker plus a wake-up token per immediate enqueue."""

    @property
    def consumer_class(self) -> type[_RedisConsumer]:
        return _WakingConsumer

    def enqueue(self, message: Message[Any], *, delay: int | None = None) -> Message[Any]:
        enqueued: Message[Any] = super().enqueue(message, delay=delay)
        if delay is None:
            key = wakeup_key(self.namespace, message.queue_name)
            pipe = self.client.pipeline(transaction=False)
            pipe.lpush(key, b"1")
            pipe.ltrim(key, 0, _MAX_TOKENS - 1)
            pipe.execute()
        return enqueued


class _WakingConsumer(_RedisConsumer):
    def __init__(self, broker: WakingRedisBroker, queue_name: str, prefetch: int, timeout: int):
        super().__init__(broker, queue_name, prefetch, timeout)  # type: ignore[no-untyped-call]
        self._key = wakeup_key(broker.namespace, queue_name)
        self._capacity = threading.Event()

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
            while True:
                if self.message_cache:
                    data = self.message_cache.pop(0)
                    if data is None:
                        continue
                    message = Message.decode(data)
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
                # token behind, so no wake-up is lost.
                self.broker.client.blpop([self._key], timeout=self.timeout / 1000)
                return None
        except redis.ConnectionError as exc:
            raise ConnectionClosed(exc) from None  # type: ignore[no-untyped-call]
