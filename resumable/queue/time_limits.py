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

Landing anywhere, it must not land in resumable's bookkeeping: a database
connection's borrowing, use and return run shielded
(``_internal/interrupt_shield.py``), the limit landing as they end; and the
logging locks a step's thread was left holding are released as the limit
ends the block.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from types import TracebackType

from resumable._internal.interrupt_shield import forget, interrupt_unless_shielded
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
            interrupt_unless_shielded(
                self._thread_id,
                lambda: _set_async_exc(self._thread_id, StepTimeoutError),
                self._land,
            )

    def _land(self) -> None:
        """The limit fired in a shielded region this thread has just left."""
        with self._lock:
            if not self._finished:
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
                forget(self._thread_id)
        if self.fired:
            _release_logging_locks()
            raise StepTimeoutError(self.message).with_traceback(traceback) from None


def _release_logging_locks() -> None:
    """Release the logging locks this thread still holds once its limit fired.

    A thread blocked on a lock gets its asynchronous exception as the wait
    returns, lock taken, before the ``try`` that would release it: logging's
    handlers take theirs that way (``Handler.handle``), so a limit that
    fired while the step waited to write a line left the handler locked, and
    every thread of the worker froze at its next line (shown by a script in
    an audit). The step's thread is unwinding out of the step here; none of
    logging's locks is legitimately its own."""
    handlers = [ref() for ref in getattr(logging, "_handlerList", [])]
    locks = [getattr(logging, "_lock", None), *(h.lock for h in handlers if h is not None)]
    for lock in locks:
        owned = getattr(lock, "_is_owned", None)
        while lock is not None and owned is not None and owned():
            lock.release()
