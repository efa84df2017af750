"""Per-step time limits, enforced the way dramatiq's TimeLimit is.

Past its limit a timer raises ``StepTimeoutError`` asynchronously in the
step's own thread. That exception derives from ``BaseException``, so a step's
``except Exception:`` cannot swallow it, and it surfaces in the worker thread
that ran the step: the failure is handled there, in the session's log
context, and so is any saga compensation it leads to. The timer thread does
nothing else.

An asynchronous exception lands only when the thread runs Python code again:
a step blocked in C (a socket read without a timeout, ``time.sleep``) keeps
its session until that call returns. Such a step is *hung*; the runner
records when each step started and when its limit passes, so operators find
it with ``hung_sessions`` and can cancel it.
"""

from __future__ import annotations

import ctypes
import threading
from types import TracebackType

from resumable.errors import StepTimeoutError


def _set_async_exc(thread_id: int, exc_type: type[BaseException] | None) -> None:
    """Raise `exc_type` in the thread at its next bytecode; None clears a pending one."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type) if exc_type else None
    )


class TimeLimit:
    """``with TimeLimit(seconds):`` runs the body under a limit (None: no limit).

    Leaving the block always leaves the thread with no interrupt pending, so a
    limit that fires as the step returns cannot land in the commit that follows:
    once the limit has fired, the block ends in ``StepTimeoutError`` either way.
    """

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.fired = False
        self._finished = False
        self._lock = threading.Lock()
        self._thread_id = 0
        self._timer: threading.Timer | None = None

    @property
    def message(self) -> str:
        return f"the step ran longer than its {self.seconds:g} s time limit"

    def __enter__(self) -> TimeLimit:
        if self.seconds is not None:
            self._thread_id = threading.get_ident()
            self._timer = threading.Timer(self.seconds, self._fire)
            self._timer.daemon = True
            self._timer.start()
        return self

    def _fire(self) -> None:
        with self._lock:
            if self._finished:
                return
            self.fired = True
            _set_async_exc(self._thread_id, StepTimeoutError)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._timer is None:
            return
        with self._lock:
            self._finished = True
            self._timer.cancel()
            if self.fired:
                _set_async_exc(self._thread_id, None)
        if self.fired:
            raise StepTimeoutError(self.message).with_traceback(traceback) from None
