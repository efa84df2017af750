"""Run the Procfile's processes together, restart one that is killed, stop them together.

honcho's ``Manager`` is not used for this part, only its Procfile parser (see
``procfile.py``) and its log printer, because stopping must be exact (the
way every tool here does it, ``processes.py``): each child leads its own
process group, counts as stopped when its whole group is gone, and gets the
caller's grace period before SIGKILL (a worker finishing a step needs up to a
lease), where honcho waits a fixed 5 s; and a signal that arrives before
every child has started is handled (honcho's ``Manager`` raises ``KeyError``
from its handler then and leaves the children running).

A child killed by SIGKILL (``kill -9``, the OOM killer: a crash) is started
again, so crash recovery can be tried under ``dev``; if one is killed more
than ``RESTART_LIMIT`` times in ``RESTART_WINDOW_SECONDS`` it is left dead and
everything stops. A child that exits by itself, or on a polite signal, stops
everything: a bad setting, a failed import or a port in use would only make
it exit again.

Every line a child prints is shown as ``HH:MM:SS name | line``, coloured per
process on a terminal, as honcho and foreman do.
"""

from __future__ import annotations

import contextlib
import datetime
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import IO

from honcho.colour import get_colours
from honcho.printer import Message, Printer

from resumable.dev.processes import Process, describe_status, spawn, stop_processes
from resumable.dev.procfile import ProcessSpec
from resumable.dev.signals import StopRequests

SYSTEM_NAME = "dev"
RESTART_LIMIT = 5
RESTART_WINDOW_SECONDS = 60.0
_WATCH_SECONDS = 0.1
# Exit statuses of a process that stopped because it was asked to.
_CLEAN_STATUSES = frozenset({0, -signal.SIGTERM, 128 + signal.SIGTERM})


class RestartBudget:
    """How often one process may be restarted: `limit` times in any `window` seconds."""

    def __init__(
        self,
        limit: int = RESTART_LIMIT,
        window: float = RESTART_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._restarts: dict[str, deque[float]] = {}

    def take(self, name: str) -> bool:
        """Count a restart of `name`; False if that would exceed the budget."""
        now = self._clock()
        recent = self._restarts.setdefault(name, deque())
        while recent and recent[0] <= now - self.window:
            recent.popleft()
        if len(recent) >= self.limit:
            return False
        recent.append(now)
        return True


class Supervisor:
    """Starts `specs` with `env`, relays their output, stops them all together."""

    def __init__(
        self,
        specs: list[ProcessSpec],
        env: dict[str, str],
        output: IO[str],
        stops: StopRequests,
        grace_seconds: float,
        budget: RestartBudget | None = None,
    ) -> None:
        self.specs = specs
        self.env = env
        self.stops = stops
        self.grace_seconds = grace_seconds
        self.budget = budget or RestartBudget()
        self.children: dict[str, Process] = {}  # by Procfile name, the latest start
        width = max(len(SYSTEM_NAME), *(len(spec.name) for spec in specs))
        self._printer = Printer(output, width=width)
        self._print_lock = threading.Lock()
        colours = get_colours()
        self._colours = {spec.name: next(colours) for spec in specs}

    def run(self) -> int:
        """Run until a stop request (0 once all stopped cleanly) or a child's exit (1)."""
        exited: Process | None = None
        self.stops.interruptible = False  # from here on, repeated requests force
        try:
            for spec in self.specs:
                if self.stops.requested:
                    break
                self._start(spec)
            exited = self._watch()
        finally:
            clean = self._stop_all()
        if exited is not None:
            self.say(
                f"{exited.name} exited unexpectedly ({describe_status(exited.returncode)});"
                " stopped the others"
            )
            return 1
        return 0 if clean else 1

    def say(self, text: str) -> None:
        """Print a line of dev's own, prefixed like the children's."""
        self._write(SYSTEM_NAME, None, text)

    def _start(self, spec: ProcessSpec) -> Process:
        colour = self._colours[spec.name]
        child = spawn(
            spec.name,
            spec.command,
            env=self.env,
            relay=lambda line: self._write(spec.name, colour, line),
        )
        self.children[spec.name] = child
        self.say(f"{spec.name} started (pid {child.pid}): {spec.command}")
        return child

    def _write(self, name: str, colour: str | None, data: str | bytes) -> None:
        message = Message("line", data, datetime.datetime.now(), name, colour)
        # If the terminal or pipe went away (`dev | head`), keep draining the
        # children's output, or they block, and keep the stop sequence going.
        with self._print_lock, contextlib.suppress(OSError, ValueError):
            self._printer.write(message)

    def _watch(self) -> Process | None:
        """Wait for a stop request (None) or for a child to exit for good (that child)."""
        specs = {spec.name: spec for spec in self.specs}
        while not self.stops.requested:
            for name, child in list(self.children.items()):
                if child.exited() and not self._restart(specs[name], child):
                    return child
            self.stops.wait(_WATCH_SECONDS)
        name = self.stops.last.name if self.stops.last else "stop request"
        self.say(f"{name} received; stopping (press Ctrl-C again to kill)")
        return None

    def _restart(self, spec: ProcessSpec, child: Process) -> bool:
        """Start a SIGKILLed child again (True), unless it keeps being killed."""
        if child.returncode != -signal.SIGKILL:
            return False
        if not self.budget.take(spec.name):
            self.say(
                f"{spec.name} was killed {self.budget.limit + 1} times within"
                f" {self.budget.window:g} s; not restarting it"
            )
            return False
        child.signal(signal.SIGKILL)  # whatever its command started goes with it
        child.join_output()
        self.say(f"{spec.name} was killed by SIGKILL (pid {child.pid}); restarting it")
        self._start(spec)
        return True

    def _stop_all(self) -> bool:
        """SIGTERM every group, SIGKILL what is left after the grace period (or
        at the next stop request); return whether all stopped on SIGTERM."""
        requests_before = self.stops.count
        children = list(self.children.values())
        clean = stop_processes(
            children,
            self.grace_seconds,
            say=self.say,
            forced=lambda: self.stops.count > requests_before,
        )
        for child in children:
            child.join_output()  # the rest of its output
            status = child.returncode
            clean = clean and status in _CLEAN_STATUSES
            self.say(f"{child.name} stopped ({describe_status(status)})")
        return clean
