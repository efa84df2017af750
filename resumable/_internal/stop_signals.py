"""Stop signals (SIGTERM, SIGINT) a handler can take without a lock.

Python runs a signal handler on the main thread between two of its
bytecodes, wherever it is: inside ``threading.Event.wait`` or inside the
``Event.set`` of a handler that a second signal interrupted, holding the
event's lock. A handler that calls ``Event.set`` there waits for a lock its
own thread holds, for ever: a worker child that got SIGTERM twice (from its
parent and from the process group) hung so in a test, never stopping. The
handler here only appends to a list, which takes no lock; the loop that
waits for the stop polls it.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

# How often a waiting main thread looks for a signal: the longest a stop waits.
POLL_SECONDS = 0.1


class StopSignals:
    """The stop signals received so far; install ``handle`` as their handler."""

    def __init__(self) -> None:
        self._received: list[int] = []

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        self._received.append(signum)

    def install(self, *signals: signal.Signals) -> None:
        """Handle `signals` (SIGTERM and SIGINT by default), from the main thread."""
        for each in signals or (signal.SIGTERM, signal.SIGINT):
            signal.signal(each, self.handle)

    @property
    def first(self) -> str | None:
        """The name of the first signal received, None before any."""
        return signal.Signals(self._received[0]).name if self._received else None

    def wait(self, event: threading.Event, timeout: float | None = None) -> bool:
        """Until a signal comes or `event` is set (or `timeout` passes); True
        if either happened."""
        remaining = timeout
        while not self._received:
            step = POLL_SECONDS if remaining is None else min(POLL_SECONDS, remaining)
            if event.wait(step):
                return True
            if remaining is not None:
                remaining -= step
                if remaining <= 0:
                    return bool(self._received)
        return True
