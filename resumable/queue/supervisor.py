"""``resumable worker`` as several processes: a parent that runs N real workers.

One Python process runs its threads one at a time (the GIL), so on a machine
with several cores one worker process leaves all but one idle. The parent
starts ``RESUMABLE_WORKER_PROCESSES`` children (default: one per core), each a
complete single-process worker with its own threads, pool, lease keeper and
heartbeat row, and does nothing else: it holds no lease and no connection, so
nothing is lost when it dies.

- Start: the parent imports the worker's modules and the agents, freezes that
  heap (``_internal/startup_heap.py``), and then forks each child from it, holding no
  thread and no connection. A child only builds its pool and broker and
  starts consuming: it is ready in a tenth of a second, not after a second
  or more (seven and more at load 5-13) of importing everything again as a
  new interpreter did, and a child restarted during a crash storm takes work
  before the next kill rather than after. The children share the parent's
  pages of code and frozen objects until they write to them.

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
  this one sees the failure. A child that stops because it could not do its
  job (a vital thread died, ``vitals.py``) is such an exit too: restarted.
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
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

from resumable._internal.stop_signals import StopSignals

logger = logging.getLogger(__name__)

_MAX_RESTARTS = 5
_RESTART_WINDOW_SECONDS = 60.0
_POLL_SECONDS = 0.1
_PR_SET_PDEATHSIG = 1

#: What a forked child runs: its slot and the callback that says it is ready,
#: to its exit status.
ChildMain = Callable[[int, Callable[[], None]], int]


def default_processes() -> int:
    """One process per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


class ForkedChild:
    """A forked child, asked what ``subprocess.Popen`` is asked."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def _reaped(self, options: int) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, options)
            except ChildProcessError:  # reaped elsewhere: its status is lost
                self.returncode = 1
                return self.returncode
            if pid != 0:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        """Its exit status (negative: the signal that killed it), None while it runs."""
        return self._reaped(os.WNOHANG)

    def wait(self) -> int:
        code = self._reaped(0)
        assert code is not None
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)


@dataclass
class _Child:
    slot: int
    popen: ForkedChild
    ready_fd: int  # the read end of the child's ready pipe (-1 once read)
    started: float = field(default_factory=time.monotonic)
    ready: bool = False


class Supervisor:
    """Runs `processes` forked children, each ``child_main(slot, ready)``."""

    def __init__(self, child_main: ChildMain, processes: int, *, describe: str = "") -> None:
        self.child_main = child_main
        self.processes = processes
        self.describe = describe
        self.stop = threading.Event()
        self.signals = StopSignals()
        self.children: dict[int, _Child] = {}
        self._restarts: list[float] = []
        self._announced = False

    # -- children ------------------------------------------------------------------------

    def _spawn(self, slot: int) -> _Child:
        read_fd, write_fd = os.pipe()
        parent = os.getpid()
        for stream in (sys.stdout, sys.stderr):  # nothing buffered is written twice
            stream.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(read_fd)
            _child(self.child_main, slot, parent, write_fd)
        os.close(write_fd)
        child = _Child(slot, ForkedChild(pid), read_fd)
        self.children[slot] = child
        logger.info(
            "worker process %d started as pid %d",
            slot,
            pid,
            extra={"action": "worker_process_spawned", "slot": slot, "pid": pid},
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
        # could wait for ever on the event's lock (see _internal/stop_signals.py).
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


def _child(child_main: ChildMain, slot: int, parent: int, ready_fd: int) -> None:
    """A forked child's whole life: die with the parent, pause with it, run
    `child_main`, and exit with its status without unwinding anything of the
    parent's (its ``with`` blocks, its atexit handlers: they are the parent's)."""
    status = 1
    try:
        # The parent's handlers are the parent's: the worker installs its own.
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCONT):
            signal.signal(sig, signal.SIG_DFL)
        _follow_parent(parent)

        def ready() -> None:
            with contextlib.suppress(OSError):
                os.write(ready_fd, b"1")
            with contextlib.suppress(OSError):
                os.close(ready_fd)

        status = child_main(slot, ready)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        logging.shutdown()  # flushes every handler
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)


def _follow_parent(parent: int) -> None:
    """Die with the parent (``PR_SET_PDEATHSIG``) and pause with it."""
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(
        target=_pause_with, args=(parent,), name="pause-with-parent", daemon=True
    ).start()


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
