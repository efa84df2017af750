"""Run the Procfile's processes together and stop them together.

honcho's ``Manager`` is not used for this part, only its Procfile parser (see
``dev_procfile``) and its log printer, because stopping must be exact:

- each child gets its own session and process group, so Ctrl-C in the
  terminal reaches only ``dev``, which sends one SIGTERM to each group;
- a child counts as stopped when its whole group is gone, not when the shell
  that started it exits, so nothing outlives ``dev`` and the embedded servers
  are released only when nobody uses them;
- the grace period before SIGKILL is the caller's (a worker finishing a step
  needs up to a lease), where honcho waits a fixed 5 s;
- a signal that arrives before every child has started is handled (honcho's
  ``Manager`` raises ``KeyError`` from its handler then and leaves the
  children running).

Every line a child prints is shown as ``HH:MM:SS name | line``, coloured per
process on a terminal, as honcho and foreman do.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from honcho.colour import get_colours
from honcho.printer import Message, Printer

from resumable.dev.procfile import ProcessSpec
from resumable.dev.signals import StopRequests

SYSTEM_NAME = "dev"
# After SIGKILL, how long to wait for the kernel to take the processes away.
_KILL_WAIT_SECONDS = 5.0
_POLL_SECONDS = 0.05
# Exit statuses of a process that stopped because it was asked to.
_CLEAN_STATUSES = frozenset({0, -signal.SIGTERM, 128 + signal.SIGTERM})


@dataclass
class Child:
    """A started process, the leader of its own process group."""

    spec: ProcessSpec
    popen: subprocess.Popen[bytes]
    colour: str
    reader: threading.Thread

    @property
    def name(self) -> str:
        return self.spec.name

    def running(self) -> bool:
        """Whether anything of this child is left (its group may outlive its leader)."""
        if self.popen.poll() is None:  # also reaps the leader once it has exited
            return True
        return group_alive(self.popen.pid)


def group_alive(pgid: int) -> bool:
    """Whether process group `pgid` has a member that is not a zombie."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    # killpg also succeeds for zombies, which an init that never reaps may keep.
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def describe_status(returncode: int | None) -> str:
    if returncode is None:
        return "status unknown"
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"status {returncode}"


class Supervisor:
    """Starts `specs` with `env`, relays their output, stops them all together."""

    def __init__(
        self,
        specs: list[ProcessSpec],
        env: dict[str, str],
        output: IO[str],
        stops: StopRequests,
        grace_seconds: float,
    ) -> None:
        self.specs = specs
        self.env = env
        self.stops = stops
        self.grace_seconds = grace_seconds
        self.children: list[Child] = []
        width = max(len(SYSTEM_NAME), *(len(spec.name) for spec in specs))
        self._printer = Printer(output, width=width)
        self._print_lock = threading.Lock()
        self._colours = get_colours()

    def run(self) -> int:
        """Run until a stop request (0 once all stopped cleanly) or a child's exit (1)."""
        exited: Child | None = None
        self.stops.interruptible = False  # from here on, repeated requests force
        try:
            self._start_all()
            exited = self._watch()
        finally:
            clean = self._stop_all()
        if exited is not None:
            self.say(
                f"{exited.name} exited unexpectedly ({describe_status(exited.popen.returncode)});"
                " stopped the others"
            )
            return 1
        return 0 if clean else 1

    def say(self, text: str) -> None:
        """Print a line of dev's own, prefixed like the children's."""
        self._write(SYSTEM_NAME, None, text)

    # -- starting ---------------------------------------------------------------------

    def _start_all(self) -> None:
        for spec in self.specs:
            if self.stops.requested:
                return
            popen = subprocess.Popen(
                spec.command,
                shell=True,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                # Its own group: the terminal's Ctrl-C reaches dev alone, and
                # killpg reaches everything the command starts.
                start_new_session=True,
            )
            colour = next(self._colours)
            reader = threading.Thread(
                target=self._relay, args=(spec.name, colour, popen), daemon=True
            )
            self.children.append(Child(spec, popen, colour, reader))
            reader.start()
            self.say(f"{spec.name} started (pid {popen.pid}): {spec.command}")

    def _relay(self, name: str, colour: str, popen: subprocess.Popen[bytes]) -> None:
        assert popen.stdout is not None
        with popen.stdout:
            for line in iter(popen.stdout.readline, b""):
                self._write(name, colour, line)

    def _write(self, name: str, colour: str | None, data: str | bytes) -> None:
        message = Message("line", data, datetime.datetime.now(), name, colour)
        # If the terminal or pipe went away (`dev | head`), keep draining the
        # children's output, or they block, and keep the stop sequence going.
        with self._print_lock, contextlib.suppress(OSError, ValueError):
            self._printer.write(message)

    # -- watching ---------------------------------------------------------------------

    def _watch(self) -> Child | None:
        """Wait for a stop request (None) or for a child to exit (that child)."""
        while not self.stops.requested:
            for child in self.children:
                if child.popen.poll() is not None:
                    return child
            self.stops.wait(_POLL_SECONDS * 2)
        name = self.stops.last.name if self.stops.last else "stop request"
        self.say(f"{name} received; stopping (press Ctrl-C again to kill)")
        return None

    # -- stopping ---------------------------------------------------------------------

    def _stop_all(self) -> bool:
        """SIGTERM every group, SIGKILL what is left after the grace period (or
        at the next stop request); return whether all stopped on SIGTERM."""
        requests_before = self.stops.count
        live = [child for child in self.children if child.running()]
        for child in live:
            self._signal(child, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_seconds
        killed_at: float | None = None
        while live:
            time.sleep(_POLL_SECONDS)
            live = [child for child in live if child.running()]
            if not live:
                break
            now = time.monotonic()
            if killed_at is None and (now > deadline or self.stops.count > requests_before):
                names = ", ".join(child.name for child in live)
                self.say(f"{names} still running; sending SIGKILL")
                for child in live:
                    self._signal(child, signal.SIGKILL)
                killed_at = now
            elif killed_at is not None and now > killed_at + _KILL_WAIT_SECONDS:
                self.say(f"could not stop {', '.join(c.name for c in live)}")
                break
        clean = killed_at is None
        for child in self.children:
            child.reader.join(timeout=2)  # the rest of its output
            status = child.popen.returncode
            clean = clean and status in _CLEAN_STATUSES
            self.say(f"{child.name} stopped ({describe_status(status)})")
        return clean

    def _signal(self, child: Child, sig: signal.Signals) -> None:
        try:
            os.killpg(child.popen.pid, sig)
        except ProcessLookupError:
            return
        self.say(f"sent {sig.name} to {child.name} (process group {child.popen.pid})")
