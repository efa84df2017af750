"""Stopping the demo with SIGTERM or Ctrl-C without leaving processes behind.

By default SIGTERM ends Python at once, skipping every ``finally``: the
demo's web, scheduler and workers would live on, and so would the embedded
servers. Raising from a signal handler is no better: the exception lands at
an arbitrary bytecode, possibly inside a ``__del__`` where it is swallowed,
or between a fork and its bookkeeping. So the handler only records the
signal, and the demo checks for it where it spends its time (every wait) and
unwinds from there, stopping its children and releasing the servers.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None
_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StoppedBySignalError(Exception):
    """SIGTERM or SIGINT arrived; the demo unwinds and exits with 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class StopSignals:
    """While inside, SIGTERM/SIGINT are recorded; ``check()`` raises StoppedBySignalError."""

    def __init__(self) -> None:
        self._previous: dict[int, _Handler] = {}
        self.requested: int | None = None

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.requested = signum

    def check(self) -> None:
        if self.requested is not None:
            raise StoppedBySignalError(self.requested)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in _SIGNALS:
                self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
