"""Queue messages sent without holding up the code on an event loop.

dramatiq's brokers are synchronous. A coroutine that sent a woken session's
message itself would hold its whole event loop for the send, and a Redis
that takes the connection and never answers would freeze every request of
the process for ``REDIS_TIMEOUT_SECONDS``. So the web's callback route hands
the message to a sender (``send``, which returns at once) and goes on to its
commit. The sender sends it while the commit's WAL flush is under way, as
the thread-bound receiver does (see ``inbox``):

- ``LoopSender``, for Redis: one task on the loop, awaiting the broker's
  own pipeline (``WakingRedisBroker.aenqueue_many``) on an asyncio client.
  It runs at the route's next await, with no thread to wake: measured in
  ``benchmarks/resume.py``, a sender thread's message left 8 ms after the
  callback's transaction began under 8 concurrent senders (waiting for a
  CPU and the GIL) where the thread-bound receiver's left after 1.5.
- ``ThreadSender``, for other brokers (RabbitMQ's client is not asyncio):
  one daemon thread.

Either way, what queues up behind a slow send goes out together, and a send
that fails, or never happens because the process died first, is the case of
any failed send after a commit (``enqueue_after_commit``): the session is
pending in PostgreSQL and the scheduler's reconciler sends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from typing import TYPE_CHECKING, Protocol

from resumable.broker.messages import (
    ENQUEUE_CHUNK,
    aenqueue_after_commit,
    enqueue_after_commit,
    log_not_enqueued,
)
from resumable.broker.redis import WakingRedisBroker, async_redis_client
from resumable.priorities import Routed

if TYPE_CHECKING:
    import dramatiq

    from resumable.settings import Settings

logger = logging.getLogger(__name__)


class Sender(Protocol):
    """Sends "run" messages for woken sessions, off the caller's path."""

    async def start(self) -> None: ...

    def send(self, ref: Routed) -> None:
        """Queue the session's message; returns at once."""

    async def close(self, timeout: float) -> bool:
        """Send what is queued, then stop; whether that ended within
        `timeout` seconds (what a stalled broker kept is the reconciler's)."""


def sender_for(broker: dramatiq.Broker, settings: Settings, redis_url: str, *, why: str) -> Sender:
    if isinstance(broker, WakingRedisBroker):
        return LoopSender(broker, settings, redis_url, why=why)
    return ThreadSender(broker, settings, why=why)


def _log_bug(why: str, count: int) -> None:
    """A send that raised something other than an unreachable broker's error."""
    logger.exception(
        "%s: sending %d message(s) failed; the scheduler's reconciler will send them",
        why,
        count,
        extra={"action": "enqueue_failed", "why": why, "sessions": count},
    )


class LoopSender:
    """Sends on the event loop it was started on, one pipeline at a time."""

    def __init__(
        self, broker: WakingRedisBroker, settings: Settings, redis_url: str, *, why: str
    ) -> None:
        self.broker = broker
        self.settings = settings
        self.why = why
        self._client = async_redis_client(redis_url)
        self._queue: asyncio.Queue[Routed] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._in_flight: list[Routed] = []

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="resumable-sender")

    def send(self, ref: Routed) -> None:
        self._queue.put_nowait(ref)

    async def close(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._queue.join(), timeout)
            drained = True
        except TimeoutError:
            drained = False
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        # What a stalled broker kept from going (the send cut short, and what
        # queued behind it) is named in the one warning, for the reconciler.
        left = list(self._in_flight)
        while not self._queue.empty():
            left.append(self._queue.get_nowait())
        log_not_enqueued(left, self.why, "the web process stopped before the broker answered")
        await self._client.aclose()
        return drained

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < ENQUEUE_CHUNK and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            self._in_flight = batch
            try:
                await aenqueue_after_commit(
                    self.broker, self._client, self.settings, batch, why=self.why
                )
            except Exception:  # a bug, not an unreachable broker: say so, keep sending
                _log_bug(self.why, len(batch))
            self._in_flight = []
            for _ in batch:
                self._queue.task_done()


_STOP = object()


class ThreadSender:
    """Sends on one daemon thread of its own."""

    def __init__(self, broker: dramatiq.Broker, settings: Settings, *, why: str) -> None:
        self.broker = broker
        self.settings = settings
        self.why = why
        self._queue: queue.SimpleQueue[Routed | object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="resumable-sender", daemon=True)

    async def start(self) -> None:
        self._thread.start()

    def send(self, ref: Routed) -> None:
        self._queue.put(ref)

    async def close(self, timeout: float) -> bool:
        self._queue.put(_STOP)
        await asyncio.to_thread(self._thread.join, timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            batch: list[Routed] = []
            item = self._queue.get()
            while True:
                if item is _STOP:
                    stopping = True
                    break
                assert isinstance(item, Routed)
                batch.append(item)
                if len(batch) >= ENQUEUE_CHUNK:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                try:
                    enqueue_after_commit(self.broker, self.settings, batch, why=self.why)
                except Exception:  # a bug, not an unreachable broker: say so, keep sending
                    _log_bug(self.why, len(batch))
