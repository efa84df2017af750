"""The one way ``resumable dev``, the demo, the tests and the benchmarks spawn,
watch and stop processes.

- Every child leads its own session and process group: a terminal's Ctrl-C
  reaches only the parent, which then stops each child in order, and a signal
  sent to a child reaches everything its command started.
- A child counts as stopped when its whole group is gone, not when its leader
  exits, so nothing outlives the parent (see ``resumable._internal.procfs``).
- Stopping is SIGTERM to each group (with SIGCONT, so a SIGSTOPped child can
  act on it), then SIGKILL for whatever is left after the caller's grace
  period: a worker finishing a step needs up to a lease.
- A child's output goes to a log file (searched for the line that says it is
  ready, shown when something fails) or, line by line, to a callback (dev's
  prefixed, coloured output).
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from resumable._internal.procfs import group_alive, group_stopped

# After SIGKILL, how long to wait for the kernel to take the processes away.
KILL_WAIT_SECONDS = 5.0
_POLL_SECONDS = 0.05


class ProcessExitedError(Exception):
    """A child exited while it was expected to start or to keep running."""


def free_port(host: str = "127.0.0.1", count: int = 1) -> int:
    """A TCP port nobody listens on right now (with the `count - 1` ports
    after it), for a child to bind.

    Taken below the kernel's ephemeral range: a port the kernel hands out
    (``bind`` to port 0) can be taken by any outgoing connection of this
    machine before the child binds it, which on a busy machine running tests
    side by side happened."""
    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range")
    low = int(ephemeral.read_text().split()[0]) if ephemeral.exists() else 32768
    candidates = range(max(1024, low - 10_000), low - count)
    for port in random.sample(candidates, min(500, len(candidates))):
        if all(_bindable(host, port + n) for n in range(count)):
            return port
    raise RuntimeError(f"no {count} free port(s) in a row below {low} on {host}")


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def describe_status(returncode: int | None) -> str:
    """``status 1``, ``killed by SIGKILL``: how a child ended, for a log line."""
    if returncode is None:
        return "status unknown"
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"status {returncode}"


@dataclass(eq=False)
class Process:
    """A spawned child, the leader of its own process group."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path | None = None
    ready_text: str | None = None
    reader: threading.Thread | None = None  # relays the output when there is no log file

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        return self.popen

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def exited(self) -> bool:
        """Whether the leader has exited (and is reaped); its group may live on."""
        return self.popen.poll() is not None

    def running(self) -> bool:
        """Whether anything of this child is left (its group may outlive its leader)."""
        return not self.exited() or group_alive(self.pid)

    def output(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def check_alive(self) -> None:
        if self.exited():
            raise ProcessExitedError(
                f"{self.name} exited ({describe_status(self.returncode)}); its log:\n"
                + self.tail(40)
            )

    def ready(self) -> bool:
        """Whether the ready text is in the log yet; raises if the child exited."""
        self.check_alive()
        return self.ready_text is not None and self.ready_text in self.output()

    def wait_ready(self, timeout: float) -> Process:
        deadline = time.monotonic() + timeout
        while not self.ready():
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name} did not say {self.ready_text!r} within {timeout:g} s"
                    f" (log {self.log_path}):\n{self.tail(40)}"
                )
            time.sleep(_POLL_SECONDS)
        return self

    def signal(self, sig: int) -> bool:
        """Send `sig` to the whole group; False if nothing of it is left."""
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def pause(self, timeout: float = 10.0) -> None:
        """SIGSTOP the whole group and return once the kernel shows every
        thread of it stopped (see ``procfs.group_stopped``): a test that acts
        on a paused worker right after ``kill`` could otherwise race threads
        that have not stopped yet."""
        self.signal(signal.SIGSTOP)
        deadline = time.monotonic() + timeout
        while not group_stopped(self.pid):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name} (group {self.pid}) did not stop within {timeout:g} s"
                )
            time.sleep(0.005)

    def resume(self) -> None:
        """SIGCONT the whole group (the other half of ``pause``)."""
        self.signal(signal.SIGCONT)

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL: no clean-up, no lease release, no message ack."""
        self.signal(signal.SIGKILL)
        self.popen.wait(timeout=timeout)

    def stop(self, grace_seconds: float = 15.0) -> int | None:
        """SIGTERM, SIGKILL after `grace_seconds`; the exit status."""
        stop_processes([self], grace_seconds)
        return self.returncode

    def join_output(self, timeout: float = 2.0) -> None:
        """Wait for the rest of a relayed output."""
        if self.reader is not None:
            self.reader.join(timeout=timeout)


def spawn(
    name: str,
    command: Sequence[str] | str,
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    log: Path | None = None,
    relay: Callable[[bytes], None] | None = None,
    ready_text: str | None = None,
) -> Process:
    """Start `command` (a string runs in the shell) as the leader of a new group.

    Its output (stderr included) goes to the file `log`, or each line to `relay`
    on a thread of its own; with neither, to this process's stdout.
    """
    log_file = open(log, "wb") if log is not None else None  # noqa: SIM115 - closed below
    try:
        popen = subprocess.Popen(
            command,
            shell=isinstance(command, str),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log_file or (subprocess.PIPE if relay is not None else None),
            stderr=subprocess.STDOUT,
            # Its own group: a terminal's Ctrl-C reaches the parent alone, and
            # killpg reaches everything the command starts.
            start_new_session=True,
        )
    finally:
        if log_file is not None:
            log_file.close()  # the child has its own descriptor
    process = Process(name, popen, log, ready_text)
    if relay is not None:
        process.reader = threading.Thread(
            target=_relay, args=(popen, relay), name=f"relay-{name}", daemon=True
        )
        process.reader.start()
    return process


def _relay(popen: subprocess.Popen[bytes], relay: Callable[[bytes], None]) -> None:
    assert popen.stdout is not None
    with popen.stdout:
        for line in iter(popen.stdout.readline, b""):
            relay(line)


def stop_processes(
    processes: Sequence[Process],
    grace_seconds: float,
    *,
    say: Callable[[str], None] = lambda _line: None,
    forced: Callable[[], bool] = lambda: False,
) -> bool:
    """SIGTERM every group, SIGKILL what is left after `grace_seconds` (or as soon
    as `forced()` says so); return whether none needed SIGKILL."""
    live = [process for process in processes if process.running()]
    for process in live:
        if process.signal(signal.SIGTERM):
            process.signal(signal.SIGCONT)
            say(f"sent SIGTERM to {process.name} (process group {process.pid})")
    deadline = time.monotonic() + grace_seconds
    killed_at: float | None = None
    while live:
        time.sleep(_POLL_SECONDS)
        live = [process for process in live if process.running()]
        if not live:
            break
        now = time.monotonic()
        names = ", ".join(process.name for process in live)
        if killed_at is None and (now > deadline or forced()):
            say(f"{names} still running; sending SIGKILL")
            for process in live:
                process.signal(signal.SIGKILL)
            killed_at = now
        elif killed_at is not None and now > killed_at + KILL_WAIT_SECONDS:
            say(f"could not stop {names}")
            break
    return killed_at is None


class Deployment:
    """``python -m resumable.cli web|worker|scheduler`` processes sharing one
    environment and one log directory, all stopped together on the way out, so
    nothing is left behind even when the caller fails."""

    def __init__(
        self,
        env: Mapping[str, str],
        log_dir: Path,
        *,
        cwd: Path | None = None,
        grace_seconds: float = 10.0,
    ) -> None:
        self.env = dict(env)
        self.log_dir = log_dir
        self.cwd = cwd
        self.grace_seconds = grace_seconds
        self.children: list[Process] = []
        self._killed: set[Process] = set()

    def spawn(self, name: str, args: Sequence[str], ready_text: str, **env: str) -> Process:
        """Start ``python -m resumable.cli ARGS`` without waiting for it."""
        child = spawn(
            self.label(name),
            self.command(args),
            env={**os.environ, **self.env, **env},
            cwd=self.cwd,
            log=self._log_path(name),
            ready_text=ready_text,
        )
        self.children.append(child)
        return child

    def command(self, args: Sequence[str]) -> list[str]:
        """The command line of ``resumable ARGS`` (a test harness that runs
        processes elsewhere, say in a network namespace, wraps it)."""
        return [sys.executable, "-m", "resumable.cli", *args]

    def label(self, name: str) -> str:
        """What a process is called in the deployment's messages."""
        return name

    def web(self, port: int, *, name: str = "web", **env: str) -> Process:
        return self.spawn(name, ["web", "--port", str(port)], "Uvicorn running", **env)

    def scheduler(self, *, name: str = "scheduler", **env: str) -> Process:
        return self.spawn(name, ["scheduler"], "scheduler started", **env)

    def worker(self, *agent_modules: str, name: str = "worker", **env: str) -> Process:
        args = ["worker"]
        for module in agent_modules:
            args += ["--agents", module]
        return self.spawn(name, args, "worker started", **env)

    def kill(self, child: Process) -> None:
        """SIGKILL: no clean-up, no lease release, no message ack."""
        self._killed.add(child)
        child.kill()

    def check_alive(self) -> None:
        """Raise ProcessExitedError if a child exited that was not killed on purpose."""
        for child in self.children:
            if child not in self._killed:
                child.check_alive()

    def logs(self) -> str:
        return "\n".join(f"--- {c.name} (pid {c.pid}) ---\n{c.tail()}" for c in self.children)

    def stop_all(self) -> bool:
        """SIGTERM every child, then SIGKILL whichever outlives the grace period."""
        return stop_processes(self.children, self.grace_seconds)

    def _log_path(self, name: str) -> Path:
        stem = re.sub(r"[^\w.-]+", "-", name).strip("-") or "process"
        taken = {child.log_path for child in self.children}
        path, n = self.log_dir / f"{stem}.log", 1
        while path in taken:
            n += 1
            path = self.log_dir / f"{stem}-{n}.log"
        return path

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()
