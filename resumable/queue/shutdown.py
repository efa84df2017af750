"""A stop is a hand-back (invariant 9).

On SIGTERM a worker finishes the step each thread is running, commits it,
releases the lease and re-enqueues the session at once, so another worker
continues it within a wake-up instead of after a lease expiry. This module
keeps what that needs: the stopping flag the runner checks between steps, the
runs in flight (which session, which step, since when), and a count of what
was handed back, for the line the worker logs when it exits.

A step blocked where nothing can interrupt it (C code, a socket without a
timeout) may outlive the wait. The worker then releases that session's lease
itself, if it still holds it, and says which thread it leaves behind.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class ActiveRun:
    """One session being run by one worker thread."""

    session_id: uuid.UUID
    epoch: int
    thread: str
    step: str | None = None
    step_started: float = field(default_factory=time.monotonic)
    #: The run went on as a task on the event loop, which ends it (``finish``).
    detached: bool = False

    def at_step(self, step: str | None) -> None:
        self.step = step
        self.step_started = time.monotonic()


class Shutdown:
    """The stopping flag, the runs in flight and the hand-back count of one process."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._runs: dict[int, ActiveRun] = {}
        self._lock = threading.Lock()
        self._handed_back = 0

    @contextmanager
    def tracking(self, session_id: uuid.UUID, epoch: int) -> Iterator[ActiveRun]:
        """Register the calling thread's run for as long as the block lasts
        (or, once it is detached onto the event loop, until ``finish``)."""
        thread = threading.current_thread()
        run = ActiveRun(session_id, epoch, thread.name)
        with self._lock:
            self._runs[id(run)] = run
        try:
            yield run
        finally:
            if not run.detached:
                self.finish(run)

    def finish(self, run: ActiveRun) -> None:
        """The run is over (called by the loop task a detached run went on in)."""
        with self._lock:
            if self._runs.get(id(run)) is run:
                del self._runs[id(run)]

    def handed_back(self) -> None:
        with self._lock:
            self._handed_back += 1

    @property
    def handed_back_count(self) -> int:
        with self._lock:
            return self._handed_back

    def runs(self) -> list[ActiveRun]:
        with self._lock:
            return list(self._runs.values())

    def wait(
        self, still_held: Callable[[ActiveRun], bool], timeout: float, grace: float = 1.0
    ) -> list[ActiveRun]:
        """Wait until no run whose lease this process still holds is in flight
        (or `timeout` passes), then up to `grace` more for runs that let their
        lease go and are only returning; return the runs left (blocked threads).
        A run whose session was cancelled or taken over is not waited for
        beyond that: its step's writes are rejected whenever it ends."""
        deadline = time.monotonic() + timeout
        while any(still_held(run) for run in self.runs()) and time.monotonic() < deadline:
            time.sleep(0.02)
        deadline = time.monotonic() + grace
        while self.runs() and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.runs()
