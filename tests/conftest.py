"""Fixtures: real PostgreSQL and Redis (embedded unless DATABASE_URL/REDIS_URL
are set), a clean schema per test, and a deployment of real web, worker and
scheduler subprocesses (``deployment``; ``start_worker`` & co. start one part).

``RESUMABLE_TEST_BROKER=rabbitmq`` runs the same tests with RabbitMQ carrying
the messages (a node of each pytest worker's own, emptied before each test):
every client, process and command of a test then uses it. Tests of Redis
itself (its lists and keys, its restarts) are marked ``redis_broker`` and
left out of that run; CI runs the integration tests both ways."""

from __future__ import annotations

import base64
import compileall
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import pytest
import redis
from dramatiq.message import Message
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql
from sqlalchemy.engine import make_url
from starlette.applications import Starlette

from resumable._internal import procfs
from resumable._internal.database_urls import libpq_url, sqlalchemy_url
from resumable._internal.embedded import ServiceURLs, service_urls
from resumable.broker.choice import build_broker
from resumable.client import Client
from resumable.dev import processes
from resumable.dev.disposable_rabbitmq import DisposableRabbitMQ, rabbitmq_installed
from resumable.dev.processes import Deployment, Process
from resumable.models import migrate
from resumable.models.database import Database
from resumable.settings import Settings
from resumable.webhooks.app import create_app
from resumable.webhooks.metrics import Metrics
from tests import cli_zygote
from tests.tables import RUNTIME_TABLES

ROOT = Path(__file__).resolve().parent.parent
TEST_HOME = Path(os.environ.get("RESUMABLE_TEST_HOME", ROOT / ".resumable" / "test"))

# Short leases and heartbeats so crash recovery happens in seconds.
WORKER_ENV = {
    "RESUMABLE_LEASE_SECONDS": "2",
    "RESUMABLE_HEARTBEAT_TIMEOUT_MS": "3000",
    "RESUMABLE_MAINTENANCE_CHANCE": "200000",
    "RESUMABLE_WORKER_THREADS": "4",
    # One process per worker, as these tests were written (the default is one
    # per core; test_worker_processes.py runs several).
    "RESUMABLE_WORKER_PROCESSES": "1",
}


#: The broker the tests run on: ``redis`` (the default) or ``rabbitmq``.
TEST_BROKER = os.environ.get("RESUMABLE_TEST_BROKER", "redis")
if TEST_BROKER not in ("redis", "rabbitmq"):
    raise SystemExit(f"RESUMABLE_TEST_BROKER must be redis or rabbitmq, not {TEST_BROKER!r}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On RabbitMQ, tests of Redis itself are left out (deselected, not
    skipped: they ran in the Redis run)."""
    if TEST_BROKER != "rabbitmq":
        return
    kept = [item for item in items if item.get_closest_marker("redis_broker") is None]
    deselected = [item for item in items if item.get_closest_marker("redis_broker") is not None]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def pytest_configure(config: pytest.Config) -> None:
    """Compile the project's modules once, before any test starts a process.

    The suite starts a few hundred interpreters (workers, web processes,
    schedulers, CLI commands), each importing resumable. An editable install
    ships no bytecode, and where PYTHONDONTWRITEBYTECODE is set (as on CI
    machines) no process writes any, so each of them compiled every module
    from source again: 0.1-0.2 s of CPU per process. compileall writes the
    caches whatever that variable says; the files it writes are ignored by git.
    Only the controlling process does it (xdist's workers have `workerinput`).
    """
    if hasattr(config, "workerinput"):
        return
    for package in ("resumable", "tests", "benchmarks", "examples"):
        if (ROOT / package).is_dir():
            compileall.compile_dir(ROOT / package, quiet=2)


def wait_until(
    predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05, what: str = ""
) -> Any:
    """Poll `predicate` until it returns something truthy or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)


def exit_status(process: Process, timeout: float) -> int:
    """The status `process` exits with within `timeout`; a failure showing its
    log and where each of its threads (and its children's) is stuck if it is
    still running then."""
    try:
        return process.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"{process.name} still running after {timeout:g} s; its log:\n{process.tail(60)}"
            f"\n{python_stacks(process.pid)}"
        ) from None


def scraped_session_counts(db: Database) -> dict[tuple[str, str], float]:
    """What the web process's /metrics collector exports as
    ``resumable_sessions``, by (agent, status), read as Prometheus would."""
    text = generate_latest(Metrics(db).registry).decode()
    return {
        (sample.labels["agent"], sample.labels["status"]): sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "resumable_sessions"
        for sample in family.samples
    }


def python_stacks(pid: int) -> str:
    """py-spy's dump of `pid` and its children (a hang's evidence in CI)."""
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        return "(no py-spy in this environment: no stacks)"
    dumps = []
    for each in [pid, *procfs.children(pid)]:
        done = subprocess.run(
            [str(spy), "dump", "--pid", str(each)],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
        dumps.append(f"-- py-spy dump --pid {each}\n{done.stdout}{done.stderr}")
    return "\n".join(dumps)


@pytest.fixture(scope="session")
def urls() -> Iterator[ServiceURLs]:
    with service_urls(os.environ.get("DATABASE_URL"), os.environ.get("REDIS_URL"), TEST_HOME) as u:
        mine = for_this_worker(u)
        migrate.upgrade(mine.database_url)
        yield mine


def for_this_worker(urls: ServiceURLs) -> ServiceURLs:
    """Under pytest-xdist, a database and a Redis database of this worker's own
    on the same servers (tests truncate tables and flush Redis freely), so the
    workers never see each other's sessions or messages."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return urls
    index = int(worker.removeprefix("gw"))
    url = make_url(sqlalchemy_url(urls.database_url))
    name = f"{url.database}_{worker}"
    with psycopg.connect(libpq_url(urls.database_url), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    database_url = url.set(database=name).render_as_string(hide_password=False)
    return ServiceURLs(database_url, _redis_db(urls.redis_url, index))


def _redis_db(redis_url: str, index: int) -> str:
    """`redis_url` with the database number moved past the base one by 1 + `index`."""
    parts = urlsplit(redis_url)
    query = dict(parse_qsl(parts.query))
    if parts.scheme == "unix":  # unix:///path/to.sock?db=N (urlunsplit would drop the //)
        query["db"] = str(int(query.get("db", "0")) + 1 + index)
        return f"{redis_url.partition('?')[0]}?{urlencode(query)}"
    base = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{base + 1 + index}"))


@contextlib.contextmanager
def own_rabbitmq() -> Iterator[DisposableRabbitMQ]:
    """A RabbitMQ node of the caller's own, removed on the way out."""
    assert rabbitmq_installed(), "rabbitmq-server is not installed (the README's command does it)"
    # Not under pytest's tmp_path: run as root, the server drops to the
    # `rabbitmq` user, which cannot enter root's private directories.
    with DisposableRabbitMQ(Path(tempfile.mkdtemp(prefix="resumable-rabbitmq-"))) as node:
        yield node


@pytest.fixture(scope="session")
def test_rabbitmq() -> Iterator[DisposableRabbitMQ | None]:
    """This pytest worker's RabbitMQ node when the tests run on RabbitMQ."""
    if TEST_BROKER != "rabbitmq":
        yield None
        return
    with own_rabbitmq() as node:
        yield node


def delete_rabbitmq_queues(url: str, queue: str) -> None:
    """Every queue resumable declares for `queue` (its lanes, each with its
    delay and dead-letter queues) and the reconciler's marker, gone."""
    import pika

    from resumable.broker.lanes import lanes
    from resumable.broker.rabbitmq import MARKER_QUEUE

    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        for lane in lanes(queue):
            for suffix in ("", ".DQ", ".XQ"):
                channel.queue_delete(queue=f"{lane}{suffix}")
        channel.queue_delete(queue=MARKER_QUEUE)
    finally:
        connection.close()


@pytest.fixture
def settings(urls: ServiceURLs, test_rabbitmq: DisposableRabbitMQ | None) -> Settings:
    broker: dict[str, Any] = {}
    if test_rabbitmq is not None:
        delete_rabbitmq_queues(test_rabbitmq.url, Settings().queue_name)
        broker = {"broker_url": test_rabbitmq.url}
    return Settings(
        database_url=urls.database_url,
        redis_url=urls.redis_url,
        home=TEST_HOME,
        lease_seconds=2,
        heartbeat_timeout_ms=3000,
        reconcile_grace_seconds=5,
        **broker,
    )


def truncate_all(database: Database) -> None:
    """Empty every table the runtime writes (not the schema's version)."""
    with database.connection() as conn:
        conn.execute(f"TRUNCATE {', '.join(RUNTIME_TABLES)} CASCADE")


@pytest.fixture
def db(settings: Settings) -> Iterator[Database]:
    database = Database(settings.database_url or "", pool_size=4)
    truncate_all(database)
    yield database
    database.close()


def queued_messages(redis_client: redis.Redis, settings: Settings) -> list[Message[None]]:
    """Every message waiting on the session queue, decoded as a worker would."""
    key = f"resumable:{settings.queue_name}"
    ids = redis_client.lrange(key, 0, -1)
    stored = redis_client.hmget(f"{key}.msgs", ids) if ids else []
    return [Message.decode(data) for data in stored if isinstance(data, bytes)]


@pytest.fixture
def redis_client(settings: Settings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.redis_url or "")
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def client(settings: Settings, db: Database, redis_client: redis.Redis) -> Iterator[Client]:
    broker = build_broker(settings, settings.redis_url or "")
    yield Client(settings, db, broker)
    broker.close()


WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"resumable-test-secret-0123456789").decode()
API_TOKEN = "test-token-" + "x" * 20


# How long a process may take to say it is ready.
START_TIMEOUT = 30.0
# How long a process may take to stop on SIGTERM before it is killed.
STOP_GRACE_SECONDS = 15.0

free_port = processes.free_port
# A started `resumable ...` process (the one kind every tool spawns).
ManagedProcess = Process
WorkerProcess = Process


def broker_env(settings: Settings) -> dict[str, str]:
    """``RESUMABLE_BROKER_URL`` for a process a test starts by hand, when the
    tests run on RabbitMQ (empty on Redis)."""
    return {"RESUMABLE_BROKER_URL": settings.broker_url} if settings.broker_url else {}


def run_cli(
    settings: Settings,
    *args: str,
    timeout: float = 120,
    fresh_interpreter: bool = False,
    **extra_env: str,
) -> subprocess.CompletedProcess[str]:
    """``resumable ARGS`` run to its end against the test servers, its output
    captured; nothing else of this environment (no RESUMABLE_* leaks in)
    but `extra_env`. A process forked from one that has started Python and
    imported the command line already (tests/cli_zygote.py), or, with
    `fresh_interpreter`, ``python -m resumable.cli`` from the start."""
    env = {
        "DATABASE_URL": settings.database_url or "",
        "REDIS_URL": settings.redis_url or "",
        **broker_env(settings),
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "HOME": "/tmp",
        **extra_env,
    }
    if not fresh_interpreter:
        return cli_zygote.run(args, env, cwd=ROOT, timeout=timeout)
    return subprocess.run(
        [sys.executable, "-m", "resumable.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
        timeout=timeout,
    )


class LocalDeployment:
    """One test's deployment: real ``resumable web``, ``worker`` and ``scheduler``
    processes on the test servers, each waited for until it says it is ready,
    all stopped (SIGTERM, then SIGKILL) when the test ends."""

    def __init__(self, processes: Deployment, port: int) -> None:
        self.processes = processes
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    @property
    def children(self) -> list[Process]:
        return self.processes.children

    def start(self, command: list[str], ready_text: str, **env: str) -> Process:
        """``resumable COMMAND...``, once it has printed `ready_text`."""
        process = self.processes.spawn(command[0], command, ready_text, **_env(env))
        return process.wait_ready(START_TIMEOUT)

    def web(self, **env: str) -> Process:
        return self.processes.web(self.port, **_env(env)).wait_ready(START_TIMEOUT)

    def worker(self, *agent_modules: str, **env: str) -> Process:
        """A worker of `agent_modules` (by default the test agents in tests.agents)."""
        modules = agent_modules or ("tests.agents",)
        return self.processes.worker(*modules, **_env(env)).wait_ready(START_TIMEOUT)

    def scheduler(self, **env: str) -> Process:
        return self.processes.scheduler(**_env(env)).wait_ready(START_TIMEOUT)

    def kill(self, process: Process) -> None:
        """SIGKILL: no clean-up, no lease release, no message ack."""
        self.processes.kill(process)


def _env(env: dict[str, str]) -> dict[str, str]:
    """A process's own PYTHONPATH comes after the repository's, which it also needs."""
    if "PYTHONPATH" not in env:
        return env
    return {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), env["PYTHONPATH"]])}


@pytest.fixture
def web_port() -> int:
    return free_port()


@pytest.fixture
def process_env(web_port: int, settings: Settings) -> dict[str, str]:
    """Environment shared by every process of one test's deployment."""
    return {
        **broker_env(settings),
        "RESUMABLE_PUBLIC_URL": f"http://127.0.0.1:{web_port}",
        "RESUMABLE_API_TOKENS": API_TOKEN,
        "RESUMABLE_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "RESUMABLE_SCHEDULER_INTERVAL_SECONDS": "0.25",
        "RESUMABLE_RECONCILE_GRACE_SECONDS": "2",
    }


@pytest.fixture
def deployment(
    settings: Settings,
    tmp_path: Path,
    db: Database,
    redis_client: redis.Redis,
    process_env: dict[str, str],
    web_port: int,
) -> Iterator[LocalDeployment]:
    """Web, workers and schedulers for one test, on clean tables and an empty Redis.

    What the test leaves running is SIGKILLed when it ends (each process
    group, waited for until it is gone), not stopped with SIGTERM: a worker's
    clean stop waits out its threads' one-second poll of the work queue, a
    second per test, and nothing checks it here; the next test starts on empty
    tables and an empty Redis all the same. The clean stops are tested where
    they are the point (test_shutdown.py, test_worker_processes.py,
    test_readiness.py, test_dev.py, the SIGTERM tests of test_async_agents.py)."""
    env = {
        **WORKER_ENV,
        **process_env,
        "DATABASE_URL": settings.database_url or "",
        "REDIS_URL": settings.redis_url or "",
        "PYTHONPATH": str(ROOT),
    }
    with Deployment(env, tmp_path, cwd=ROOT, grace_seconds=STOP_GRACE_SECONDS) as children:
        yield LocalDeployment(children, web_port)
        for child in children.children:
            child.signal(signal.SIGKILL)
        # On the way out, Deployment waits for every group to be gone.


# The deployment's parts one at a time, as most tests were first written.


@pytest.fixture
def start_process(deployment: LocalDeployment) -> Callable[..., Process]:
    return deployment.start


@pytest.fixture
def start_worker(deployment: LocalDeployment) -> Callable[..., Process]:
    return deployment.worker


@pytest.fixture
def start_web(deployment: LocalDeployment) -> Callable[..., Process]:
    return deployment.web


@pytest.fixture
def start_scheduler(deployment: LocalDeployment) -> Callable[..., Process]:
    return deployment.scheduler


@pytest.fixture
def app(settings: Settings, db: Database, client: Client) -> Starlette:
    """The web app, in-process (drive it with Starlette's TestClient), with the
    test token and webhook secret, on clean tables."""
    configured = settings.model_copy(
        update={"api_tokens": [API_TOKEN], "webhook_secret": WEBHOOK_SECRET}
    )
    return create_app(configured, settings.database_url or "", settings.redis_url or "")


@pytest.fixture
def reconciler(settings: Settings, db: Database, client: Client) -> Iterator[None]:
    """Runs the reconcile function every 200 ms, as the scheduler process will."""
    from resumable.scheduler.reconcile import reconcile

    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.2):
            reconcile(settings, db, client.broker, grace_seconds=settings.reconcile_grace_seconds)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=5)
