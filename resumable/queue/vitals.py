"""Is this worker process doing its job? Its threads, watched from inside.

A worker can look alive (its pid runs, its heartbeat row is fresh, its
sockets connect) while it does nothing: dramatiq never restarts a consumer
thread that died, and a dead lease keeper or event loop leaves sessions
without their renewals or their runs. Readiness must mean "this process
consumes and runs sessions" (invariant 10), so each thread the process cannot
work without is a *vital*: alive, and where it loops on its own, looping.

`VitalSigns` checks them twice a second on a thread of its own. The first
problem it finds is final: a thread that died does not come back, and a
process that lost one is not fixed by waiting. It is said once (an ERROR line
naming the thread), kept for the heartbeat row, the worker's health endpoint
and its metric, and handed to ``on_failure``, which stops the process (its
steps in flight are handed back, then it exits non-zero) so that its
supervisor starts a healthy one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from resumable.broker.consumer import Pulse

logger = logging.getLogger(__name__)

# How often the vitals are checked.
CHECK_SECONDS = 0.5
# A check this many intervals late means the whole process was held up.
_LATE_CHECKS = 4


@dataclass(frozen=True)
class Vital:
    """One thread the process cannot work without.

    `thread` answers the thread now (dramatiq's consumer, say, is looked up
    each time; None: not started, which is not a problem). `pulse` and
    `silent_after`, for a thread that loops on its own: silent that long, it
    counts as hung."""

    name: str
    thread: Callable[[], threading.Thread | None]
    pulse: Pulse | None = None
    silent_after: float = 0.0

    def problem(self) -> str | None:
        thread = self.thread()
        if thread is None:
            return None
        if not thread.is_alive():
            return f"its {self.name} thread died"
        if self.pulse is not None and self.pulse.age() > self.silent_after:
            return f"its {self.name} thread has not looped for {self.pulse.age():.0f} s"
        return None


class VitalSigns:
    """Watches `vitals` until `stop`; the first problem is kept and reported."""

    def __init__(self, on_failure: Callable[[str], None]) -> None:
        self._vitals: list[Vital] = []
        self._on_failure = on_failure
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="resumable-vitals", daemon=True)
        #: Why this process is not doing its job (None: it is).
        self.problem: str | None = None

    def watch(self, vital: Vital) -> None:
        self._vitals.append(vital)

    @property
    def healthy(self) -> bool:
        return self.problem is None

    def check(self) -> str | None:
        """The first problem found now (and kept), None if all is well."""
        if self.problem is not None:
            return self.problem
        for vital in self._vitals:
            problem = vital.problem()
            if problem is not None:
                self.problem = problem
                return problem
        return None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(CHECK_SECONDS):
            now, since = time.monotonic(), time.monotonic() - last
            last = now
            if since > CHECK_SECONDS * _LATE_CHECKS:
                # This thread was not running either: the process was paused
                # (SIGSTOP, a debugger) or starved of CPU. Its loops were held
                # up with it, not hung: their silence starts again now.
                for vital in self._vitals:
                    if vital.pulse is not None:
                        vital.pulse.beat()
                continue
            problem = self.check()
            if problem is None:
                continue
            logger.error(
                "this worker process is not doing its job: %s; it hands its sessions back"
                " and exits so that its supervisor starts a new one",
                problem,
                extra={"action": "worker_unhealthy", "problem": problem},
            )
            self._on_failure(problem)
            return
