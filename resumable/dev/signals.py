"""Ctrl-C, SIGTERM and SIGHUP for ``resumable dev``, turned into stop requests.

The handlers only count: the main loop decides what a request means, because
stopping is a sequence (SIGTERM the children, wait, SIGKILL, release the
servers) that must not be cut short by an exception raised at a random line.
The first request stops gracefully, a second one forces. During start-up the
second one raises ``KeyboardInterrupt``, so a start-up step that hangs (an
unreachable DATABASE_URL) can still be abandoned; context managers around it
release what was acquired.
"""

from __future__ import annotations

import signal
import time
from types import FrameType, TracebackType
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopRequests:
    """Counts stop signals while installed (use as a context manager)."""

    def __init__(self) -> None:
        self.count = 0
        self.last: signal.Signals | None = None
        # Whether a repeated request raises KeyboardInterrupt (start-up only).
        self.interruptible = True
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequests:
        for sig in HANDLED:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.count += 1
        self.last = signal.Signals(signum)
        if self.count > 1 and self.interruptible:
            raise KeyboardInterrupt

    @property
    def requested(self) -> bool:
        return self.count > 0

    def wait(self, timeout: float) -> bool:
        """Sleep up to `timeout` seconds, less if a request comes; return whether one came.

        A plain sleep, not ``threading.Event``: setting an Event from a signal
        handler can deadlock on the lock its own ``wait`` holds in the same thread.
        """
        deadline = time.monotonic() + timeout
        while not self.requested:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, 0.05))
        return True
