"""Queue messages sent from a thread of their own, for code on an event loop.

dramatiq's brokers are synchronous. A coroutine that sent a woken session's
message itself would hold its whole event loop for the send, and a Redis
that takes the connection and never answers would freeze every request of
the process for ``REDIS_TIMEOUT_SECONDS``. So the web's callback route hands
the message to this sender without waiting (a put on a queue) and goes on
to its commit; the sender's thread sends it, usually while the commit's WAL
flush is under way, as the thread-bound receiver does (see ``inbox``).

A send that fails, or that never happens because the process died first,
is the same case as any failed send after a commit (``enqueue_after_commit``):
the session is pending in PostgreSQL and the scheduler's reconciler sends it.
Messages that queue up behind a slow send go out together, in one pipeline.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import TYPE_CHECKING

from resumable.broker.messages import ENQUEUE_CHUNK, enqueue_after_commit
from resumable.priorities import Routed

if TYPE_CHECKING:
    import dramatiq

    from resumable.settings import Settings

logger = logging.getLogger(__name__)

_STOP = object()


class BackgroundSender:
    """Sends "run" messages for woken sessions on one daemon thread."""

    def __init__(self, broker: dramatiq.Broker, settings: Settings, *, why: str) -> None:
        self.broker = broker
        self.settings = settings
        self.why = why
        self._queue: queue.SimpleQueue[Routed | object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="resumable-sender", daemon=True)
        self._thread.start()

    def send(self, ref: Routed) -> None:
        """Queue the session's message; returns at once."""
        self._queue.put(ref)

    def close(self, timeout: float) -> bool:
        """Send what is queued, then stop; whether the thread ended within
        `timeout` seconds (a stalled broker may hold it: it is a daemon, and
        what it did not send is the reconciler's)."""
        self._queue.put(_STOP)
        self._thread.join(timeout)
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
                self._send(batch)

    def _send(self, batch: list[Routed]) -> None:
        try:
            enqueue_after_commit(self.broker, self.settings, batch, why=self.why)
        except Exception:  # a bug, not an unreachable broker: say so, keep sending
            logger.exception(
                "%s: sending %d message(s) failed; the scheduler's reconciler will send them",
                self.why,
                len(batch),
                extra={"action": "enqueue_failed", "why": self.why, "sessions": len(batch)},
            )
