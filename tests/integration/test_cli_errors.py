"""Bad input and misconfiguration on the real command line: one line on
stderr, a non-zero exit, no traceback, nothing changed; and the fixes that
make the commands do what a new user expects (fresh embedded home, enqueue
without --input, a worker started next to its module)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from resumable._internal.database_urls import libpq_url
from resumable._internal.embedded import EmbeddedServices
from resumable.client import Client
from tests import cli_zygote
from tests.conftest import ROOT, ManagedProcess, broker_env, free_port, wait_until

# The console script, as a user types it: unlike `python -m`, it does not put
# the working directory on the import path.
CONSOLE_SCRIPT = Path(sys.executable).parent / "resumable"


def _run(
    *args: str,
    client: Client | None = None,
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
    command: list[str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    full_env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": "/tmp"}
    if client is not None:
        full_env["DATABASE_URL"] = client.settings.database_url or ""
        full_env["REDIS_URL"] = client.settings.redis_url or ""
        full_env.update(broker_env(client.settings))
    full_env.update(env or {})
    if command is None:  # `python -m resumable.cli`, forked (tests/cli_zygote.py)
        return cli_zygote.run(args, full_env, cwd=cwd, timeout=timeout)
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd,
        check=False,
        timeout=timeout,
    )


def _run_all(
    commands: list[tuple[str, ...]], client: Client, env: dict[str, str] | None = None
) -> list[subprocess.CompletedProcess[str]]:
    """`commands` run at once, each in its own process as `_run` runs one:
    the checks are independent, and their start-ups overlap."""
    full_env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": "/tmp"}
    full_env["DATABASE_URL"] = client.settings.database_url or ""
    full_env["REDIS_URL"] = client.settings.redis_url or ""
    full_env.update(broker_env(client.settings))
    full_env.update(env or {})
    return cli_zygote.run_all([(args, full_env) for args in commands], cwd=ROOT, timeout=60)


def _one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """The single stderr line of a failed command, checked for `fragments`."""
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def _with_url(client: Client, **parts: object) -> str:
    url = make_url(client.settings.database_url or "")
    return url.set(**parts).render_as_string(hide_password=False)  # type: ignore[arg-type]


# -- unreachable or unusable servers ----------------------------------------------------


def test_unreachable_database_fails_within_seconds_naming_the_setting(client: Client) -> None:
    port = free_port()
    closed = f"postgresql://postgres@127.0.0.1:{port}/resumable"
    started = time.monotonic()
    result = _run("enqueue", "five", client=client, env={"DATABASE_URL": closed})
    elapsed = time.monotonic() - started
    _one_line_error(result, f"127.0.0.1:{port}", "DATABASE_URL", "Connection refused")
    assert result.returncode == 1
    assert elapsed < 10, f"took {elapsed:.1f} s (the pool alone waits 30 s)"

    missing = _run(
        "sessions", "list", client=client, env={"DATABASE_URL": _with_url(client, database="nope")}
    )
    _one_line_error(missing, "DATABASE_URL", 'database "nope" does not exist')

    stranger = _run(
        "enqueue", "five", client=client, env={"DATABASE_URL": _with_url(client, username="who")}
    )
    _one_line_error(stranger, "DATABASE_URL", 'role "who" does not exist')
    assert client.count_by_status() == {}


def test_a_worker_with_an_unreachable_server_stops_at_once_naming_it(client: Client) -> None:
    port = free_port()
    broker_case = (  # the broker the tests run on, out of reach
        (
            {"RESUMABLE_BROKER_URL": f"amqp://guest:guest@127.0.0.1:{port}/"},
            ["RESUMABLE_BROKER_URL"],
        )
        if client.settings.broker_url
        else ({"REDIS_URL": f"redis://127.0.0.1:{port}/0"}, ["REDIS_URL"])
    )
    for env, fragments in [
        ({"DATABASE_URL": f"postgresql://postgres@127.0.0.1:{port}/x"}, ["DATABASE_URL"]),
        broker_case,
    ]:
        started = time.monotonic()
        result = _run("worker", "--agents", "tests.agents", client=client, env=env, timeout=30)
        _one_line_error(result, f"127.0.0.1:{port}", "Connection refused", *fragments)
        assert time.monotonic() - started < 10


@pytest.mark.redis_broker
def test_unreachable_redis_fails_before_anything_is_written(client: Client) -> None:
    port = free_port()
    result = _run(
        "enqueue", "five", client=client, env={"REDIS_URL": f"redis://127.0.0.1:{port}/0"}
    )
    _one_line_error(result, f"127.0.0.1:{port}", "REDIS_URL", "Connection refused")
    assert client.count_by_status() == {}


@pytest.mark.parametrize(
    "command",
    [("web", "--port", "{port}"), ("scheduler",), ("worker", "--agents", "tests.agents")],
)
def test_a_database_or_role_that_does_not_exist_stops_every_process_in_one_line(
    client: Client, command: tuple[str, ...]
) -> None:
    """No retry creates a database or a role: the web process and the
    scheduler once took these for an outage and logged a warning every few
    seconds forever. Each process now stops at start, naming the setting,
    what is wrong and the server's words (SQLSTATE 3D000, 28000)."""
    args = [arg.replace("{port}", str(free_port())) for arg in command]
    for parts, fragments in (
        (
            {"database": "no_such_db"},
            ["names a database that does not exist", 'database "no_such_db" does not exist'],
        ),
        (
            {"username": "no_such_role"},
            ["names a user that may not log in", 'role "no_such_role" does not exist'],
        ),
    ):
        env = {"DATABASE_URL": _with_url(client, **parts)}
        started = time.monotonic()
        result = _run(*args, client=client, env=env, timeout=30)
        _one_line_error(result, "DATABASE_URL", *fragments)
        assert result.returncode == 1
        assert result.stdout == ""
        assert time.monotonic() - started < 15


def test_a_database_without_the_schema_says_to_run_db_upgrade(client: Client) -> None:
    name = f"empty_{uuid.uuid4().hex[:8]}"
    admin = libpq_url(_with_url(client, database="postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        env = {"DATABASE_URL": _with_url(client, database=name)}
        # A one-shot command, and the long-running processes too: the worker,
        # and the web process and the scheduler, which ride out an outage but
        # not a schema that is not there (they once ran on, answering 500 or
        # logging a traceback a second).
        commands = [
            ("sessions", "list"),
            ("worker", "--agents", "tests.agents"),
            ("web", "--port", str(free_port())),
            ("scheduler",),
        ]
        for result in _run_all(commands, client, env):
            _one_line_error(result, "run `resumable db upgrade`")
            assert result.returncode == 1
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_a_schema_behind_or_ahead_of_the_code_is_one_line_and_nothing_is_written(
    client: Client,
) -> None:
    """Only `sessions` was looked for: a database at an older revision was
    written to by `enqueue`, and a worker logged a traceback per message; one
    a newer release migrated made `db upgrade` report a bug."""
    from resumable.models import migrate

    name = f"old_{uuid.uuid4().hex[:8]}"
    admin = libpq_url(_with_url(client, database="postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = _with_url(client, database=name)
    env = {"DATABASE_URL": url}
    head, _ = migrate.known_revisions()
    try:
        migrate.upgrade(url, "0010")
        commands = [
            ("enqueue", "five", "--agents", "tests.agents"),
            ("sessions", "list"),
            ("worker", "--agents", "tests.agents"),
            ("web", "--port", str(free_port())),
            ("scheduler",),
        ]
        for result in _run_all(commands, client, env):
            _one_line_error(result, "at revision 0010", f"needs {head}", "resumable db upgrade")
            assert result.returncode == 1
        with psycopg.connect(libpq_url(url)) as conn:
            assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
            conn.execute("UPDATE alembic_version SET version_num = '0999'")
        commands = [("db", "upgrade"), ("sessions", "list"), ("worker", "--agents", "tests.agents")]
        for result in _run_all(commands, client, env):
            _one_line_error(result, "'0999'", "a newer release migrated it")
            assert result.returncode == 1
        assert migrate.current_revision(url) == "0999"  # left as it was
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def fresh_home() -> Iterator[Path]:
    """A home no process has used (short, for unix socket paths); its servers
    are stopped and it is removed afterwards."""
    home = Path(tempfile.mkdtemp(dir="/tmp", prefix="rtc-")) / "home"
    try:
        yield home
    finally:
        if home.exists():
            EmbeddedServices(home).stop()
        shutil.rmtree(home.parent, ignore_errors=True)


def test_a_fresh_embedded_home_is_migrated_on_first_use(fresh_home: Path) -> None:
    result = _run("sessions", "list", "--json", env={"RESUMABLE_HOME": str(fresh_home)})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"items": [], "next_cursor": None}
    assert EmbeddedServices(fresh_home).running_pids() == [], "the last user stops the servers"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_command_stopped_while_it_starts_the_servers_stops_them(
    fresh_home: Path, sig: signal.Signals
) -> None:
    """SIGTERM killed a one-shot command with no clean-up, and Ctrl-C while
    the servers were starting left them running with no user: only SIGKILL
    may leave them (for the next process to reap)."""
    services = EmbeddedServices(fresh_home)
    env = {**os.environ, "RESUMABLE_HOME": str(fresh_home)}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    command = subprocess.Popen(
        [sys.executable, "-m", "resumable.cli", "sessions", "list"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # The database server is up (its pid file written): the command is
        # inside the start of the servers, or just past it.
        wait_until(lambda: services.running_pids() or command.poll() is not None, timeout=60)
        command.send_signal(sig)
        _, stderr = command.communicate(timeout=60)
    finally:
        if command.poll() is None:
            command.kill()
    assert command.returncode != 0, "the signal came after the command had finished"
    assert b"Traceback" not in stderr, stderr.decode(errors="replace")
    wait_until(lambda: services.running_pids() == [], timeout=30, what="the servers stopped")
    assert not services.users_dir.exists() or not any(services.users_dir.iterdir())


@pytest.mark.parametrize("where", ["under-a-file", "read-only"])
def test_an_unusable_home_is_one_line_naming_it(tmp_path: Path, where: str) -> None:
    if where == "under-a-file":
        (tmp_path / "file").write_text("")
        home, why = tmp_path / "file" / "home", "Not a directory"
    else:
        home, why = Path("/sys/resumable-home"), "not permitted"  # read-only, even for root
    result = _run("sessions", "list", env={"RESUMABLE_HOME": str(home)})
    _one_line_error(result, f"RESUMABLE_HOME {home}", why)
    if where == "under-a-file":  # (/sys/resumable-home does not exist: nothing to stop)
        stopped = _run("services", "stop", env={"RESUMABLE_HOME": str(home)})
        _one_line_error(stopped, f"RESUMABLE_HOME {home}", why)


# -- bad arguments ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ('{"a": "\\u0000"}', "$.a contains NUL"),
        ('{"\\u0000": 1}', "a key in $ contains NUL"),
        ('["ok", "\\ud800"]', "$[1] contains a lone surrogate"),
        ("[" * 50_000, "nested too deeply"),
        ("[" * 300 + "]" * 300, "nested deeper than 100 levels"),
        ("[1e400]", "$[0] (non-finite float inf)"),
        ("NaN", "non-finite float nan"),
        ("1" * 5000, "--input:"),
        ("{nope", "--input is not valid JSON"),
    ],
)
def test_input_postgresql_cannot_store_is_refused_up_front(
    client: Client, value: str, fragment: str
) -> None:
    result = _run("enqueue", "five", "--input", value, client=client)
    _one_line_error(result, fragment)
    assert result.returncode == 2
    assert client.count_by_status() == {}


def test_bytes_that_are_not_utf8_in_input_are_refused(client: Client) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": client.settings.database_url or "",
        "REDIS_URL": client.settings.redis_url or "",
        **broker_env(client.settings),
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable.encode(), b"-m", b"resumable.cli", b"enqueue", b"five", b"--input",
         b'{"a": "\xff"}'],
        capture_output=True,
        env=env,
        cwd=ROOT,
        check=False,
        timeout=60,
    )  # fmt: skip
    result = subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode(errors="replace")
    )
    _one_line_error(result, "$.a contains a lone surrogate")
    assert client.count_by_status() == {}


@pytest.mark.parametrize(
    ("args", "fragment", "code"),
    [
        (["history", "doc", "--before", "9" * 25], "'--before'", 2),
        (["history", "doc", "--limit", "0"], "'--limit'", 2),
        (["show", "x" * 300], "at most 200 characters", 2),
        (["show", "tab\there"], "printable text", 2),
    ],
)
def test_shared_commands_refuse_bad_arguments_in_one_line(
    client: Client, args: list[str], fragment: str, code: int
) -> None:
    result = _run("shared", *args, client=client)
    _one_line_error(result, fragment)
    assert result.returncode == code


def test_unknown_status_names_the_valid_ones(client: Client) -> None:
    result = _run("sessions", "list", "--status", "bogus", client=client)
    _one_line_error(result, "'bogus' is not one of", "'pending'", "'cancelled'")
    assert result.returncode == 2


def test_enqueue_refuses_an_unknown_agent_and_defaults_input_to_an_empty_object(
    client: Client, start_worker: Callable[..., ManagedProcess]
) -> None:
    start_worker()  # announces the agents of tests.agents
    unknown = _run("enqueue", "no_such_agent", client=client)
    _one_line_error(unknown, "unknown agent 'no_such_agent'", "[unknown_agent]")
    assert client.count_by_status() == {}

    made = _run("enqueue", "five", client=client)
    assert made.returncode == 0, made.stderr
    session_id = uuid.UUID(made.stdout.strip())
    assert client.get(session_id).input == {}
    wait_until(lambda: client.get(session_id).status == "completed", what="the session")


# -- settings, checked when a process starts ---------------------------------------------


@pytest.mark.parametrize(
    ("args", "env", "fragments"),
    [
        (["web", "--port", "80000"], {}, ["'--port'", "80000", "65535"]),
        (["web"], {"RESUMABLE_WEB_PORT": "80000"}, ["RESUMABLE_WEB_PORT", "65535"]),
        (["web"], {"RESUMABLE_WEBHOOK_SECRET": "whsec_abc"}, ["RESUMABLE_WEBHOOK_SECRET"]),
        (
            ["scheduler"],
            {"RESUMABLE_ALERT_WEBHOOK_SECRET": "whsec_" + "QUJD"},
            ["RESUMABLE_ALERT_WEBHOOK_SECRET", "24"],
        ),
        (
            ["worker", "--agents", "tests.agents"],
            {"RESUMABLE_WORKER_THREADS": "0"},
            ["RESUMABLE_WORKER_THREADS"],
        ),
        (["worker", "--agents", "tests.agents", "--threads", "0"], {}, ["'--threads'"]),
        (
            ["scheduler"],
            {"RESUMABLE_SCHEDULER_INTERVAL_SECONDS": "inf"},
            ["RESUMABLE_SCHEDULER_INTERVAL_SECONDS"],
        ),
        (["scheduler"], {"RESUMABLE_LEASE_SECONDS": "nan"}, ["RESUMABLE_LEASE_SECONDS"]),
        (["web"], {"RESUMABLE_PUBLIC_URL": "example.com"}, ["RESUMABLE_PUBLIC_URL", "http"]),
        (["worker"], {"DATABASE_URL": "mysql://x@y/z"}, ["DATABASE_URL", "postgresql"]),
        (["--log-level", "chatty", "worker"], {}, ["'--log-level'"]),
    ],
)
def test_a_bad_setting_stops_a_process_at_start_naming_it(
    client: Client, args: list[str], env: dict[str, str], fragments: list[str]
) -> None:
    result = _run(*args, client=client, env=env, timeout=30)
    line = _one_line_error(result, *fragments)
    assert "whsec_abc" not in line, "a secret's value is never printed"


# -- the working directory is importable, as under `resumable dev` --------------------------


def test_worker_imports_agents_from_the_working_directory(client: Client, tmp_path: Path) -> None:
    (tmp_path / "mymodule.py").write_text(
        textwrap.dedent(
            """
            from resumable import Agent, Complete

            mine = Agent("mine")

            @mine.step
            def only(ctx):
                return Complete({"hello": ctx.input.get("name", "world")})
            """
        )
    )
    env = {
        **os.environ,
        "DATABASE_URL": client.settings.database_url or "",
        "REDIS_URL": client.settings.redis_url or "",
        **broker_env(client.settings),
        "RESUMABLE_WORKER_THREADS": "2",
    }
    env.pop("PYTHONPATH", None)
    log_path = tmp_path / "worker.log"
    with open(log_path, "w") as log:
        worker = subprocess.Popen(
            [str(CONSOLE_SCRIPT), "worker", "--agents", "mymodule"],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(
                lambda: worker.poll() is not None or "worker started" in log_path.read_text(),
                what="the worker to start",
            )
            assert worker.poll() is None, log_path.read_text()
            session_id = client.start("mine", {"name": "cwd"})
            wait_until(lambda: client.get(session_id).status == "completed", what="the session")
            assert client.get(session_id).result == {"hello": "cwd"}
        finally:
            worker.terminate()
            worker.wait(timeout=30)


def _run_bytes(client: Client, *args: bytes) -> subprocess.CompletedProcess[str]:
    """A command whose argv holds bytes that are not UTF-8 (Python sees lone
    surrogates), on a fresh interpreter, which decodes them; an argv of UTF-8
    is forked as `_run` does."""
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "HOME": "/tmp",
        "DATABASE_URL": client.settings.database_url or "",
        "REDIS_URL": client.settings.redis_url or "",
        **broker_env(client.settings),
    }
    try:
        texts = [arg.decode() for arg in args]
    except UnicodeDecodeError:
        pass
    else:
        return cli_zygote.run(texts, env, cwd=ROOT, timeout=60)
    done = subprocess.run(
        [sys.executable.encode(), b"-m", b"resumable.cli", *args],
        capture_output=True, env=env, cwd=ROOT, check=False, timeout=60,
    )  # fmt: skip
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode(errors="replace")
    )


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        ((b"sessions", b"cancel", b"{sid}", b"--reason", b"r", b"--by", b"a\xff"), 2, "--by"),
        # Once kept as the actor: "   ", or 5,000 characters no audit view shows.
        ((b"sessions", b"cancel", b"{sid}", b"--reason", b"r", b"--by", b"   "), 2, "not be blank"),
        ((b"sessions", b"cancel", b"{sid}", b"--reason", b"r", b"--by", b"x" * 201), 2, "200"),
        ((b"sessions", b"list", b"--agent", b"a\xff"), 2, "--agent"),
        ((b"dlq", b"list", b"--step", b"a\xff"), 2, "--step"),
        ((b"dlq", b"list", b"--error-type", b"a\x01\xfe"), 2, "--error-type"),
        ((b"sessions", b"list", b"--hung", b"--hung-after", b"nan"), 2, "--hung-after"),
        ((b"reconcile", b"--grace", b"nan"), 2, "--grace"),
        ((b"dlq", b"drain", b"--action", b"retry", b"--rate", b"nan"), 2, "--rate"),
        ((b"enqueue", b"five", b"--idempotency-key", b""), 2, "--idempotency-key"),
        ((b"enqueue", b"five", b"--idempotency-key", b"   "), 2, "--idempotency-key"),
        ((b"enqueue", b"five", b"--input", b'{"a": 1e-400}'), 2, "too small for a float"),
        ((b"enqueue", b"\xff"), 2, "'AGENT': contains a lone surrogate"),
        # 258 bytes of UTF-8 in 129 characters: keys are bounded in bytes, as over HTTP.
        ((b"enqueue", b"five", b"--idempotency-key", "é".encode() * 129), 2, "256 bytes"),
        ((b"worker", b"--agents", b""), 1, "cannot import agent module ''"),
        ((b"worker", b"--agents", b"../etc"), 1, "cannot import agent module '../etc'"),
    ],
)
def test_bad_arguments_are_one_line_and_change_nothing(
    client: Client, args: tuple[bytes, ...], code: int, fragment: str
) -> None:
    """Each of these was an "unexpected ... (a bug)" line, or accepted (an empty
    idempotency key then deduped as a real one)."""
    sid = client.start("five")
    argv = [arg.replace(b"{sid}", str(sid).encode()) for arg in args]
    result = _run_bytes(client, *argv)
    assert result.returncode == code, result.stderr
    line = _one_line_error(result, fragment)
    assert "a bug" not in line
    assert client.count_by_status() == {"pending": 1}


def test_web_on_a_port_in_use_or_a_host_that_does_not_resolve_is_one_line(
    client: Client,
) -> None:
    """uvicorn said so in several log lines and exited 3."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run("web", "--port", str(port), client=client)
        _one_line_error(result, f"cannot listen on 127.0.0.1:{port}", "Address already in use")
        assert result.returncode == 1
    result = _run("web", "--host", "no-such-host.invalid", client=client)
    _one_line_error(result, "cannot listen on no-such-host.invalid:")
    assert result.returncode == 1


@contextlib.contextmanager
def _taken_port_after_free_ones(free: int) -> Iterator[int]:
    """A port held by a listening socket whose `free` ports below are free
    when it is chosen: another test's ephemeral port just below made the
    worker's error name that port instead (seen once under -n 2)."""
    for _ in range(50):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            port = taken.getsockname()[1]
            if all(_bindable(port - k) for k in range(1, free + 1)):
                taken.listen()
                yield port
                return
    raise AssertionError("no port with free ones below it in 50 tries")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.parametrize("processes", ["1", "2"])
def test_worker_metrics_on_a_port_in_use_is_one_line_naming_the_setting(
    client: Client, processes: str
) -> None:
    """prometheus_client said only 'Address already in use'; with several
    processes, the second one's port was found taken only after the first
    had started."""
    agents = {"RESUMABLE_AGENTS": "tests.agents", "RESUMABLE_WORKER_PROCESSES": processes}
    with _taken_port_after_free_ones(int(processes) - 1) as port:
        first = port - int(processes) + 1  # the last process's port is the taken one
        env = {**agents, "RESUMABLE_WORKER_METRICS_PORT": str(first)}
        result = _run("worker", client=client, env=env)
        _one_line_error(
            result, f"127.0.0.1:{port}", "RESUMABLE_WORKER_METRICS_PORT", "Address already in use"
        )
        assert result.returncode == 1
    env = {**agents, "RESUMABLE_WORKER_METRICS_PORT": "65535"}
    if processes == "2":
        result = _run("worker", client=client, env=env)
        _one_line_error(result, "65535-65536", "at most 65534")
    env["RESUMABLE_WORKER_METRICS_PORT"] = "9"
    env["RESUMABLE_WORKER_METRICS_HOST"] = "no-such-host.invalid"
    result = _run("worker", client=client, env=env)
    _one_line_error(result, "no-such-host.invalid:", "RESUMABLE_WORKER_METRICS_HOST")


def test_bad_values_found_past_click_exit_2_like_click_s_own(client: Client) -> None:
    """README: exit status 2 for a bad argument. Values click cannot judge
    itself (an empty filter, a cursor, a missing reason) exited 1, and an empty
    cursor read as the first page, so a paging loop never ended."""
    cases = [
        (("sessions", "list", "--agent", ""), "agent must be 1 to 200 characters"),
        (("sessions", "list", "--cursor", "garbage"), "invalid cursor"),
        (("sessions", "list", "--cursor", ""), "empty cursor"),
        (("dlq", "list", "--cursor", "abc"), "invalid cursor"),
        (("dlq", "list", "--cursor", ""), "empty cursor"),
        (("dlq", "drain", "--action", "discard"), "needs a reason"),
        (("dlq", "drain", "--action", "discard", "--reason", "  "), "needs a reason"),
        (("dlq", "drain", "--action", "retry", "--by", "  "), "--by must not be blank"),
        (("enqueue", ""), "AGENT must be 1 to 200 characters"),
    ]
    results = _run_all([args for args, _ in cases], client)
    for (args, fragment), result in zip(cases, results, strict=True):
        _one_line_error(result, fragment)
        assert result.returncode == 2, (args, result.stderr)
        # The error alone: `dlq drain` drew an empty progress bar on stdout first.
        assert result.stdout == "", (args, result.stdout)
    assert client.count_by_status() == {}


def test_a_huge_value_is_refused_in_one_short_line(client: Client) -> None:
    """Click repeats the value it refuses: a 50,000-digit number made a
    50,000-character error line."""
    huge = "9" * 50_000
    commands = [
        ("dlq", "list", "--limit", huge),
        ("dlq", "list", "--since", huge),
        ("dlq", "drain", "--action", "retry", "--rate", huge),
        ("sessions", "list", "--hung", "--hung-after", "-" + huge),
        ("sessions", "state", "x", "--at", huge),
        ("reconcile", "--grace", "1e309"),
    ]
    for args, result in zip(commands, _run_all(commands, client), strict=True):
        line = _one_line_error(result, f"'{args[-2]}'")
        assert result.returncode == 2, (args[:-1], line)
        assert len(line) < 400, (args[:-1], len(line))
        assert result.stdout == ""


def test_the_next_page_line_is_never_wrapped_for_a_script(client: Client) -> None:
    """Not on a terminal, rich wrapped the `more: --cursor` line at 80
    columns and split the token a script cuts out of it."""
    for _ in range(3):
        client.start("five")
    first = _run("sessions", "list", "--limit", "2", client=client, env={"COLUMNS": "40"})
    assert first.returncode == 0, first.stderr
    [line] = [row for row in first.stdout.splitlines() if row.startswith("more: --cursor ")]
    token = line.removeprefix("more: --cursor ")
    second = _run("sessions", "list", "--limit", "2", "--cursor", token, client=client)
    assert second.returncode == 0, second.stderr
    assert "more: --cursor" not in second.stdout  # the third session, and the end
