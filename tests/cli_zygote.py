"""One-shot ``resumable`` commands for the tests, each a process of its own
forked from one that has already started the interpreter and imported the
command line.

``python -m resumable.cli ...`` spends 0.5-0.8 s of CPU starting Python and
importing the command line and its command's module before it reads its
arguments, and the suite runs a few hundred such commands on two cores. A
zygote (one per test process, started on first use) does that once; each
command is then a fork of it that runs ``resumable.cli`` as ``-m`` does
(``runpy``, as ``__main__``, ``sys.argv[0]`` the module's file, the working
directory first on ``sys.path``), with its own pid, arguments, environment,
working directory, stdin (/dev/null), stdout and stderr (files, read back as
``subprocess.run(capture_output=True, text=True)`` reads its pipes) and exit
status. An exception it does not catch reaches the interpreter's top level,
which prints the traceback and exits 1, and ``SystemExit`` ends it as it ends
any Python process.

What a fork skips is only what every such process does before it parses its
arguments: the interpreter's start, ``resumable.cli.main`` and the command
modules (a real process imports one of them; a fork has them all). What a
command loads as it runs (the broker on a send, the table classes on a read,
the embedded servers' code) it still imports itself. Fresh interpreters still
check what depends on the start itself: each command module imported alone
(tests/unit/test_startup_imports.py), argv bytes that are not UTF-8, the
console script, signals, the working directory on ``sys.path``
(test_cli_errors.py), and test_cli.py's round trip.

A zygote starts with every variable of its commands' environment but those
only read as a command runs (``RUNTIME_VARIABLES``: the servers' URLs,
``RESUMABLE_*`` settings, ``PGTZ``, ``COLUMNS``), which each fork sets: so
whatever the interpreter's start or an import reads (``PYTHONPATH``,
``HOME``, the locale...) is what the command would have read. Commands whose
other variables or working directory differ get a zygote of their own.
A zygote whose imports fail, print anything or start a thread forks nothing:
its commands run on fresh interpreters, as they do all with
RESUMABLE_TEST_FRESH_CLI set.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import locale
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# Read when a command runs (settings, libpq, rich's console size), never by
# the interpreter's start or by an import: a fork may set them.
RUNTIME_VARIABLES = ("DATABASE_URL", "REDIS_URL", "COLUMNS", "PGTZ")
RUNTIME_PREFIXES = ("RESUMABLE_",)


def _runtime(name: str) -> bool:
    return name in RUNTIME_VARIABLES or name.startswith(RUNTIME_PREFIXES)


# -- the zygote (its own process) --------------------------------------------------------


def serve() -> None:
    """The zygote's loop: a JSON request a line on stdin, one fork each, and a
    JSON line on stdout once it exits. Returns only in a fork, which then
    runs the command (``main``).

    It first says whether it is of use: not if an import failed, or printed
    anything (a process of its own would print it with each command's
    output), or started a thread (a fork copies only the thread that forks).
    The client then runs each command on a fresh interpreter instead."""
    protocol = os.dup(1)
    os.dup2(2, 1)  # what an import prints goes to the zygote's log, not to the protocol
    ready = _import_the_command_line()
    _reply(protocol, {"ready": ready})
    if not ready:
        os._exit(0)
    # What is imported stays: no fork's collections walk it (its exit would
    # otherwise cost more than the imports it skipped), as a worker freezes
    # its start-up heap (resumable/queue/worker.py).
    gc.freeze()
    children: dict[int, str] = {}
    pending = b""
    while True:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            request_id = children.pop(pid, None)
            if request_id is not None:
                code = os.waitstatus_to_exitcode(status)
                _reply(protocol, {"id": request_id, "returncode": code})
        readable, _, _ = select.select([0], [], [], 0.005 if children else None)
        if not readable:
            continue
        chunk = os.read(0, 1 << 16)
        if not chunk:  # the test process is gone: so are its commands
            for pid in children:
                _kill(pid)
            os._exit(0)
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            if "kill" in request:
                for pid, request_id in children.items():
                    if request_id == request["kill"]:
                        _kill(pid)
                continue
            pid = os.fork()
            if pid == 0:
                os.close(protocol)
                _become(request)
                return
            children[pid] = request["id"]


def _import_the_command_line() -> bool:
    """``resumable.cli.main`` and every command's module, imported; whether
    that went without an error, output or thread."""
    try:
        from resumable.cli.main import COMMANDS

        for where in sorted({where.split(":")[0] for where in COMMANDS.values()}):
            __import__(where)
    except Exception:
        traceback.print_exc()
        return False
    sys.stdout.flush()
    sys.stderr.flush()
    return os.fstat(2).st_size == 0 and threading.active_count() == 1


def main() -> None:
    """What ``python -m resumable.cli`` runs, in a fork (``serve`` returned)."""
    import runpy

    runpy._run_module_as_main("resumable.cli")  # type: ignore[attr-defined]


def _become(request: dict[str, Any]) -> None:
    """In the fork: the command's stdio, directory, environment and argv."""
    stdin = os.open(os.devnull, os.O_RDONLY)
    stdout = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    stderr = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["-m", *request["args"]]  # runpy puts the module's file first, as -m does
    sys.path[0] = os.getcwd()  # -c put "" first; -m puts the working directory


def _reply(fd: int, message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


# -- the test process's side ------------------------------------------------------------------


class Zygote:
    """A running zygote and the commands it has forked."""

    def __init__(self, env: Mapping[str, str], cwd: Path) -> None:
        self.env = dict(env)
        self.cwd = cwd
        self.dir = Path(tempfile.mkdtemp(prefix="resumable-cli-"))
        self.log = self.dir / "zygote.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from tests.cli_zygote import serve, main; serve(); main()"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=self.env,
                cwd=cwd,
            )
        self.lock = threading.Lock()
        self.count = 0
        self.replies = b""
        self.ready: bool | None = None  # known once the zygote says so

    def run_all(
        self, commands: Sequence[tuple[Sequence[str], Mapping[str, str]]], timeout: float
    ) -> list[subprocess.CompletedProcess[str]]:
        """`commands` (argv, full environment) at once; their results in order."""
        with self.lock:
            if not self._ready():
                return _fresh(commands, self.cwd, timeout)
            ids = []
            for args, env in commands:
                self.count += 1
                request_id = str(self.count)
                ids.append(request_id)
                self._send(
                    {
                        "id": request_id,
                        "args": list(args),
                        "env": dict(env),
                        "cwd": str(self.cwd),
                        "stdout": str(self.dir / f"{request_id}.out"),
                        "stderr": str(self.dir / f"{request_id}.err"),
                    }
                )
            try:
                codes, timed_out = self._wait_for(ids, timeout)
            except BaseException:  # a test's timeout, Ctrl-C: none of them outlives it
                for request_id in ids:
                    self._send({"kill": request_id})
                raise
            results = []
            for (args, _), request_id in zip(commands, ids, strict=True):
                argv = [sys.executable, "-m", "resumable.cli", *args]
                out, err = self._output(request_id)
                if request_id in timed_out:
                    raise subprocess.TimeoutExpired(argv, timeout, out, err)
                results.append(subprocess.CompletedProcess(argv, codes[request_id], out, err))
            return results

    def _ready(self) -> bool:
        """Whether the zygote has started and may fork (see ``serve``)."""
        if self.ready is None:
            deadline = time.monotonic() + 120
            said: list[dict[str, Any]] = []
            while not said and time.monotonic() < deadline:
                try:
                    said = self._read(deadline - time.monotonic())
                except RuntimeError:  # exited: it said why in its log
                    break
            self.ready = bool(said) and said[0].get("ready") is True
        return self.ready

    def _wait_for(self, ids: list[str], timeout: float) -> tuple[dict[str, int], set[str]]:
        """Each command's exit status; those still running after `timeout`
        are killed and reaped, as subprocess.run's timeout does, and named
        in the second result."""
        codes: dict[str, int] = {}
        timed_out: set[str] = set()
        deadline = time.monotonic() + timeout
        while len(codes) < len(ids):
            left = deadline - time.monotonic()
            if left <= 0:
                if timed_out:
                    raise RuntimeError(f"the zygote did not reap killed commands:\n{self._log()}")
                timed_out = set(ids) - set(codes)
                for request_id in timed_out:
                    self._send({"kill": request_id})
                deadline = time.monotonic() + 30
                continue
            for reply in self._read(left):
                if reply.get("id") in ids:  # not one of an earlier, interrupted call
                    codes[reply["id"]] = int(reply["returncode"])
        return codes, timed_out

    def _read(self, timeout: float) -> list[dict[str, Any]]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        readable, _, _ = select.select([fd], [], [], timeout)
        if not readable:
            return []
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise RuntimeError(f"the zygote exited; its log:\n{self._log()}")
        self.replies += chunk
        *lines, self.replies = self.replies.split(b"\n")
        return [json.loads(line) for line in lines]

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def _output(self, request_id: str) -> tuple[str, str]:
        texts = []
        for suffix in ("out", "err"):
            path = self.dir / f"{request_id}.{suffix}"
            data = path.read_bytes() if path.exists() else b""
            path.unlink(missing_ok=True)
            texts.append(_text(data))
        return texts[0], texts[1]

    def _log(self) -> str:
        return self.log.read_text(errors="replace")[-5000:]

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):  # EOF: the zygote kills what is left and exits
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _text(data: bytes) -> str:
    """Bytes read as ``subprocess.run(text=True)`` reads a pipe."""
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


_zygotes: dict[tuple[tuple[tuple[str, str], ...], str], Zygote] = {}
_zygotes_lock = threading.Lock()
# Zygotes kept at once; the one used longest ago goes first.
MAX_ZYGOTES = 2


def _zygote_for(env: Mapping[str, str], cwd: Path) -> Zygote:
    start_env = tuple(sorted((k, v) for k, v in env.items() if not _runtime(k)))
    key = (start_env, str(cwd))
    with _zygotes_lock:
        zygote = _zygotes.pop(key, None)
        if zygote is not None and zygote.proc.poll() is not None:
            zygote.close()
            zygote = None
        if zygote is None:
            while len(_zygotes) >= MAX_ZYGOTES:
                _zygotes.pop(next(iter(_zygotes))).close()
            zygote = Zygote(dict(start_env), cwd)
        _zygotes[key] = zygote  # last: the most recently used
        return zygote


@atexit.register
def _close_all() -> None:
    for zygote in _zygotes.values():
        zygote.close()
    _zygotes.clear()


def run_all(
    commands: Sequence[tuple[Sequence[str], Mapping[str, str]]],
    *,
    cwd: Path = ROOT,
    timeout: float = 60,
) -> list[subprocess.CompletedProcess[str]]:
    """``python -m resumable.cli ARGS`` with exactly the environment ENV, for
    each (ARGS, ENV) of `commands`, at once, forked from the zygote whose
    start-up environment they share (all but ``RUNTIME_VARIABLES``)."""
    if os.environ.get("RESUMABLE_TEST_FRESH_CLI"):  # set it to run each on a fresh interpreter
        return _fresh(commands, cwd, timeout)
    results: list[subprocess.CompletedProcess[str] | None] = [None] * len(commands)
    groups: dict[int, tuple[Zygote, list[int]]] = {}
    for index, (_, env) in enumerate(commands):
        zygote = _zygote_for(env, cwd)
        groups.setdefault(id(zygote), (zygote, []))[1].append(index)
    for zygote, indexes in groups.values():
        done = zygote.run_all([commands[i] for i in indexes], timeout)
        for index, result in zip(indexes, done, strict=True):
            results[index] = result
    return [result for result in results if result is not None]


def run(
    args: Sequence[str], env: Mapping[str, str], *, cwd: Path = ROOT, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """One command, as ``run_all`` runs each."""
    [result] = run_all([(args, env)], cwd=cwd, timeout=timeout)
    return result


def _fresh(
    commands: Sequence[tuple[Sequence[str], Mapping[str, str]]], cwd: Path, timeout: float
) -> list[subprocess.CompletedProcess[str]]:
    """`commands` at once, each ``python -m resumable.cli`` from the start."""
    running = [
        subprocess.Popen(
            [sys.executable, "-m", "resumable.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(env),
            cwd=cwd,
        )
        for args, env in commands
    ]
    results = []
    for process in running:
        try:
            out, err = process.communicate(timeout=timeout)
        finally:
            process.kill()
        results.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return results
