"""A stop is a hand-back (invariant 9).

On SIGTERM a worker finishes the step each thread is running, commits it,
releases the lease and re-enqueues the session at once, so another worker
continues it within a wake-up instead of after a lease expiry. This module
keeps what that needs: the stopping flag a run checks between steps, the
runs in flight (which session, which step, since when, on which thread or
event-loop task), and a count of what was handed back, for the line the
worker logs when it exits. The same registry names the run an event-loop
task belongs to, for the loop's watchdog.

A step blocked where nothing can interrupt it (C code, a socket without a
timeout) may outlive the wait. The worker then releases that session's lease
itself, if it still holds it, and says which thread it leaves behind.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from resumable.priorities import Priority


@dataclass
class ActiveRun:
    """One session being run, on a worker thread or as a task on the event loop."""

    session_id: uuid.UUID
    epoch: int
    thread: str
    step: str | None = None
    step_started: float = field(default_factory=time.monotonic)
    #: The event-loop task the run went on in, once it did.
    task: asyncio.Task[Any] | None = None
    #: The lane its session's messages go on.
    priority: Priority = "normal"

    def at_step(self, step: str | None) -> None:
        self.step = step
        self.step_started = time.monotonic()

    def moved_to(self, task: asyncio.Task[Any]) -> None:
        """The run goes on as `task` on the event loop."""
        self.task = task
        self.thread = f"event loop ({task.get_name()})"


class Shutdown:
    """The stopping flag, the runs in flight and the hand-back count of one process."""

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._runs: dict[int, ActiveRun] = {}
        self._lock = threading.Lock()
        self._handed_back = 0

    @property
    def stopping(self) -> bool:
        """Whether the worker is stopping: each run hands its session back
        after the step in flight."""
        return self._stopping.is_set()

    def stop(self) -> None:
        self._stopping.set()

    def track(self, session_id: uuid.UUID, epoch: int, priority: Priority = "normal") -> ActiveRun:
        """Register a run the calling thread starts, until ``finish``."""
        run = ActiveRun(session_id, epoch, threading.current_thread().name, priority=priority)
        with self._lock:
            self._runs[id(run)] = run
        return run

    def finish(self, run: ActiveRun) -> None:
        """The run is over (on its thread, or in its event-loop task)."""
        with self._lock:
            if self._runs.get(id(run)) is run:
                del self._runs[id(run)]

    def describe_task(self, task: asyncio.Task[Any]) -> str | None:
        """Which session and step an event-loop task is running (for the
        loop's watchdog); None for a task that runs no session."""
        with self._lock:
            run = next((run for run in self._runs.values() if run.task is task), None)
        if run is None:
            return None
        return f"step {run.step!r} of session {run.session_id}"

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
