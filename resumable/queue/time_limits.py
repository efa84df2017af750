"""Per-step time limits.

A step that runs past its limit cannot be stopped safely from outside: it
may be blocked in C code or on a socket. So the limit does two things. It
handles the step as a failed attempt at once (a retry, or the saga and the
dead letter), which moves the lease epoch on, so whatever the stuck step
does later is rejected at its next write. And it raises ``StepTimeoutError``
in the step's thread, which ends a step busy in Python code (the way
dramatiq's own TimeLimit does); one blocked in C finishes its call first.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Callable, Iterator

from resumable.errors import StepTimeoutError

logger = logging.getLogger(__name__)


def _raise_in_thread(thread_id: int, exc_type: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type)
    )


@contextlib.contextmanager
def time_limit(
    seconds: float | None, on_timeout: Callable[[StepTimeoutError], object]
) -> Iterator[None]:
    """Run the body under a limit; past it, call `on_timeout` from a timer
    thread and interrupt the body's thread."""
    if seconds is None:
        yield
        return
    lock = threading.Lock()
    finished = False
    thread_id = threading.get_ident()

    def fire() -> None:
        with lock:
            if finished:
                return
            error = StepTimeoutError(f"the step ran longer than its {seconds:g} s time limit")
            try:
                on_timeout(error)
            except Exception:
                logger.exception("handling a step time-out failed")
            _raise_in_thread(thread_id, StepTimeoutError)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            finished = True
        timer.cancel()
