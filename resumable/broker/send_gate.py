"""Sends to a broker that stopped answering fail at once, until it answers again.

A send to a Redis that does not answer waits for the socket timeout
(``REDIS_TIMEOUT_SECONDS``, 5 s), and the web sends a woken session's
message while its transaction still holds the session row (``inbox``): cut
off from the broker, the web answered every callback 5 s late and held a
row lock and a pooled connection meanwhile (found by tests/multihost's
``web_broker_cut``). Nothing was lost (the reconciler sends what was not
sent) but a sender that waits 5 s saw every callback fail, and a burst of
them would have taken every pooled connection.

So the first send that finds the broker out of reach shuts the gate: later
sends fail at once, down the same path (``enqueue_after_commit`` logs them
and the reconciler sends them), and one background thread pings the broker,
backing off, until it answers; then the gate opens. One request per outage
pays the timeout instead of every request.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import dramatiq

logger = logging.getLogger(__name__)

# The first ping after a shut gate, and the longest pause between pings.
FIRST_PING_DELAY = 0.2
MAX_PING_DELAY = 2.0


class SendGate:
    """Whether sends to one broker are worth trying now; see the module."""

    def __init__(self, ping: Callable[[], object] | None) -> None:
        self._ping = ping
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._shut_at: float | None = None
        self._why = ""
        self.skipped = 0

    def shut_because(self) -> str | None:
        """Why sends fail at once now (what the broker's last send raised),
        or None while the gate is open."""
        if self._pid != os.getpid():  # a forked child: its parent's prober is not here
            self._reset_after_fork()
        if self._shut_at is None:
            return None
        with self._lock:
            self.skipped += 1
        return self._why

    def shut(self, why: str) -> None:
        """A send found the broker out of reach: fail the next ones at once
        and ping it in the background until it answers."""
        with self._lock:
            if self._shut_at is not None:
                return
            self._shut_at = time.monotonic()
            self._why = why
            self.skipped = 0
        try:
            threading.Thread(
                target=self._ping_until_it_answers, name="broker-ping", daemon=True
            ).start()
        except RuntimeError as exc:
            # No thread to reopen it (the process is at its thread limit): a
            # gate left shut would fail every send of the process for good,
            # so it stays open and each send pays its own timeout.
            with self._lock:
                self._shut_at = None
            logger.warning("the send gate stays open: no thread to ping the broker (%s)", exc)

    def _ping_until_it_answers(self) -> None:
        delay = FIRST_PING_DELAY
        while True:
            time.sleep(delay)
            if self._ping is not None:
                try:
                    self._ping()
                except Exception:  # any failure: still out of reach
                    delay = min(delay * 2, MAX_PING_DELAY)
                    continue
            with self._lock:
                shut_at, skipped = self._shut_at, self.skipped
                self._shut_at = None
            if shut_at is not None:
                logger.info(
                    "the broker answers again after %.1f s; %d send(s) meanwhile were left "
                    "to the scheduler's reconciler",
                    time.monotonic() - shut_at,
                    skipped,
                    extra={"action": "broker_reachable", "skipped": skipped},
                )
            return

    def _reset_after_fork(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._shut_at = None
        self.skipped = 0


_gates: weakref.WeakKeyDictionary[object, SendGate] = weakref.WeakKeyDictionary()
_gates_lock = threading.Lock()


def gate_of(broker: dramatiq.Broker) -> SendGate:
    """The broker's gate (one per broker object, made on first use)."""
    gate = _gates.get(broker)
    if gate is None:
        with _gates_lock:
            gate = _gates.get(broker)
            if gate is None:
                ping = getattr(broker, "ping", None)
                gate = _gates[broker] = SendGate(ping if callable(ping) else None)
    return gate
