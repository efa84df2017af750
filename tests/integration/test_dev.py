"""`resumable dev` as a developer runs it: a real process with a home of its
own, so it starts (and must stop) its own embedded servers; the repository's
Procfile; a session run end to end over HTTP; then SIGTERM, a child's exit
or a SIGKILLed worker (restarted), and a check that nothing is left behind;
and a second `dev` in the same home, refused.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from resumable._internal.embedded import EmbeddedServices
from resumable.dev.processes import spawn
from resumable.dev.procfile import BUILTIN, exec_form, load_processes, resolve_command
from resumable.dev.supervisor import RestartBudget
from resumable.errors import ConfigurationError
from tests.conftest import API_TOKEN, ROOT, free_port, wait_until

# Start-up includes initdb in a fresh home.
START_TIMEOUT = 120.0
STOP_TIMEOUT = 60.0
PROCESS_NAMES = {"web", "worker", "scheduler"}


class DevProcess:
    """`python -m resumable.cli dev` in `home`, its output in a log file."""

    def __init__(self, home: Path, log_path: Path, *args: str) -> None:
        self.home = home
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        # Nothing from the caller's configuration: no URLs, so dev starts its own servers.
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("RESUMABLE_") and key not in {"DATABASE_URL", "REDIS_URL"}
        }
        env.update(
            RESUMABLE_HOME=str(home),
            RESUMABLE_WEB_PORT=str(self.port),
            RESUMABLE_API_TOKENS=API_TOKEN,
            PYTHONPATH=str(ROOT),
        )
        command = [sys.executable, "-m", "resumable.cli", "dev", *args]
        self.process = spawn("dev", command, env=env, cwd=ROOT, log=log_path)
        self.proc = self.process.popen
        self.children: dict[str, psutil.Process] = {}

    def output(self) -> str:
        return self.process.output()

    def _alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"dev exited with {self.proc.returncode}:\n{self.output()}")

    def ready(self) -> bool:
        """/readyz answers 200 (database and broker reachable)."""
        self._alive()
        try:
            return httpx.get(f"{self.base_url}/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def record_children(self) -> dict[str, psutil.Process]:
        """Name -> process of each Procfile child (every descendant is kept too)."""
        self._alive()
        found: dict[str, psutil.Process] = {}
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                cmdline = child.cmdline()
                self.children.setdefault(f"pid-{child.pid}", child)
                # A worker's processes are forked from it, with its command
                # line: the Procfile child is the one dev itself started.
                if (
                    cmdline[-1:]
                    and cmdline[-1] in PROCESS_NAMES
                    and "resumable.cli" in cmdline
                    and child.ppid() == self.proc.pid
                ):
                    found[cmdline[-1]] = child
        return found

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {API_TOKEN}"}
        return httpx.request(method, self.base_url + path, headers=headers, timeout=10, **kwargs)

    def cleanup(self) -> None:
        """Last resort after a failure: nothing this test started may outlive it."""
        if self.proc.poll() is None:
            self.process.kill()
        for child in self.children.values():
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()


@pytest.fixture
def home() -> Iterator[Path]:
    # Short, under /tmp: the servers' unix socket paths must fit in ~100 bytes.
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="rdev-"))
    try:
        yield path
    finally:
        EmbeddedServices(path).stop()
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def dev(home: Path, tmp_path: Path) -> Iterator[DevProcess]:
    process = DevProcess(home, tmp_path / "dev.log", "--agents", "tests.agents")
    try:
        wait_until(process.ready, timeout=START_TIMEOUT, interval=0.2, what="/readyz")
        names = wait_until(
            lambda: set(process.record_children()) == PROCESS_NAMES,
            timeout=30,
            what="web, worker and scheduler to run",
        )
        assert names
        yield process
    finally:
        process.cleanup()


def _running(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of `processes` still running. A zombie counts as gone: its parent
    (init, for the daemonized servers) reaps it in its own time."""
    running = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                running.append(process)
    return running


def _servers(home: Path) -> list[psutil.Process]:
    """The embedded servers of `home` and their children (PostgreSQL's backends)."""
    found = []
    for pid in EmbeddedServices(home).running_pids():
        with contextlib.suppress(psutil.NoSuchProcess):
            server = psutil.Process(pid)
            found += [server, *server.children(recursive=True)]
    return found


def _start_session(dev: DevProcess) -> str:
    def created() -> httpx.Response | None:
        response = dev.request("POST", "/v1/sessions", json={"agent": "five", "input": {}})
        # 422 until a worker has announced its agents.
        assert response.status_code in {201, 422}, response.text
        return response if response.status_code == 201 else None

    response = wait_until(created, timeout=30, interval=0.2, what="POST /v1/sessions to be 201")
    session_id: str = response.json()["session_id"]
    return session_id


def test_dev_runs_a_session_then_stops_everything_on_sigterm(dev: DevProcess) -> None:
    assert len(EmbeddedServices(dev.home).running_pids()) == 2, "no servers of its own"
    servers = _servers(dev.home)
    session_id = _start_session(dev)

    def completed() -> dict[str, Any] | None:
        body: dict[str, Any] = dev.request("GET", f"/v1/sessions/{session_id}").json()
        return body if body["status"] == "completed" else None

    session = wait_until(completed, timeout=30, interval=0.1, what="the session to complete")
    assert session["result"] == {"progress": ["one", "two", "three", "four", "five"]}

    dev.record_children()
    descendants = list(dev.children.values())
    dev.proc.send_signal(signal.SIGTERM)
    assert dev.proc.wait(timeout=STOP_TIMEOUT) == 0, dev.output()

    assert _running(descendants) == []
    assert EmbeddedServices(dev.home).running_pids() == []
    assert _running(servers) == []
    output = dev.output()
    assert f"web        http://127.0.0.1:{dev.port}" in output
    assert f"http://127.0.0.1:{dev.port}/openapi.json" in output
    assert "API token  from RESUMABLE_API_TOKENS" in output
    assert API_TOKEN not in output
    for name in PROCESS_NAMES:
        assert f" {name}" in output and f"{name} stopped" in output
    assert "worker started: " in output  # a child's own log line, relayed
    assert "embedded servers stopped" in output


def test_a_child_that_exits_stops_the_others_and_dev_fails(dev: DevProcess) -> None:
    servers = _servers(dev.home)
    children = dev.record_children()
    descendants = list(dev.children.values())

    # Its SIGTERM handler is set once it logs that it started; before that (a
    # loaded machine) the signal kills it instead of stopping it cleanly. Its
    # own line, not dev's "scheduler started (pid N)", said as it spawns it.
    wait_until(lambda: "scheduler started: every" in dev.output(), what="the scheduler to start")
    children["scheduler"].terminate()  # it stops by itself, as on a bad setting
    assert dev.proc.wait(timeout=STOP_TIMEOUT) == 1, dev.output()

    assert _running(descendants) == []
    assert EmbeddedServices(dev.home).running_pids() == []
    assert _running(servers) == []
    output = dev.output()
    assert "scheduler exited unexpectedly (status 0); stopped the others" in output, output


def test_a_sigkilled_worker_is_restarted_and_the_others_keep_running(dev: DevProcess) -> None:
    before = dev.record_children()
    before["worker"].kill()

    def restarted() -> psutil.Process | None:
        worker = dev.record_children().get("worker")
        return worker if worker is not None and worker.pid != before["worker"].pid else None

    worker = wait_until(restarted, timeout=30, interval=0.2, what="a new worker")
    assert (
        f"worker was killed by SIGKILL (pid {before['worker'].pid}); restarting it" in dev.output()
    )
    after = dev.record_children()
    assert {name: after[name].pid for name in ("web", "scheduler")} == {
        name: before[name].pid for name in ("web", "scheduler")
    }
    # The new worker runs sessions: the stack is whole again.
    session_id = _start_session(dev)
    wait_until(
        lambda: dev.request("GET", f"/v1/sessions/{session_id}").json()["status"] == "completed",
        timeout=30,
        interval=0.1,
        what="a session on the restarted worker",
    )
    assert worker.is_running()

    dev.proc.send_signal(signal.SIGTERM)
    assert dev.proc.wait(timeout=STOP_TIMEOUT) == 0, dev.output()
    assert _running(list(dev.children.values())) == []


def test_a_second_dev_in_the_same_home_refuses_to_start(dev: DevProcess, tmp_path: Path) -> None:
    servers = EmbeddedServices(dev.home).running_pids()
    second = DevProcess(dev.home, tmp_path / "second.log")
    try:
        status = second.proc.wait(timeout=30)
    finally:
        second.cleanup()
    output = second.output()
    assert status == 1, output
    assert output.strip().splitlines() == [
        f"error: another `resumable dev` (pid {dev.proc.pid}) is running in"
        f" {dev.home.resolve()}; stop it, or give this one a RESUMABLE_HOME of its own"
    ]
    # The first one goes on, on the same servers.
    assert dev.ready()
    assert EmbeddedServices(dev.home).running_pids() == servers
    assert set(dev.record_children()) == PROCESS_NAMES


def test_the_restart_budget_allows_five_restarts_a_minute() -> None:
    now = [0.0]
    budget = RestartBudget(limit=5, window=60, clock=lambda: now[0])
    assert [budget.take("worker") for _ in range(6)] == [True] * 5 + [False]
    assert budget.take("web")  # each process has a budget of its own
    now[0] = 60.5
    assert budget.take("worker")


# -- which processes run, and how (no servers needed) ---------------------------------


def test_the_procfile_is_read_release_skipped_and_resumable_resolved(tmp_path: Path) -> None:
    (tmp_path / "Procfile").write_text(
        "release: resumable db upgrade\n"
        "web: resumable web --port $PORT\n"
        "worker: FOO=1 resumable worker\n"
        "clock: ./clock.sh && echo done\n"
    )
    processes = load_processes(tmp_path, python="/venv/bin/python")
    assert processes.procfile == tmp_path / "Procfile"
    assert {spec.name: spec.command for spec in processes.specs} == {
        "web": "exec /venv/bin/python -m resumable.cli web --port $PORT",
        "worker": "FOO=1 resumable worker",
        "clock": "./clock.sh && echo done",
    }


def test_without_a_procfile_the_three_builtin_processes_run(tmp_path: Path) -> None:
    processes = load_processes(tmp_path, python="/py")
    assert processes.procfile is None
    assert [spec.name for spec in processes.specs] == list(BUILTIN)
    assert processes.specs[0].command == "exec /py -m resumable.cli web"


def test_a_procfile_with_nothing_to_run_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "Procfile").write_text("release: resumable db upgrade\n")
    with pytest.raises(ConfigurationError, match="names no process"):
        load_processes(tmp_path)


def test_only_simple_commands_get_exec() -> None:
    assert exec_form("resumable web") == "exec resumable web"
    assert exec_form("a | b") == "a | b"
    assert exec_form("a; b") == "a; b"
    assert exec_form("if true; then a; fi") == "if true; then a; fi"
    assert exec_form('grep "unterminated') == 'grep "unterminated'
    assert resolve_command("resumable worker", python="/a b/python") == (
        "'/a b/python' -m resumable.cli worker"
    )
    assert resolve_command("resumable-other x") == "resumable-other x"
