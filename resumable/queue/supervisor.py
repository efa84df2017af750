"""``resumable worker`` as several processes: a parent that runs N real workers.

One Python process runs its threads one at a time (the GIL), so on a machine
with several cores one worker process leaves all but one idle. The parent
starts ``RESUMABLE_WORKER_PROCESSES`` children (default: one per core), each a
complete ``resumable worker --processes 1`` with its own threads, pool, lease
keeper and heartbeat row, and does nothing else: it holds no lease and no
connection, so nothing is lost when it dies.

- Ready: each child logs ``worker started: process I of N, ...`` as soon as
  it consumes (work can start then, as with one process), and the parent logs
  ``all N worker processes ready`` once every child has told it so (a byte
  on a pipe).
- Stop (SIGTERM/SIGINT to the parent): the signal is passed to every child,
  each hands its sessions back (invariant 9), and the parent exits 0 once all
  have exited cleanly (1 if one did not).
- A child that dies on its own (SIGKILL, OOM) loses nothing: its leases
  expire and its unacked messages are redelivered, like any killed worker's.
  The parent starts a new one in its slot. A child that dies before it was
  ready (a bad setting, a server gone) or more than ``_MAX_RESTARTS`` times
  in ``_RESTART_WINDOW_SECONDS`` makes the parent stop the others and exit 1:
  restarting cannot fix those, and a supervisor (systemd, Kubernetes) above
  this one sees the failure.
- Parent killed (SIGKILL, OOM): the kernel kills each child too
  (``PR_SET_PDEATHSIG`` on Linux), so ``kill -9`` of the worker's pid is a
  crash of the whole worker, as with one process: its leases expire and
  another worker recovers its sessions from their checkpoints.
- Parent paused (SIGSTOP, a debugger): each child notices within
  ``_POLL_SECONDS`` and stops itself, and SIGCONT to the parent continues
  them, so pausing the worker's pid pauses the worker, as with one process
  (its leases lapse and its late writes are fenced out).
- Metrics: child ``i`` (from 0) serves its own ``/metrics`` on
  ``RESUMABLE_WORKER_METRICS_PORT + i``; Prometheus scrapes each port, as it
  scrapes each worker of a deployment.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType

from resumable.stop_signals import StopSignals

logger = logging.getLogger(__name__)

# What a child finds in its environment (not settings: only the parent sets them).
READY_FD_ENV = "RESUMABLE_WORKER_READY_FD"
PARENT_ENV = "RESUMABLE_WORKER_PARENT"
SLOT_ENV = "RESUMABLE_WORKER_SLOT"

_MAX_RESTARTS = 5
_RESTART_WINDOW_SECONDS = 60.0
_POLL_SECONDS = 0.1
_PR_SET_PDEATHSIG = 1


def default_processes() -> int:
    """One process per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass
class _Child:
    slot: int
    popen: subprocess.Popen[bytes]
    ready_fd: int  # the read end of the child's ready pipe (-1 once read)
    started: float = field(default_factory=time.monotonic)
    ready: bool = False


class Supervisor:
    """Runs `processes` copies of `command`, each a single-process worker."""

    def __init__(
        self,
        command: Sequence[str],
        processes: int,
        env: Mapping[str, str],
        *,
        metrics_port: int = 0,
        describe: str = "",
    ) -> None:
        self.command = list(command)
        self.processes = processes
        self.env = dict(env)
        self.metrics_port = metrics_port
        self.describe = describe
        self.stop = threading.Event()
        self.signals = StopSignals()
        self.children: dict[int, _Child] = {}
        self._restarts: list[float] = []
        self._announced = False

    # -- children ------------------------------------------------------------------------

    def _spawn(self, slot: int) -> _Child:
        read_fd, write_fd = os.pipe()
        env = {
            **self.env,
            READY_FD_ENV: str(write_fd),
            PARENT_ENV: str(os.getpid()),
            SLOT_ENV: f"{slot} of {self.processes}",
        }
        if self.metrics_port:
            env["RESUMABLE_WORKER_METRICS_PORT"] = str(self.metrics_port + slot)
        try:
            # Same process group as the parent: a signal to the group (a
            # terminal's Ctrl-C, `kill -- -PGID`) reaches every worker too.
            popen = subprocess.Popen(self.command, env=env, pass_fds=(write_fd,))
        finally:
            os.close(write_fd)
        child = _Child(slot, popen, read_fd)
        self.children[slot] = child
        logger.info(
            "worker process %d started as pid %d",
            slot,
            popen.pid,
            extra={"action": "worker_process_spawned", "slot": slot, "pid": popen.pid},
        )
        return child

    def _read_ready(self) -> None:
        """Note the children that said they are ready; announce once all have."""
        waiting = {c.ready_fd: c for c in self.children.values() if c.ready_fd >= 0}
        if waiting:
            readable, _, _ = select.select(list(waiting), [], [], 0)
            for fd in readable:
                child = waiting[fd]
                os.close(fd)  # a byte (ready) or end of file (exited): either way done
                child.ready_fd = -1
                child.ready = child.popen.poll() is None
        if not self._announced and all(c.ready for c in self.children.values()):
            self._announced = True
            logger.info(
                "all %d worker processes ready%s",
                self.processes,
                f" ({self.describe} each)" if self.describe else "",
                extra={"action": "worker_processes_ready", "processes": self.processes},
            )

    def _close(self, child: _Child) -> None:
        if child.ready_fd >= 0:
            os.close(child.ready_fd)
            child.ready_fd = -1

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> int:
        """Start the children, keep them running until SIGTERM/SIGINT; the exit status."""
        self._install_signals()
        for slot in range(self.processes):
            self._spawn(slot)
        failed = False
        while not self.stop.is_set() and self.signals.first is None:
            self._read_ready()
            for child in list(self.children.values()):
                code = child.popen.poll()
                if code is None or self.stop.is_set():
                    continue
                if not self._replace(child, code):
                    failed = True
                    self.stop.set()
                    break
            self.stop.wait(_POLL_SECONDS)
        if self.signals.first is not None:
            logger.info(
                "received %s; stopping %d worker processes (each hands its sessions back)",
                self.signals.first,
                len(self.children),
            )
        self.stop.set()
        return self._stop_all(failed)

    def _replace(self, child: _Child, code: int) -> bool:
        """A child exited on its own: start another in its slot, or say why not."""
        self._close(child)
        what = _describe_exit(code)
        if not child.ready:
            logger.error(
                "worker process %d (pid %d) %s before it was ready; stopping the others",
                child.slot,
                child.popen.pid,
                what,
                extra={"action": "worker_process_failed", "slot": child.slot},
            )
            return False
        now = time.monotonic()
        self._restarts = [t for t in self._restarts if now - t < _RESTART_WINDOW_SECONDS]
        if len(self._restarts) >= _MAX_RESTARTS:
            logger.error(
                "worker process %d (pid %d) %s; %d restarts in %g s already, stopping the others",
                child.slot,
                child.popen.pid,
                what,
                len(self._restarts),
                _RESTART_WINDOW_SECONDS,
                extra={"action": "worker_process_failed", "slot": child.slot},
            )
            return False
        self._restarts.append(now)
        logger.warning(
            "worker process %d (pid %d) %s; restarting it (its sessions come back when "
            "their leases expire)",
            child.slot,
            child.popen.pid,
            what,
            extra={"action": "worker_process_restarted", "slot": child.slot},
        )
        self._spawn(child.slot)
        return True

    def _stop_all(self, failed: bool) -> int:
        """SIGTERM every child (each hands its sessions back) and wait for them."""
        for child in self.children.values():
            if child.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.popen.send_signal(signal.SIGTERM)
        clean = True
        for child in self.children.values():
            code = child.popen.wait()
            self._close(child)
            # A child stopped before it set its own handler dies of the SIGTERM:
            # it held nothing yet.
            if code not in (0, -signal.SIGTERM):
                clean = False
                logger.warning(
                    "worker process %d (pid %d) %s while stopping",
                    child.slot,
                    child.popen.pid,
                    _describe_exit(code),
                    extra={"action": "worker_process_failed", "slot": child.slot},
                )
        status = 1 if failed or not clean else 0
        logger.info(
            "worker stopped: %d processes exited%s",
            len(self.children),
            "" if status == 0 else " (not all cleanly)",
            extra={"action": "worker_stopped", "processes": len(self.children)},
        )
        return status

    def _install_signals(self) -> None:
        # The run loop polls for SIGTERM/SIGINT: a handler that set self.stop
        # could wait for ever on the event's lock (see stop_signals.py).
        self.signals.install()

        def _on_continue(_signum: int, _frame: FrameType | None) -> None:
            # The children stopped themselves when they saw this process stopped.
            for child in list(self.children.values()):
                with contextlib.suppress(OSError):
                    child.popen.send_signal(signal.SIGCONT)

        signal.signal(signal.SIGCONT, _on_continue)


def _describe_exit(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


# -- the child's side --------------------------------------------------------------------


def as_child() -> Callable[[], None] | None:
    """In a child of a Supervisor: die with the parent, pause with it, and
    return the callback that tells the parent this worker is ready. None in a
    worker started any other way."""
    fd_text = os.environ.pop(READY_FD_ENV, None)
    parent_text = os.environ.pop(PARENT_ENV, None)
    if fd_text is None or parent_text is None:
        return None
    ready_fd = int(fd_text)
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != int(parent_text):  # the parent died before prctl
            os.kill(os.getpid(), signal.SIGKILL)
        threading.Thread(
            target=_pause_with, args=(int(parent_text),), name="pause-with-parent", daemon=True
        ).start()

    def ready() -> None:
        with contextlib.suppress(OSError):
            os.write(ready_fd, b"1")
        with contextlib.suppress(OSError):
            os.close(ready_fd)

    return ready


def _pause_with(parent: int) -> None:
    """Stop this process whenever the parent is stopped (SIGSTOP cannot be
    caught, so the parent cannot pass it on); the parent's SIGCONT handler
    continues it."""
    stat = f"/proc/{parent}/stat"
    while True:
        time.sleep(_POLL_SECONDS)
        try:
            with open(stat, "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            return  # the parent is gone (and PDEATHSIG ends this process)
        if fields and fields[0] in (b"T", b"t"):
            os.kill(os.getpid(), signal.SIGSTOP)


def slot() -> str | None:
    """This child's slot number, for its log lines (None outside a Supervisor)."""
    return os.environ.get(SLOT_ENV)
