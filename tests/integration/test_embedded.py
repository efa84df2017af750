"""The embedded PostgreSQL and Valkey servers: shared by every local process of
one home, stopped by the last user, reaped when every user died.

Real servers in throwaway homes under /tmp (short, for unix socket paths), and
real user processes; every test leaves no server behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import psutil
import psycopg
import pytest
import redis

from resumable._internal.database_urls import libpq_url
from resumable._internal.embedded import EmbeddedServices, ServiceURLs, reap_orphans
from tests.conftest import ROOT, wait_until

# A separate process that uses a home's servers: acquires, reports, then
# releases when told to (or is killed).
_USER_SCRIPT = """
import json, os, sys
from pathlib import Path
from resumable._internal.embedded import EmbeddedServices

services = EmbeddedServices(Path(sys.argv[1]))
urls = services.acquire()
print(json.dumps({
    "pid": os.getpid(),
    "database_url": urls.database_url,
    "redis_url": urls.redis_url,
    "server_pids": services.running_pids(),
}), flush=True)
for line in sys.stdin:
    if line.strip() == "release":
        print(json.dumps({"stopped": services.release()}), flush=True)
        break
"""


class UserProcess:
    """A real process registered as a user of one home's servers."""

    def __init__(self, home: Path, log_path: Path) -> None:
        self.log_path = log_path
        self._log: IO[str] = open(log_path, "w")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _USER_SCRIPT, str(home)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        try:
            self.info = self._read(timeout=60)
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def server_pids(self) -> list[int]:
        return [int(pid) for pid in self.info["server_pids"]]

    @property
    def urls(self) -> ServiceURLs:
        return ServiceURLs(str(self.info["database_url"]), str(self.info["redis_url"]))

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise AssertionError(
                f"user process {self.pid} said nothing within {timeout} s:\n{self._log_text()}"
            )
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait(timeout=10)
            raise AssertionError(f"user process {self.pid} exited {code}:\n{self._log_text()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _log_text(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def release(self) -> bool:
        """Ask the process to release; returns whether that stopped the servers."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("release\n")
        self.proc.stdin.flush()
        stopped = bool(self._read(timeout=60)["stopped"])
        code = self.proc.wait(timeout=30)
        assert code == 0, f"user process exited {code}:\n{self._log_text()}"
        return stopped

    def kill(self) -> None:
        """SIGKILL: no release, no atexit, its pid file stays behind."""
        self.proc.kill()
        self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self._log.close()


class Sandbox:
    """Throwaway homes and user processes; cleans up everything it made."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.homes: list[Path] = []
        self.users: list[UserProcess] = []
        self.server_processes: set[int] = set()

    def home(self) -> Path:
        # mkdtemp under /tmp: pytest's tmp_path can exceed the unix socket path limit.
        home = Path(tempfile.mkdtemp(dir="/tmp", prefix="rte-"))
        self.homes.append(home)
        return home

    def start_user(self, home: Path) -> UserProcess:
        user = UserProcess(home, self.logs / f"user-{len(self.users)}.log")
        self.users.append(user)
        self.track(user.server_pids)
        return user

    def track(self, server_pids: list[int]) -> list[int]:
        """Remember the servers and their postmaster's children, to check they end."""
        for pid in server_pids:
            self.server_processes.add(pid)
            try:
                children = psutil.Process(pid).children(recursive=True)
            except psutil.NoSuchProcess:
                continue
            self.server_processes.update(int(child.pid) for child in children)
        return server_pids

    def alive(self) -> list[int]:
        return sorted(pid for pid in self.server_processes if not _gone(pid))

    def cleanup(self) -> None:
        for user in self.users:
            user.close()
        try:
            for home in self.homes:
                services = EmbeddedServices(home)
                services.stop()
                assert services.running_pids() == [], f"servers of {home} survived stop()"
            wait_until(lambda: not self.alive(), timeout=10, what="server processes to end")
        finally:
            for pid in self.alive():  # last resort, so a failure never leaks servers
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for home in self.homes:
                shutil.rmtree(home, ignore_errors=True)


def _gone(pid: int) -> bool:
    """Not running (a zombie, waiting for a parent that may never reap it, counts as gone)."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _answers(urls: ServiceURLs) -> bool:
    """Both servers accept connections and run a command."""
    with psycopg.connect(libpq_url(urls.database_url), connect_timeout=5) as conn:
        row = conn.execute("SELECT 1").fetchone()
    client = redis.Redis.from_url(urls.redis_url, socket_timeout=5)
    try:
        pong = bool(client.ping())
    finally:
        client.close()
    return row == (1,) and pong


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    box = Sandbox(tmp_path)
    try:
        yield box
    finally:
        box.cleanup()


@pytest.fixture
def home(sandbox: Sandbox) -> Path:
    return sandbox.home()


# -- tests ------------------------------------------------------------------------------


def test_acquire_starts_real_servers_shared_with_other_processes(
    sandbox: Sandbox, home: Path
) -> None:
    services = EmbeddedServices(home)
    assert services.running_pids() == []

    urls = services.acquire()
    pids = sandbox.track(services.running_pids())
    assert len(pids) == 2
    assert _answers(urls)

    other = sandbox.start_user(home)
    assert other.server_pids == pids, "a second process started its own servers"
    assert other.urls == urls
    assert sorted(int(p.name) for p in services.users_dir.iterdir()) == sorted(
        [os.getpid(), other.pid]
    )

    # This process leaves first: the other still uses the servers.
    assert services.release() is False
    assert services.running_pids() == pids
    assert _answers(other.urls)

    # The last user out stops them.
    assert other.release() is True
    assert services.running_pids() == []
    wait_until(lambda: not sandbox.alive(), timeout=10, what="server processes to end")


def test_last_release_stops_servers_whichever_user_it_is(sandbox: Sandbox, home: Path) -> None:
    services = EmbeddedServices(home)
    first = sandbox.start_user(home)
    pids = first.server_pids
    assert len(pids) == 2
    assert services.running_pids() == pids

    second = sandbox.start_user(home)
    assert second.server_pids == pids

    assert first.release() is False
    assert services.running_pids() == pids
    assert _answers(second.urls)

    urls = services.acquire()  # a third user joins while the second still lives
    assert services.running_pids() == pids
    assert second.release() is False
    assert _answers(urls)

    assert services.release() is True
    assert services.running_pids() == []
    wait_until(lambda: not sandbox.alive(), timeout=10, what="server processes to end")


def test_servers_of_a_killed_owner_are_reaped(sandbox: Sandbox, home: Path) -> None:
    services = EmbeddedServices(home)
    owner = sandbox.start_user(home)
    pids = owner.server_pids

    # While the owner lives, the reaper leaves its servers alone.
    assert home not in reap_orphans()
    assert services.running_pids() == pids

    owner.kill()
    # Servers are daemons: killing their user does not take them down...
    assert services.running_pids() == pids
    assert _answers(owner.urls)

    # ...the reaper does.
    assert home in reap_orphans()
    assert services.running_pids() == []
    wait_until(lambda: not sandbox.alive(), timeout=10, what="server processes to end")
    assert home not in reap_orphans()


def test_acquire_in_another_home_reaps_orphaned_servers(sandbox: Sandbox, home: Path) -> None:
    orphaned = EmbeddedServices(home)
    owner = sandbox.start_user(home)
    orphan_pids = owner.server_pids
    owner.kill()
    assert orphaned.running_pids() == orphan_pids

    services = EmbeddedServices(sandbox.home())
    urls = services.acquire()
    pids = sandbox.track(services.running_pids())

    assert orphaned.running_pids() == []
    assert all(_gone(pid) for pid in orphan_pids)
    assert len(pids) == 2
    assert not set(pids) & set(orphan_pids)
    assert _answers(urls)

    assert services.release() is True
    assert services.running_pids() == []
    wait_until(lambda: not sandbox.alive(), timeout=10, what="server processes to end")


def test_acquire_in_the_same_home_reuses_servers_of_a_killed_owner(
    sandbox: Sandbox, home: Path
) -> None:
    services = EmbeddedServices(home)
    owner = sandbox.start_user(home)
    pids = owner.server_pids
    owner.kill()

    urls = services.acquire()
    assert services.running_pids() == pids, "started new servers instead of reusing them"
    assert urls == owner.urls
    assert _answers(urls)
    # The dead owner's registration was pruned: only this process is a user.
    assert [p.name for p in services.users_dir.iterdir()] == [str(os.getpid())]

    assert services.release() is True
    assert services.running_pids() == []
    wait_until(lambda: not sandbox.alive(), timeout=10, what="server processes to end")
