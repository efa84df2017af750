"""Regions of a thread that a step's time limit must not cut.

A step's time limit raises ``StepTimeoutError`` asynchronously in the step's
thread (``queue/time_limits.py``), at whatever bytecode it runs next. In the
step's own code that is the point; in resumable's bookkeeping it can leave
a half-done state that nothing undoes. Found by an audit and shown with
scripts: a step whose limit fired while it waited for a pooled connection
left psycopg_pool's waiter queued (the pool catches ``Exception``, the limit
is a ``BaseException``), and the connection it was later handed was never
returned: the pool shrank by one for good, each time.

So such regions run shielded: a limit that fires inside one is deferred and
lands as the thread leaves its outermost shielded region. A limit set an
instant before the thread enters a region (between the timer's call and the
thread's next bytecode) can still land inside it: the window is a few
bytecodes, against the seconds a pool wait can last.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_guard = threading.Lock()
_depth: dict[int, int] = {}  # thread ident -> shielded regions open on it
_deferred: dict[int, Callable[[], None]] = {}  # thread ident -> what lands when they close


@contextmanager
def shielded() -> Iterator[None]:
    """The body runs with interrupts deferred to its end (see the module)."""
    ident = threading.get_ident()
    with _guard:
        _depth[ident] = _depth.get(ident, 0) + 1
    try:
        yield
    finally:
        with _guard:
            left = _depth[ident] - 1
            land = None
            if left:
                _depth[ident] = left
            else:
                del _depth[ident]
                land = _deferred.pop(ident, None)
        if land is not None:
            land()


def interrupt_unless_shielded(
    ident: int, now: Callable[[], None], later: Callable[[], None]
) -> None:
    """Call `now` (from another thread) unless thread `ident` is in a
    shielded region; then thread `ident` calls `later` as it leaves it."""
    with _guard:
        if ident in _depth:
            _deferred[ident] = later
        else:
            now()


def forget(ident: int) -> None:
    """Drop what was deferred for thread `ident` (its time limit ended)."""
    with _guard:
        _deferred.pop(ident, None)
