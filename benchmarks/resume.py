"""How soon does a suspended session resume after its callback is POSTed?

Run from the repository root::

    .venv/bin/python benchmarks/resume.py [--sessions 500 --workers 2 --threads 8
                                           --concurrency 8 --home DIR]

A real deployment: one ``resumable web`` process (uvicorn; callbacks signed the
Standard Webhooks way, an API token set) and ``--workers`` ``resumable worker``
processes running the agent in ``benchmarks/agents/resume.py``, whose first step
suspends on a callback and whose second step reads the clock first thing.

1. ``--sessions`` sessions are started with ``Client.start`` and run until every
   one is ``suspended`` on its callback.
2. Floors, on the idle deployment: ``GET /healthz`` round trips on the same
   keep-alive HTTP client (the cheapest request the web process answers), back to
   back and each after the same idle gap as phase A's callbacks (waking idle
   processes costs more than keeping busy ones busy), and Redis ``LPUSH`` from
   this process to a ``BLPOP`` blocked in another process (the cheapest wake-up of
   an idle consumer), after that gap too.
3. Phase A, latency: half the callbacks are POSTed one at a time; after each, the
   session is polled in PostgreSQL until it has completed, and the next POST waits
   ``--gap-ms`` more, so every resume is measured on an otherwise idle system.
   Reported: POST -> 202 (callback accepted) and POST -> resumed step started, and
   where that time goes, hop by hop, from the database's own timestamps
   (``deliveries.received_at`` and the ``resumed`` / ``run_started`` audit events;
   meaningful only when PostgreSQL runs on this machine, on the same clock).
4. Phase B, throughput: the other half are POSTed by ``--concurrency`` senders as
   fast as they are accepted; reported are accepted callbacks/s, both latencies
   under that load, and the time until every session completed.

For each phase the CPU contention is reported too (Linux): the share of time some
task on the machine waited for a CPU (``/proc/pressure/cpu``), and how long the
processes on the resume path waited in run queues (``/proc/PID/task/*/schedstat``),
since on a small or shared machine that, not the code, sets the tail.

The targets: phase A resume p50 under LangGraph's in-process resume measured
in the same run (``--langgraph``; 3 ms without it) and p99 under 10 ms; phase B
resume p99 under 50 ms, at least 600 resumes/s and at most 3 ms of CPU per
resume. Beside the CPU, its floor: one HTTP request, three committed
transactions and one message, each measured on its own (``CpuFloor``).

Where phase B's time goes: PostgreSQL's execution time per resume by
statement, lock waits included (``pg_stat_statements``, as in ``bursts.py``:
the benchmark's own embedded server is restarted once to load it, and it
stays loaded, its small cost in every later run's figures); and with
``--profile DIR``, py-spy profiles of the web process and the workers
(``benchmarks/harness/profile.py``), each folded into its share of Python's
samples (threads holding the GIL) by package and by function.

With ``--pgbouncer PATH`` the web process, the workers and the benchmark's
client reach PostgreSQL through that PgBouncer in transaction mode (keeping
prepared statements if it is 1.21 or later, with
``RESUMABLE_DB_PREPARED_STATEMENTS=false`` if not), and its CPU is reported
as the deployment's; the floors and the benchmark's polling stay direct.
With ``--broker rabbitmq`` a RabbitMQ node of the run's own
(``resumable/dev/disposable_rabbitmq.py``) carries the messages instead of
Redis, its CPU counted as the deployment's (run it again without, alone on
the machine, to compare).

``DATABASE_URL``/``REDIS_URL`` are used when set; otherwise embedded servers run
under ``--home`` (default ``.resumable/bench-resume``). The tables are truncated
and Redis is flushed: never point this at a database you care about.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import http.client
import multiprocessing
import os
import queue
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg
import redis

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from benchmarks.agents.resume import AGENT_NAME
from benchmarks.harness import BenchDeployment, Services, pgbouncer
from benchmarks.harness.cpu import Contention, CpuMeter, GroupCpu, ServerPids
from benchmarks.harness.pg_counters import (
    Statement,
    StatementStats,
    enable_pg_stat_statements,
    read_statements,
    reset_statements,
)
from benchmarks.harness.profile import Profiles
from benchmarks.harness.report import (
    add_deployment,
    bench_parser,
    context_lines,
    latency_header,
    latency_line,
    parse,
    percentile,
)
from benchmarks.peers import langgraph_resume
from resumable._internal import procfs
from resumable.demo.webhook_sender import WebhookSender, new_secret
from resumable.dev.disposable_rabbitmq import DisposableRabbitMQ

T = TypeVar("T")

AGENT_MODULE = "benchmarks.agents.resume"
TRUNCATED = (
    "sessions",
    "checkpoints",
    "audit_events",
    "tool_execution_cache",
    "callbacks",
    "deliveries",
    "agents",
)
TARGET_P50_MS = 3.0  # phase A (issue 16)
TARGET_P99_MS = 10.0  # phase A
TARGET_B_P99_MS = 50.0  # phase B, --concurrency senders
TARGET_B_RATE = 600.0  # phase B resumes/s (issue 38)
TARGET_B_CPU_MS = 3.0  # phase B CPU per resume, the deployment's processes (issue 38)
FLOOR_KEY = "bench:resume:floor"

PG = psycopg.Connection[tuple[Any, ...]]


# -- the deployment ------------------------------------------------------------------------


def start_deployment(args: argparse.Namespace, deployment: BenchDeployment) -> WebhookSender:
    """The web process, then the workers (their callback URLs point at it); how to
    sign the callbacks they expect."""
    deployment.start_web()
    deployment.start_workers(args.workers, AGENT_MODULE)
    return WebhookSender(deployment.processes.env["RESUMABLE_WEBHOOK_SECRET"])


# -- sessions ------------------------------------------------------------------------------


def callback_urls(poller: PG) -> list[tuple[str, str]]:
    rows = poller.execute(
        "SELECT id::text, state ->> 'callback_url' FROM sessions ORDER BY created_at, id"
    ).fetchall()
    return [(str(session_id), str(url)) for session_id, url in rows]


# -- floors --------------------------------------------------------------------------------


class KeepAlive:
    """One keep-alive HTTP/1.1 connection, as light as the standard library
    makes it: the senders stand in for external systems, which run on other
    machines, so on this one they should take as little CPU from the
    deployment as they can (httpx with 8 sender threads took about 4 ms of
    CPU per callback, more than the web process)."""

    def __init__(self, base_url: str, timeout: float) -> None:
        parts = urlsplit(base_url)
        assert parts.hostname is not None and parts.port is not None
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        for attempt in (1, 2):
            try:
                self.conn.request(method, path, body, headers or {})
                response = self.conn.getresponse()
                return response.status, response.read()
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                # uvicorn closes a connection idle for 5 s; a callback sent
                # again is deduplicated by its webhook-id anyway.
                self.conn.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()


@dataclass(frozen=True)
class Callback:
    """A session's callback, signed before its phase starts (signing is the
    sender's work, not the deployment's)."""

    session_id: str
    path: str
    body: bytes
    headers: dict[str, str]


def sign_callbacks(sender: WebhookSender, targets: list[tuple[str, str]]) -> list[Callback]:
    callbacks = []
    for session_id, url in targets:
        signed = sender.sign({"approved": True, "session": session_id})
        headers = {**signed.headers, "content-length": str(len(signed.body.encode()))}
        callbacks.append(Callback(session_id, urlsplit(url).path, signed.body.encode(), headers))
    return callbacks


def http_floor(http: KeepAlive, samples: int, gap: float = 0.0) -> list[float]:
    """GET /healthz round trips, seconds, back to back or each after `gap` seconds idle."""
    latencies: list[float] = []
    for index in range(samples + 20):  # the first 20 warm up
        if gap:
            time.sleep(gap)
        started = time.perf_counter()
        status, _ = http.request("GET", "/healthz")
        elapsed = time.perf_counter() - started
        if status != 200:
            raise RuntimeError(f"/healthz answered {status}")
        if index >= 20:
            latencies.append(elapsed)
    return latencies


def blpop_child(redis_url: str, key: str, count: int, pipe: Connection) -> None:
    """In another process: block in BLPOP; on each pop send how long ago the pushed
    wall-clock time was."""
    client = redis.Redis.from_url(redis_url)
    try:
        client.ping()
        pipe.send(0.0)  # connected
        for _ in range(count):
            item = client.blpop([key], timeout=30)
            woke = time.time()
            if item is None:
                pipe.send(-1.0)
                return
            pipe.send(woke - float(item[1]))
    finally:
        client.close()
        pipe.close()


def redis_floor(redis_url: str, samples: int, gap: float) -> list[float]:
    """LPUSH here -> BLPOP returns in another process, seconds."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    total = samples + 20  # the first 20 warm up
    child = context.Process(target=blpop_child, args=(redis_url, FLOOR_KEY, total, theirs))
    client = redis.Redis.from_url(redis_url)
    latencies: list[float] = []
    try:
        child.start()
        theirs.close()
        if not ours.poll(60):
            raise RuntimeError("the BLPOP process did not start")
        ours.recv()
        for index in range(total):
            time.sleep(gap)  # the child is blocked in BLPOP again
            client.lpush(FLOOR_KEY, repr(time.time()))
            if not ours.poll(10):
                raise RuntimeError("the BLPOP process did not answer")
            latency = float(ours.recv())
            if latency < 0:
                raise RuntimeError("the BLPOP process timed out")
            if index >= 20:
                latencies.append(latency)
    finally:
        client.delete(FLOOR_KEY)
        client.close()
        harness.join_or_kill([child], timeout=10)
        ours.close()
    return latencies


@dataclass(frozen=True)
class CpuFloor:
    """CPU seconds that no resume through these parts can do without, each
    measured on its own against the idle deployment: one HTTP request
    (the web process's, for ``GET /healthz``), one committed one-row UPDATE
    (its PostgreSQL backend's, and the client's in psycopg), and one
    message through Redis (Valkey's, for an LPUSH and a BLPOP)."""

    web_request: float
    commit_server: float
    commit_client: float
    redis_hop: float

    #: The committed transactions every resume pays: the callback's (stored
    #: before the 202), the claim's (the fence, before the step runs) and the
    #: step's (its checkpoint).
    COMMITS = 3

    def total(self) -> float:
        commits = self.COMMITS * (self.commit_server + self.commit_client)
        return self.web_request + commits + self.redis_hop

    def describe(self) -> str:
        ms = 1e3
        return (
            f"web request {self.web_request * ms:.2f} + {self.COMMITS} commits x (PostgreSQL"
            f" {self.commit_server * ms:.2f} + client {self.commit_client * ms:.2f})"
            f" + Redis {self.redis_hop * ms:.2f} = {self.total() * ms:.2f} ms"
        )


def cpu_per(
    pid: int | None, samples: int, measure: Callable[[], T], *, less_idle: bool = False
) -> tuple[T, float]:
    """What `measure` returned, and the CPU seconds process `pid` spent per
    sample while it ran (NaN when it is not a process of this machine). With
    `less_idle`, less what it spends idle for as long afterwards (Valkey
    serves the idle workers' polls meanwhile)."""
    before, started = procfs.cpu_seconds(pid) if pid else None, time.monotonic()
    result = measure()
    after, took = procfs.cpu_seconds(pid) if pid else None, time.monotonic() - started
    if pid is None or before is None or after is None:
        return result, float("nan")
    busy = after - before
    if less_idle:
        time.sleep(took)
        idle = (procfs.cpu_seconds(pid) or after) - after
        busy = max(0.0, busy - idle)
    return result, busy / samples


def commit_floor(
    pg_url: str, samples: int, gap: float
) -> tuple[list[float], list[float], tuple[float, float]]:
    """PostgreSQL round trips from this process, seconds, each after `gap` idle:
    ``SELECT 1`` (no WAL), and a one-row UPDATE committed on its own (one WAL
    flush, as each of the resume path's two transactions pays: the callback's
    before its 202, the worker's claim before the step runs); and the CPU
    seconds of one such commit, its backend's and this thread's."""
    table = "bench_commit_floor"
    selects: list[float] = []
    commits: list[float] = []
    cpu = (float("nan"), float("nan"))
    with harness.connect(pg_url) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (id int PRIMARY KEY, n bigint)")
        conn.execute(f"INSERT INTO {table} VALUES (1, 0) ON CONFLICT DO NOTHING")
        backend = conn.info.backend_pid
        try:
            for query, into in (("SELECT 1", selects), (f"UPDATE {table} SET n = n + 1", commits)):
                server_before, client_before = procfs.cpu_seconds(backend), time.thread_time()
                for index in range(samples + 20):  # the first 20 warm up
                    time.sleep(gap)
                    started = time.perf_counter()
                    conn.execute(query)
                    if index >= 20:
                        into.append(time.perf_counter() - started)
                server_after, client_after = procfs.cpu_seconds(backend), time.thread_time()
                if into is commits and server_before is not None and server_after is not None:
                    runs = samples + 20
                    cpu = (
                        (server_after - server_before) / runs,
                        (client_after - client_before) / runs,
                    )
        finally:
            conn.execute(f"DROP TABLE {table}")
    return selects, commits, cpu


# -- CPU contention ------------------------------------------------------------------------

RESUME_PATH = "web, workers, PostgreSQL, Valkey and this process"


def resume_path_pids(deployment: BenchDeployment, servers: ServerPids) -> list[int]:
    """This process, the web process, the workers, and the local servers' processes."""
    return [os.getpid(), *deployment.pids, *servers.all()]


def path_cpu(
    meter: CpuMeter, deployment: BenchDeployment, poller: PG, extra: dict[str, int]
) -> GroupCpu:
    """CPU so far of each process on the resume path (the poller's backend is
    this benchmark's, not PostgreSQL's work for the deployment), with the
    servers of `extra` (a PgBouncer in between, a RabbitMQ node) by name."""
    web = [deployment.web.pid] if deployment.web is not None else []
    groups = {"web": web, "workers": [w.pid for w in deployment.workers]}
    groups.update({name: [pid] for name, pid in extra.items()})
    return GroupCpu.sample(meter, groups, own_backends=[poller.info.backend_pid])


# -- the phases ----------------------------------------------------------------------------


@dataclass
class Sample:
    session_id: str
    sent_at: float  # wall clock just before the POST
    accepted: float  # seconds from the POST until its 202 arrived
    resumed_at: float | None = None  # wall clock at the start of the resumed step

    @property
    def resume(self) -> float:
        assert self.resumed_at is not None
        return self.resumed_at - self.sent_at


def post_callback(http: KeepAlive, callback: Callback) -> Sample:
    sent_at = time.time()
    started = time.perf_counter()
    status, body = http.request("POST", callback.path, callback.body, callback.headers)
    accepted = time.perf_counter() - started
    if status != 202:
        raise RuntimeError(f"callback for {callback.session_id}: {status} {body[:300]!r}")
    return Sample(callback.session_id, sent_at, accepted)


def wait_resumed(
    poller: PG, deployment: BenchDeployment, session_id: str, timeout: float, interval: float
) -> float:
    """Poll until the session completed; the time its resumed step started."""
    deadline = time.monotonic() + timeout
    while True:
        row = poller.execute(
            "SELECT status, (result ->> 'resumed_at')::float8 FROM sessions WHERE id = %s",
            [session_id],
            prepare=True,
        ).fetchone()
        status, resumed_at = row or (None, None)
        if status == "completed" and resumed_at is not None:
            return float(resumed_at)
        if status in ("failed", "cancelled", None):
            raise RuntimeError(f"session {session_id} is {status}; see the worker logs")
        if time.monotonic() > deadline:
            raise RuntimeError(f"session {session_id} not resumed after {timeout} s")
        deployment.check_alive()
        time.sleep(interval)


def phase_a(
    args: argparse.Namespace,
    deployment: BenchDeployment,
    sender: WebhookSender,
    http: KeepAlive,
    poller: PG,
    targets: list[tuple[str, str]],
) -> list[Sample]:
    samples: list[Sample] = []
    http.request("GET", "/healthz")  # the connection may have idled out during the floors
    for callback in sign_callbacks(sender, targets):
        time.sleep(args.gap_ms / 1000)
        sample = post_callback(http, callback)
        sample.resumed_at = wait_resumed(
            poller, deployment, callback.session_id, args.timeout, args.poll_ms / 1000
        )
        samples.append(sample)
    return samples


@dataclass
class Throughput:
    samples: list[Sample]
    first_sent: float  # wall clock
    last_accepted: float  # wall clock
    all_completed_seen: float  # wall clock, by polling
    last_finished: float  # wall clock, max(finished_at)

    @property
    def accepted_rate(self) -> float:
        return len(self.samples) / (self.last_accepted - self.first_sent)


def phase_b(
    args: argparse.Namespace,
    deployment: BenchDeployment,
    sender: WebhookSender,
    poller: PG,
    targets: list[tuple[str, str]],
) -> Throughput:
    work: queue.Queue[Callback] = queue.Queue()
    for callback in sign_callbacks(sender, targets):
        work.put(callback)
    samples: list[Sample] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    ready = threading.Barrier(args.concurrency + 1)

    def post_some() -> None:
        try:
            with contextlib.closing(KeepAlive(deployment.url, args.timeout)) as http:
                http.request("GET", "/healthz")  # connected and warm before the start
                ready.wait(timeout=60)
                while True:
                    try:
                        callback = work.get_nowait()
                    except queue.Empty:
                        return
                    sample = post_callback(http, callback)
                    with lock:
                        samples.append(sample)
        except BaseException as exc:
            errors.append(exc)
            ready.abort()

    threads = [threading.Thread(target=post_some) for _ in range(args.concurrency)]
    for thread in threads:
        thread.start()
    with contextlib.suppress(threading.BrokenBarrierError):  # a sender failed: reported below
        ready.wait(timeout=60)
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{len(errors)} senders failed; first: {errors[0]!r}")
    ids = [session_id for session_id, _ in targets]
    harness.wait_sessions(
        poller,
        lambda counts: counts["completed"] >= len(ids),
        what=f"{len(ids)} sessions to complete",
        timeout=args.timeout,
        ids=ids,
        alive=deployment.check_alive,
        interval=0.005,
    )
    all_completed_seen = time.time()
    resumed: dict[str, float] = {
        str(session_id): float(resumed_at)
        for session_id, resumed_at in poller.execute(
            "SELECT id::text, (result ->> 'resumed_at')::float8 FROM sessions"
            " WHERE id = ANY(%s::uuid[])",
            [ids],
        ).fetchall()
    }
    for sample in samples:
        sample.resumed_at = resumed[sample.session_id]
    last_finished = poller.execute(
        "SELECT extract(epoch FROM max(finished_at))::float8 FROM sessions"
        " WHERE id = ANY(%s::uuid[])",
        [ids],
    ).fetchone()
    assert last_finished is not None
    return Throughput(
        samples=samples,
        first_sent=min(s.sent_at for s in samples),
        last_accepted=max(s.sent_at + s.accepted for s in samples),
        all_completed_seen=all_completed_seen,
        last_finished=float(last_finished[0]),
    )


# -- where the time goes -------------------------------------------------------------------

HOPS_SQL = """
SELECT s.id::text,
       extract(epoch FROM d.received_at)::float8,
       (s.result ->> 'enqueued_at')::float8,
       (s.result ->> 'fetched_at')::float8,
       extract(epoch FROM (SELECT max(e.created_at) FROM audit_events e
                           WHERE e.session_id = s.id AND e.event_type = 'run_started'))::float8,
       extract(epoch FROM s.finished_at)::float8
FROM sessions s JOIN deliveries d ON d.session_id = s.id AND d.kind = 'callback'
WHERE s.id = ANY(%s::uuid[])
"""

# The points in time, in order: the sender's clock before the POST; the callback
# transaction's start (``now()``, the delivery's ``received_at``); the web
# process's clock when it sent the queue message (after the commit); the
# worker's clock when its consumer handed the message to a worker thread; the
# claim transaction's start (the ``run_started`` event); the resumed step's
# first statement. One machine, one clock.
HOP_NAMES = [
    (
        "POST sent -> callback transaction began",
        "HTTP, uvicorn, middleware, signature check, thread-pool hand-off, pool borrow",
    ),
    (
        "callback transaction -> queue message sent",
        "lock, dedupe lookup, insert delivery, wake UPDATE, COMMIT (one transaction)",
    ),
    (
        "queue message sent -> worker thread handed it",
        "Redis MULTI/EXEC, BLPOP wake-up, fetch, consumer thread",
    ),
    (
        "handed to worker thread -> claim began",
        "work queue hand-off, middleware, runner set-up, pool borrow",
    ),
    (
        "claim began -> resumed step started",
        "CLAIM_LEASE+COMMIT, step set-up",
    ),
]


@dataclass
class Hops:
    """Per-hop durations (seconds) of one phase's resumes."""

    hops: list[list[float]] = field(default_factory=lambda: [[] for _ in HOP_NAMES])
    sent_to_accepted: list[float] = field(default_factory=list)
    step_to_committed: list[float] = field(default_factory=list)


def hop_breakdown(poller: PG, samples: list[Sample]) -> Hops:
    by_id = {sample.session_id: sample for sample in samples}
    rows = poller.execute(HOPS_SQL, [list(by_id)]).fetchall()
    hops = Hops()
    for session_id, received, enqueued, fetched, claimed, finished in rows:
        sample = by_id[str(session_id)]
        assert sample.resumed_at is not None
        if enqueued is None or fetched is None:
            raise RuntimeError(f"session {session_id}: its result lacks the queue timings")
        points = [sample.sent_at, received, enqueued, fetched, claimed, sample.resumed_at]
        for index in range(len(HOP_NAMES)):
            hops.hops[index].append(points[index + 1] - points[index])
        hops.sent_to_accepted.append(sample.sent_at + sample.accepted - enqueued)
        hops.step_to_committed.append(finished - sample.resumed_at)
    return hops


# -- report --------------------------------------------------------------------------------


def print_hops(phase: str, hops: Hops) -> None:
    print(latency_header(f"{phase}, hop by hop (DB, step and sender clocks)"))
    for (name, what), values in zip(HOP_NAMES, hops.hops, strict=True):
        print(latency_line(name, values))
        print(f"    ({what})")
    print(latency_line("(beside) queue message sent -> 202 received", hops.sent_to_accepted))
    print(latency_line("(after) resumed step -> its commit", hops.step_to_committed))
    sums = [sum(parts) for parts in zip(*hops.hops, strict=True)]
    print(latency_line("sum of the hops (= resume)", sums))
    print()


@dataclass(frozen=True)
class Floors:
    """What the idle deployment's parts take on their own (seconds), and
    LangGraph's resume when ``--langgraph`` asked for it."""

    http: list[float]
    http_idle: list[float]
    redis: list[float]
    selects: list[float]
    commits: list[float]
    cpu: CpuFloor
    peers: list[langgraph_resume.PeerResume]


def measure_floors(
    args: argparse.Namespace,
    services: Services,
    deployment: BenchDeployment,
    http: KeepAlive,
    servers: ServerPids,
) -> Floors:
    gap = args.gap_ms / 1000
    web_pid = deployment.web.pid if deployment.web is not None else None
    runs = args.floor_samples + 20  # with the warm-up
    http_lat, web_cpu = cpu_per(web_pid, runs, lambda: http_floor(http, args.floor_samples))
    http_idle_lat = http_floor(http, args.floor_samples, gap)
    redis_lat, redis_cpu = cpu_per(
        servers.valkey,
        runs,
        lambda: redis_floor(services.redis_url, args.floor_samples, gap),
        less_idle=True,
    )
    selects, commits, (commit_server, commit_client) = commit_floor(
        services.pg_url, args.floor_samples, gap
    )
    peers = [
        langgraph_resume.measure(services.pg_url, args.floor_samples, gap, durability)
        for durability in (("sync", "async") if args.langgraph else ())
    ]
    cpu = CpuFloor(web_cpu, commit_server, commit_client, redis_cpu)
    return Floors(http_lat, http_idle_lat, redis_lat, selects, commits, cpu, peers)


def print_floors(args: argparse.Namespace, floors: Floors) -> None:
    idle50 = percentile(floors.http_idle, 0.5)
    redis50 = percentile(floors.redis, 0.5)
    print(latency_header(f"floors (idle deployment, {len(floors.http)} samples each)"))
    print(latency_line("HTTP GET /healthz, keep-alive, back to back", floors.http))
    apart = f"{args.gap_ms:g} ms apart"
    print(latency_line(f"HTTP GET /healthz, keep-alive, {apart}", floors.http_idle))
    print(latency_line(f"Redis LPUSH -> BLPOP elsewhere, {args.gap_ms:g} ms apart", floors.redis))
    print(latency_line(f"PostgreSQL SELECT 1, {args.gap_ms:g} ms apart", floors.selects))
    print(latency_line(f"PostgreSQL UPDATE + COMMIT, {args.gap_ms:g} ms apart", floors.commits))
    commit50 = percentile(floors.commits, 0.5)
    floor = idle50 + 2 * commit50 + redis50
    print(
        f"  a resume's floor (p50s): HTTP after idle + 2 commits (the callback's, the claim's)"
        f" + Redis wake = {idle50 * 1e3:.2f} + 2 x {commit50 * 1e3:.2f} + {redis50 * 1e3:.2f}"
        f" = {floor * 1e3:.2f} ms"
    )
    print(f"  a resume's CPU floor (all processes): {floors.cpu.describe()}")
    for peer in floors.peers:
        print(
            latency_line(
                f"LangGraph in-process resume, durability={peer.durability}", peer.latencies
            )
        )
        print(
            f"    CPU per resume: {(peer.client_cpu + peer.server_cpu) * 1e3:.2f} ms"
            f" (its process {peer.client_cpu * 1e3:.2f}, PostgreSQL {peer.server_cpu * 1e3:.2f})"
        )


def report(
    args: argparse.Namespace,
    services: Services,
    log_dir: Path,
    floors: Floors,
    latency: list[Sample],
    hops: tuple[Hops, Hops],
    load: Throughput,
    contention: tuple[str, str],
    cpu: tuple[str, str],
    cpu_b_ms: float,
) -> None:
    resume = [s.resume for s in latency]
    accepted = [s.accepted for s in latency]
    http50, http99 = percentile(floors.http, 0.5), percentile(floors.http, 0.99)
    idle50, idle99 = percentile(floors.http_idle, 0.5), percentile(floors.http_idle, 0.99)
    redis50, redis99 = percentile(floors.redis, 0.5), percentile(floors.redis, 0.99)
    resume50, resume99 = percentile(resume, 0.5), percentile(resume, 0.99)
    cpu_floor, peers = floors.cpu, floors.peers
    print()
    print(
        f"resumable resume benchmark: {args.sessions} sessions ({len(latency)} one at a time,"
        f" {len(load.samples)} with {args.concurrency} concurrent senders),"
        f" {args.workers} workers x {args.threads} threads, 1 web process"
    )
    for line in context_lines(f"{services.where}; logs in {log_dir}"):
        print(line)
    print()
    print_floors(args, floors)
    print()
    print(
        latency_header(
            f"phase A: {len(latency)} callbacks one at a time ({args.gap_ms:g} ms apart)"
        )
    )
    print(latency_line("callback accepted (POST -> 202)", accepted))
    print(latency_line("resume (POST -> resumed step started)", resume))
    for label, resumed, bases in (
        ("p50", resume50, (http50, idle50, redis50)),
        ("p99", resume99, (http99, idle99, redis99)),
    ):
        ratios = ", ".join(
            f"{resumed / floor:.1f}x {name} ({floor * 1e3:.2f})"
            for name, floor in zip(
                ("HTTP back to back", "HTTP after idle", "Redis wake"), bases, strict=True
            )
        )
        print(f"  resume {label} {resumed * 1e3:.2f} ms = {ratios}")
    print(f"  CPU contention: {contention[0]}")
    print(f"  CPU per resume (ms): {cpu[0]}")
    print(
        f"  the first callback (a cold web process and database connection) took"
        f" {latency[0].accepted * 1e3:.2f} ms to accept, {latency[0].resume * 1e3:.2f} ms to resume"
    )
    print()
    print_hops("phase A", hops[0])
    burst = load.last_accepted - load.first_sent
    print(latency_header(f"phase B: {len(load.samples)} callbacks, {args.concurrency} senders"))
    print(latency_line("callback accepted (POST -> 202)", [s.accepted for s in load.samples]))
    print(latency_line("resume (POST -> resumed step started)", [s.resume for s in load.samples]))
    print(
        f"  accepted: {len(load.samples)} in {burst:.3f} s = {load.accepted_rate:.1f} callbacks/s;"
        f" all completed {load.last_finished - load.first_sent:.3f} s after the first POST"
        f" (max finished_at; seen by polling after {load.all_completed_seen - load.first_sent:.3f}"
        f" s) = {len(load.samples) / (load.last_finished - load.first_sent):.1f} resumes/s"
    )
    print(f"  CPU contention: {contention[1]}")
    print(f"  CPU per resume (ms): {cpu[1]}")
    print()
    # Under load, which hop holds the tail: the web process queueing requests,
    # the queue (messages waiting for a worker thread) or the workers' claims.
    print_hops("phase B", hops[1])
    # Below LangGraph's in-process resume (durability "sync": each step's
    # checkpoint written before the next, as here) when it was measured.
    sync = [peer for peer in peers if peer.durability == "sync"]
    target50 = percentile(sync[0].latencies, 0.5) * 1e3 if sync else TARGET_P50_MS
    p50_ok = resume50 * 1e3 < target50
    p99_ok = resume99 * 1e3 < TARGET_P99_MS
    whose = " (LangGraph's, this run)" if sync else ""
    print(
        f"target (phase A resume): p50 < {target50:.2f} ms{whose}: {'PASS' if p50_ok else 'MISS'}"
        f" ({resume50 * 1e3:.2f} ms); p99 < {TARGET_P99_MS:g} ms:"
        f" {'PASS' if p99_ok else 'MISS'} ({resume99 * 1e3:.2f} ms)"
    )
    b99 = percentile([s.resume for s in load.samples], 0.99) * 1e3
    print(
        f"target (phase B resume, {args.concurrency} senders): p99 < {TARGET_B_P99_MS:g} ms:"
        f" {'PASS' if b99 < TARGET_B_P99_MS else 'MISS'} ({b99:.2f} ms)"
    )
    rate = len(load.samples) / (load.last_finished - load.first_sent)
    print(
        f"target (phase B): >= {TARGET_B_RATE:g} resumes/s: "
        f"{'PASS' if rate >= TARGET_B_RATE else 'MISS'} ({rate:.1f});"
        f" CPU per resume <= {TARGET_B_CPU_MS:g} ms (the deployment's processes):"
        f" {'PASS' if cpu_b_ms <= TARGET_B_CPU_MS else 'MISS'} ({cpu_b_ms:.2f} ms;"
        f" the floor {cpu_floor.total() * 1e3:.2f} ms, {cpu_b_ms / (cpu_floor.total() * 1e3):.1f}x)"
    )


# -- main ----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = bench_parser(__doc__, home="bench-resume", timeout=300)
    parser.add_argument("--sessions", type=int, default=500, help="sessions (half per phase)")
    add_deployment(parser, threads=8)
    parser.add_argument("--concurrency", type=int, default=8, help="phase B senders")
    parser.add_argument("--enqueue-threads", type=int, default=4, help="Client.start threads")
    parser.add_argument(
        "--floor-samples", type=int, default=500, help="samples of each floor measurement"
    )
    parser.add_argument(
        "--gap-ms", type=float, default=10.0, help="phase A: idle time before each POST"
    )
    parser.add_argument(
        "--poll-ms", type=float, default=2.0, help="phase A: database poll interval"
    )
    parser.add_argument(
        "--broker",
        choices=["redis", "rabbitmq"],
        default="redis",
        help="what carries the messages: Redis, or a RabbitMQ node of the run's own",
    )
    parser.add_argument(
        "--pgbouncer",
        metavar="PATH",
        help="run the deployment through this PgBouncer in transaction mode",
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        type=Path,
        help="record py-spy profiles of the web process and the workers during phase B "
        "into DIR, and print each one's Python samples by package and function "
        "(the sampler's own cost inflates that run's CPU figures)",
    )
    parser.add_argument(
        "--langgraph",
        action="store_true",
        help="measure LangGraph's in-process resume on the same PostgreSQL too, before"
        " phase A (benchmarks/peers/langgraph_resume.py; pip install -e '.[peers]')",
    )
    names = ("sessions", "workers", "threads", "concurrency", "enqueue_threads", "floor_samples")
    args = parse(parser, argv, names)
    if args.sessions < 2:
        parser.error("--sessions must be at least 2 (one per phase)")
    if args.langgraph and not langgraph_resume.available():
        parser.error("--langgraph needs LangGraph: pip install -e '.[peers]'")
    return args


def on_rabbitmq(args: argparse.Namespace, stack: contextlib.ExitStack) -> dict[str, int]:
    """With ``--broker rabbitmq``: a RabbitMQ node of the run's own carries
    the messages of every process the run starts, and its pid by name."""
    if args.broker != "rabbitmq":
        return {}
    node = stack.enter_context(DisposableRabbitMQ(args.home / "rabbitmq"))
    stack.enter_context(harness.broker_named(node.url))
    print(f"RabbitMQ carries the messages: node {node.node} at 127.0.0.1:{node.port}")
    return {"rabbitmq": node.pid} if node.pid else {}


def through_pgbouncer(
    args: argparse.Namespace, services: Services, stack: contextlib.ExitStack
) -> tuple[Services, int | None]:
    """With ``--pgbouncer``: the services as the deployment reaches them through
    a PgBouncer in transaction mode (prepared statements kept where it can,
    the setting off where it cannot, for every process the run starts), and
    its pid."""
    if args.pgbouncer is None:
        return services, None
    keeps = pgbouncer.keeps_prepared_statements(pgbouncer.version_of(args.pgbouncer))
    stack.enter_context(pgbouncer.prepared_setting(keeps))
    bouncer = stack.enter_context(
        pgbouncer.running(
            services.database_url,
            program=args.pgbouncer,
            pool_size=args.workers * (args.threads + 2) + 12,
            prepared_statements=pgbouncer.KEPT_PER_CONNECTION if keeps else 0,
        )
    )
    print(f"through {bouncer.version} in transaction mode, prepared statements {keeps}")
    return dataclasses.replace(services, database_url=bouncer.url), bouncer.pid


STATEMENT_NAMES = {  # a fragment of each of the step path's; the others show their start
    "CLAIM_LEASE": "old.lease_owner AS previous_owner",
    "COMMIT_STEP": "RETURNING id, step_seq, state",
}


def print_statements(stats: StatementStats, statements: list[Statement], resumes: int) -> None:
    """PostgreSQL's execution time per resume by statement (pg_stat_statements).
    Time, not CPU: a statement's waits for row locks are in it (the claim
    waits for the callback's commit, whose queue message goes out before it),
    and its planning and its commit's WAL flush are not."""
    if not stats.precise:
        print(f"\nphase B statements: not counted ({stats.method}: {stats.note})")
        return
    ranked = sorted(statements, key=lambda s: s.calls * s.mean_ms, reverse=True)
    total = sum(s.calls * s.mean_ms for s in statements) / resumes
    print(
        f"\nphase B statements (pg_stat_statements): {total:.3f} ms executing per resume"
        " (lock waits included, commits not)"
    )
    for found in ranked[:10]:
        per = found.calls / resumes
        name = found.name[:70]
        print(f"  {per * found.mean_ms:6.3f} ms  {per:5.2f} x {found.mean_ms:.3f} ms  {name}")


@contextlib.contextmanager
def profiled(args: argparse.Namespace, deployment: BenchDeployment) -> Iterator[Profiles | None]:
    """With ``--profile``: py-spy samples the web process and each worker."""
    if args.profile is None:
        yield None
        return
    pids = {"web": deployment.web.pid} if deployment.web is not None else {}
    pids.update({f"worker-{i}": w.pid for i, w in enumerate(deployment.workers)})
    with Profiles(args.profile, pids) as profiles:
        yield profiles


def run(args: argparse.Namespace, services: Services, log_dir: Path, stats: StatementStats) -> None:
    harness.reset_data(services.pg_url, services.redis_url, TRUNCATED)
    env = harness.worker_env(
        args.threads,
        RESUMABLE_API_TOKENS="bench-" + secrets.token_hex(16),
        RESUMABLE_WEBHOOK_SECRET=new_secret(),
    )
    servers = ServerPids.find(services.pg_url, services.redis_url)
    with contextlib.ExitStack() as stack:  # a PgBouncer outlives the processes using it
        services, bouncer = through_pgbouncer(args, services, stack)
        extra = on_rabbitmq(args, stack)
        if bouncer is not None:
            extra["pgbouncer"] = bouncer
        deployment = stack.enter_context(BenchDeployment(services, log_dir, env))
        sender = start_deployment(args, deployment)
        print(f"web on {deployment.url}, {args.workers} workers x {args.threads} threads")
        with (
            harness.connect(services.pg_url) as poller,
            contextlib.closing(KeepAlive(deployment.url, args.timeout)) as http,
            harness.bench_client(services.settings(), args.enqueue_threads) as client,
        ):
            started = time.monotonic()
            harness.start_sessions(client, AGENT_NAME, [None] * args.sessions, args.enqueue_threads)
            harness.wait_sessions(
                poller,
                lambda counts: counts["suspended"] >= args.sessions,
                what=f"{args.sessions} sessions to suspend",
                timeout=args.timeout,
                alive=deployment.check_alive,
            )
            print(f"{args.sessions} sessions suspended in {time.monotonic() - started:.2f} s")
            targets = callback_urls(poller)
            half = args.sessions // 2
            floors = measure_floors(args, services, deployment, http, servers)
            print(f"floors measured; phase A: {half} callbacks one at a time")
            pids = resume_path_pids(deployment, servers)
            meter = CpuMeter(servers)
            before, cpu_before = (
                Contention.sample(pids),
                path_cpu(meter, deployment, poller, extra),
            )
            latency = phase_a(args, deployment, sender, http, poller, targets[:half])
            after_a, cpu_a = Contention.sample(pids), path_cpu(meter, deployment, poller, extra)
            hops = hop_breakdown(poller, latency)
            print(f"phase B: {len(targets) - half} callbacks, {args.concurrency} senders")
            before_b, cpu_before_b = (
                Contention.sample(pids),
                path_cpu(meter, deployment, poller, extra),
            )
            reset_statements(services.pg_url, stats)
            with profiled(args, deployment) as profiles:
                load = phase_b(args, deployment, sender, poller, targets[half:])
            statements = read_statements(services.pg_url, stats, STATEMENT_NAMES)
            hops_b = hop_breakdown(poller, load.samples)
            after_b = Contention.sample(resume_path_pids(deployment, servers))
            cpu_b = path_cpu(meter, deployment, poller, extra)
            contention = (
                after_a.describe(before, len(latency), RESUME_PATH, "resume"),
                after_b.describe(before_b, len(load.samples), RESUME_PATH, "resume"),
            )
            cpu = (
                cpu_a.describe(cpu_before, len(latency)),
                cpu_b.describe(cpu_before_b, len(load.samples)),
            )
    report(
        args,
        services,
        log_dir,
        floors,
        latency,
        (hops, hops_b),
        load,
        contention,
        cpu,
        cpu_b.deployment_ms(cpu_before_b, len(load.samples)),
    )
    print_statements(stats, statements, len(load.samples))
    if profiles is not None:
        print("\nphase B, where each process's Python ran (py-spy --gil, self time by leaf frame):")
        print("\n".join(profiles.report()))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with harness.bench_services(args.home) as services:
        stats = enable_pg_stat_statements(
            services.pg_url, args.home, own_server=services.own_database
        )
        run(args, services, harness.log_dir_for(args.home), stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
