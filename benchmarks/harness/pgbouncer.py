"""A PgBouncer of a test's or a benchmark's own in front of its database:
Debian's ``pgbouncer`` package by default (1.18 on Debian 12, which cannot
keep prepared statements in transaction mode), or another build named by
path, started with a config written for the run and stopped after it.

PgBouncer refuses to run as root; started by root, it is told to switch to
the user that can reach the server (the embedded PostgreSQL's socket
directory belongs to its own user), and its files are handed to that user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

from resumable._internal.database_urls import sqlalchemy_url
from resumable.dev.processes import free_port

BINARY_PLACES = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")


def binary() -> str | None:
    found = shutil.which("pgbouncer")
    if found:
        return found
    return next((place for place in BINARY_PLACES if Path(place).exists()), None)


@dataclass(frozen=True)
class Bouncer:
    url: str  # the test database through PgBouncer, as resumable takes it
    version: str
    log: Path
    pid: int  # its CPU time is the benchmark's to count


def _server(database_url: str) -> tuple[str, int, str, str]:
    """(host or socket directory, port, database, user) of the test database."""
    url = make_url(sqlalchemy_url(database_url))
    socket_dir = url.query.get("host")
    if isinstance(socket_dir, tuple):
        socket_dir = socket_dir[0]
    host = str(socket_dir or url.host or "127.0.0.1")
    return host, int(url.port or 5432), str(url.database), str(url.username or "postgres")


def _run_as(host: str) -> str | None:
    """The OS user PgBouncer runs as when started by root: the owner of the
    server's socket directory, or ``postgres``/``nobody`` for a TCP server."""
    if os.geteuid() != 0:
        return None
    if host.startswith("/"):
        owner = Path(host).stat().st_uid
        if owner != 0:
            return pwd.getpwuid(owner).pw_name
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name).pw_name
    raise RuntimeError("no user to run PgBouncer as (it refuses root)")


def keeps_prepared_statements(version: str) -> bool:
    """PgBouncer 1.21 and later can keep prepared statements in transaction
    mode (``max_prepared_statements``); 1.18 knows no such setting."""
    found = re.search(r"PgBouncer (\d+)\.(\d+)", version)
    return bool(found and (int(found[1]), int(found[2])) >= (1, 21))


#: ``max_prepared_statements`` a benchmark asks of a PgBouncer that can keep
#: them: above the statements a worker prepares.
KEPT_PER_CONNECTION = 200
PREPARED_SETTING = "RESUMABLE_DB_PREPARED_STATEMENTS"


def version_of(program: str) -> str:
    """The first line of ``pgbouncer --version``: ``PgBouncer 1.18.0``.
    SystemExit naming `program` when it is not a PgBouncer that runs."""
    try:
        line = subprocess.run(
            [program, "--version"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.split("\n", 1)[0]
    except (OSError, subprocess.SubprocessError) as exc:
        raise SystemExit(f"{program}: cannot run it as PgBouncer ({exc})") from None
    if not line.startswith("PgBouncer "):
        raise SystemExit(f"{program}: not a PgBouncer (its --version says {line!r})")
    return line


@contextlib.contextmanager
def prepared_setting(prepared: bool) -> Iterator[None]:
    """``RESUMABLE_DB_PREPARED_STATEMENTS`` for every process started
    meanwhile and this one's clients, as it was afterwards."""
    before = os.environ.get(PREPARED_SETTING)
    os.environ[PREPARED_SETTING] = "true" if prepared else "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PREPARED_SETTING, None)
        else:
            os.environ[PREPARED_SETTING] = before


def _prepared_statements(version: str, keep: int) -> list[str]:
    """Told to keep none, a PgBouncer that could behaves as 1.18 does, which is
    what the tests are about; a benchmark asks for `keep` per connection."""
    if keeps_prepared_statements(version):
        return [f"max_prepared_statements = {keep}"]
    return []


@contextlib.contextmanager
def running(
    database_url: str,
    *,
    pool_mode: str = "transaction",
    pool_size: int = 20,
    program: str | None = None,
    prepared_statements: int = 0,
) -> Iterator[Bouncer]:
    """PgBouncer in `pool_mode` for the database, until the block ends: the
    one installed, or `program`; keeping up to `prepared_statements` per
    server connection where it can (1.21+). Its files go to a directory of
    its own under the system's temporary directory (pytest's are root's
    alone, where the user it switches to could not read its config)."""
    program = program or binary()
    if program is None:
        raise RuntimeError("PgBouncer is not installed (Debian: apt-get install pgbouncer)")
    host, port, database, user = _server(database_url)
    listen = free_port()
    version = version_of(program)
    with tempfile.TemporaryDirectory(prefix="resumable-pgbouncer-") as directory:
        yield from _run(
            program,
            version,
            Path(directory),
            host,
            port,
            database,
            user,
            listen,
            pool_mode,
            pool_size,
            prepared_statements,
        )


def _run(
    program: str,
    version: str,
    workdir: Path,
    host: str,
    port: int,
    database: str,
    user: str,
    listen: int,
    pool_mode: str,
    pool_size: int,
    prepared_statements: int,
) -> Iterator[Bouncer]:
    log = workdir / "pgbouncer.log"
    (workdir / "users.txt").write_text(f'"{user}" ""\n')
    (workdir / "pgbouncer.ini").write_text(
        "\n".join(
            [
                "[databases]",
                f"{database} = host={host} port={port} dbname={database} user={user}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {listen}",
                "unix_socket_dir =",
                "auth_type = trust",
                f"auth_file = {workdir / 'users.txt'}",
                f"pool_mode = {pool_mode}",
                f"default_pool_size = {pool_size}",
                "max_client_conn = 500",
                # psycopg and libpq send these at connect; PgBouncer 1.18
                # refuses unknown startup parameters otherwise.
                "ignore_startup_parameters = extra_float_digits,options",
                *_prepared_statements(version, prepared_statements),
                f"logfile = {log}",
                f"pidfile = {workdir / 'pgbouncer.pid'}",
                "",
            ]
        )
    )
    command = [program, str(workdir / "pgbouncer.ini")]
    user_name = _run_as(host)
    if user_name is not None:
        entry = pwd.getpwnam(user_name)
        for path in [workdir, *workdir.iterdir()]:
            os.chown(path, entry.pw_uid, entry.pw_gid)
        command[1:1] = ["-u", user_name]
    output = (workdir / "pgbouncer.out").open("wb")  # what it says before its log opens
    process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    bounced = f"postgresql+psycopg://{user}@127.0.0.1:{listen}/{database}"
    try:
        deadline = time.monotonic() + 15
        while True:
            if process.poll() is not None:
                text = (workdir / "pgbouncer.out").read_text()
                text += log.read_text() if log.exists() else ""
                raise RuntimeError(f"PgBouncer exited {process.returncode}: {text[-2000:]}")
            try:
                with psycopg.connect(
                    f"postgresql://{user}@127.0.0.1:{listen}/{database}", connect_timeout=2
                ) as conn:
                    conn.execute("SELECT 1")
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield Bouncer(bounced, version, log, process.pid)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        output.close()
