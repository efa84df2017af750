"""Ctrl-C, SIGTERM and SIGHUP turned into stop requests, for ``resumable dev``
and ``resumable demo``: the two commands that own child processes.

By default SIGTERM ends Python at once, skipping every ``finally``: the
children and the embedded servers would live on. Raising from a signal
handler is no better: the exception lands at an arbitrary bytecode, possibly
inside a ``__del__`` where it is swallowed, or between a fork and its
bookkeeping. So the handlers only count, and the main loop decides what a
request means, because stopping is a sequence (SIGTERM the children, wait,
SIGKILL, release the servers) that must not be cut short at a random line:
``dev`` polls ``requested`` and ``wait``s on it; the demo calls ``check()``
wherever it waits, which raises ``StoppedBySignalError`` to unwind from there.

The first request stops gracefully, a second one forces. While
``interruptible`` (``dev``'s start-up) the second one raises
``KeyboardInterrupt``, so a start-up step that hangs (an unreachable
DATABASE_URL) can still be abandoned; context managers around it release
what was acquired.
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StoppedBySignalError(Exception):
    """A stop signal arrived; the command unwinds and exits with 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class StopRequests:
    """Counts stop signals while installed (use as a context manager)."""

    def __init__(self, *, interruptible: bool = True) -> None:
        self.count = 0
        self.last: signal.Signals | None = None
        # Whether a repeated request raises KeyboardInterrupt.
        self.interruptible = interruptible
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequests:
        # Handlers can only be installed from the main thread (an embedding
        # app may call run_demo from another one; it then keeps its own).
        if threading.current_thread() is threading.main_thread():
            for sig in HANDLED:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        self._previous.clear()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.count += 1
        self.last = signal.Signals(signum)
        if self.count > 1 and self.interruptible:
            raise KeyboardInterrupt

    @property
    def requested(self) -> bool:
        return self.count > 0

    def check(self) -> None:
        """Raise StoppedBySignalError if a request came."""
        if self.last is not None:
            raise StoppedBySignalError(self.last)

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
