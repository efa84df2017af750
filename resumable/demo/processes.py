"""The demo's deployment: real ``resumable web``, ``scheduler`` and ``worker``
processes, spawned exactly as a Procfile would run them.

The demo is only proof if the product runs as it does in production: separate
processes talking through PostgreSQL and Redis, one of them SIGKILLed. Each
child logs to a file (shown when something goes wrong) and every child is
stopped on the way out, SIGTERM first, then SIGKILL, so the demo leaves no
process behind even when it fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from resumable.demo.deadline import DemoError

_STOP_SECONDS = 10.0


@dataclass
class Child:
    """One spawned process and its log."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    ready_text: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    def is_ready(self) -> bool:
        if self.proc.poll() is not None:
            raise DemoError(f"{self.name} exited with status {self.proc.returncode}")
        return self.ready_text in self.log.read_text(errors="replace")

    def tail(self, lines: int = 15) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


class Deployment:
    """Spawns the demo's processes with one shared environment and stops them all."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.children: list[Child] = []

    def spawn(self, name: str, args: list[str], ready_text: str, **env: str) -> Child:
        """Start ``python -m resumable.cli ARGS`` without waiting for it."""
        log = self.log_dir / f"{name.replace(' ', '-')}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "resumable.cli", *args],
                env={**os.environ, **self.env, **env},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        child = Child(name, proc, log, ready_text)
        self.children.append(child)
        return child

    def web(self, port: int) -> Child:
        return self.spawn("web", ["web", "--port", str(port)], "Uvicorn running")

    def scheduler(self) -> Child:
        return self.spawn("scheduler", ["scheduler"], "scheduler started")

    def worker(self, name: str, *agent_modules: str, threads: int = 1) -> Child:
        args = ["worker"]
        for module in agent_modules:
            args += ["--agents", module]
        return self.spawn(name, args, "worker started", RESUMABLE_WORKER_THREADS=str(threads))

    @staticmethod
    def kill(child: Child) -> None:
        """SIGKILL: no clean-up, no lease release, no message ack."""
        child.proc.send_signal(signal.SIGKILL)
        child.proc.wait(timeout=_STOP_SECONDS)

    def logs(self) -> str:
        return "\n".join(f"--- {c.name} (pid {c.pid}) ---\n{c.tail()}" for c in self.children)

    def stop_all(self) -> None:
        """SIGTERM every live child, then SIGKILL whichever outlives the grace period."""
        live = [c for c in self.children if c.proc.poll() is None]
        for child in live:
            child.proc.terminate()
        end = time.monotonic() + _STOP_SECONDS
        for child in live:
            try:
                child.proc.wait(timeout=max(end - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait(timeout=_STOP_SECONDS)

    def __enter__(self) -> Deployment:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_all()
