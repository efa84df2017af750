"""How soon does a suspended session resume after its callback is POSTed?

Run from the repository root::

    .venv/bin/python benchmarks/resume.py [--sessions 500 --workers 2 --threads 8
                                           --concurrency 8 --home DIR]

A real deployment: one ``resumable web`` process (uvicorn; callbacks signed the
Standard Webhooks way, an API token set) and ``--workers`` ``resumable worker``
processes running the agent in ``benchmarks/resume_agent.py``, whose first step
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

The target: phase A resume p50 under 10 ms and p99 under 50 ms.

``DATABASE_URL``/``REDIS_URL`` are used when set; otherwise embedded servers run
under ``--home`` (default ``.resumable/bench-resume``). The tables are truncated
and Redis is flushed: never point this at a database you care about.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import multiprocessing
import os
import queue
import secrets
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis
from standardwebhooks.webhooks import Webhook

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import (
    ROOT,
    ManagedProcess,
    Services,
    bench_services,
    connect,
    free_port,
    log_dir_for,
    percentile,
    reset_data,
    start_worker,
    stop_all,
    wait_for,
)
from benchmarks.resume_agent import AGENT_NAME
from resumable.client import Client
from resumable.models.database import Database
from resumable.queue.broker import build_broker
from resumable.settings import Settings

AGENT_MODULE = "benchmarks.resume_agent"
TRUNCATED = (
    "sessions",
    "checkpoints",
    "audit_events",
    "tool_execution_cache",
    "callbacks",
    "deliveries",
    "agents",
)
DEFAULT_POOL_SIZE = Settings.model_fields["db_pool_size"].default
TARGET_P50_MS = 10.0
TARGET_P99_MS = 50.0
FLOOR_KEY = "bench:resume:floor"

PG = psycopg.Connection[tuple[Any, ...]]


# -- the deployment ------------------------------------------------------------------------


@dataclass
class Deployment:
    base_url: str
    secret: str
    web: ManagedProcess
    workers: list[ManagedProcess]

    def check_alive(self) -> None:
        for process in (self.web, *self.workers):
            process.check_alive()


def start_deployment(
    args: argparse.Namespace, services: Services, log_dir: Path, started: list[ManagedProcess]
) -> Deployment:
    """Start the web process and the workers, appending each to `started` at once
    (so the caller stops whatever did start if a later one fails), and wait until
    all are ready."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    env = {
        "RESUMABLE_PUBLIC_URL": base_url,
        "RESUMABLE_API_TOKENS": "bench-" + secrets.token_hex(16),
        "RESUMABLE_WEBHOOK_SECRET": secret,
        "RESUMABLE_WORKER_THREADS": str(args.threads),
        "RESUMABLE_DB_POOL_SIZE": str(max(DEFAULT_POOL_SIZE, args.threads + 2)),
    }
    urls = (services.database_url, services.redis_url)
    web = ManagedProcess("web", ["web", "--port", str(port)], urls, env, log_dir / "web.log")
    started.append(web)
    workers: list[ManagedProcess] = []
    for index in range(args.workers):
        workers.append(start_worker(index, AGENT_MODULE, urls, env, log_dir))
        started.append(workers[-1])

    def web_ready() -> bool:
        web.check_alive()
        try:
            return httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    wait_for(web_ready, 60, f"the web process to answer /healthz (log {web.log_path})")
    wait_for(lambda: all(w.started() for w in workers), 60, f"workers to start (logs {log_dir})")
    return Deployment(base_url, secret, web, workers)


class Signer:
    """Signs callback bodies the way a Standard Webhooks sender does."""

    def __init__(self, secret: str) -> None:
        self._webhook = Webhook(secret)

    def sign(self, payload: Any) -> tuple[bytes, dict[str, str]]:
        body = json.dumps(payload)
        msg_id = f"msg_{uuid.uuid4().hex}"
        when = datetime.now(UTC)
        headers = {
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(when.timestamp())),
            "webhook-signature": self._webhook.sign(msg_id, when, body),
        }
        return body.encode(), headers


# -- sessions ------------------------------------------------------------------------------


def start_sessions(args: argparse.Namespace, services: Services) -> None:
    settings = Settings(
        database_url=services.database_url, redis_url=services.redis_url, home=args.home
    )
    db = Database(services.database_url, pool_size=args.enqueue_threads)
    broker = build_broker(settings, services.redis_url)
    try:
        client = Client(settings, db, broker)
        with ThreadPoolExecutor(args.enqueue_threads) as pool:
            list(pool.map(lambda _: client.start(AGENT_NAME), range(args.sessions)))
    finally:
        broker.close()
        db.close()


def wait_statuses(
    poller: PG,
    deployment: Deployment,
    ids: Sequence[str] | None,
    status: str,
    expected: int,
    timeout: float,
    interval: float = 0.01,
) -> None:
    """Until `expected` sessions (of `ids`, or all) have `status`; raises if any
    failed or a process died."""
    where = "" if ids is None else " WHERE id = ANY(%s::uuid[])"
    params = [] if ids is None else [list(ids)]
    deadline = time.monotonic() + timeout
    while True:
        reached, failed = poller.execute(
            "SELECT count(*) FILTER (WHERE status = %s),"
            f" count(*) FILTER (WHERE status IN ('failed', 'cancelled')) FROM sessions{where}",
            [status, *params],
        ).fetchone() or (0, 0)
        if failed:
            raise RuntimeError(f"{failed} sessions failed; see the worker logs")
        if reached >= expected:
            return
        deployment.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {reached}/{expected} sessions {status} after {timeout} s")
        time.sleep(interval)


def callback_urls(poller: PG) -> list[tuple[str, str]]:
    rows = poller.execute(
        "SELECT id::text, state ->> 'callback_url' FROM sessions ORDER BY created_at, id"
    ).fetchall()
    return [(str(session_id), str(url)) for session_id, url in rows]


# -- floors --------------------------------------------------------------------------------


def http_floor(http: httpx.Client, samples: int, gap: float = 0.0) -> list[float]:
    """GET /healthz round trips, seconds, back to back or each after `gap` seconds idle."""
    latencies: list[float] = []
    for index in range(samples + 20):  # the first 20 warm up
        if gap:
            time.sleep(gap)
        started = time.perf_counter()
        response = http.get("/healthz")
        elapsed = time.perf_counter() - started
        if response.status_code != 200:
            raise RuntimeError(f"/healthz answered {response.status_code}")
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
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
            child.join()
        ours.close()
    return latencies


# -- CPU contention ------------------------------------------------------------------------


def _run_queue_ns(pid: int) -> int:
    """Nanoseconds the threads of `pid` have spent runnable but waiting for a CPU."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # the thread exited meanwhile
    return total


def _children(parent: int) -> list[int]:
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(") ", 1)[1].split()[1]) == parent:
                found.append(int(entry.name))
    return found


def _cpu_pressure_us() -> int | None:
    """Machine-wide microseconds in which some runnable task waited for a CPU (PSI)."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        return int(line.rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class Contention:
    """Who waited for a CPU: the machine (PSI) and the processes of the resume path."""

    at: float
    pressure_us: int | None
    waited_ns: dict[int, int]  # per process; a process new since `before` counts from 0

    @classmethod
    def sample(cls, pids: list[int]) -> Contention:
        waited: dict[int, int] = {}
        for pid in pids:
            try:
                waited[pid] = _run_queue_ns(pid)
            except OSError:
                continue
        return cls(time.monotonic(), _cpu_pressure_us(), waited)

    def describe(self, before: Contention, resumes: int) -> str:
        parts = []
        if self.pressure_us is not None and before.pressure_us is not None:
            share = (self.pressure_us - before.pressure_us) / 1e6 / (self.at - before.at)
            parts.append(f"some task waited for a CPU {share:.0%} of the time (PSI, machine-wide)")
        if self.waited_ns and resumes:
            total = sum(ns - before.waited_ns.get(pid, 0) for pid, ns in self.waited_ns.items())
            waited = total / 1e6 / resumes
            parts.append(
                f"web, workers, PostgreSQL, Valkey and this process waited {waited:.2f} ms"
                " per resume in run queues"
            )
        return "; ".join(parts) or "not measurable here (no /proc)"


def resume_path_pids(deployment: Deployment, poller: PG, redis_url: str) -> list[int]:
    """This process, the web process, the workers, and the local servers' processes."""
    pids = [os.getpid(), deployment.web.proc.pid, *(w.proc.pid for w in deployment.workers)]
    try:
        row = poller.execute("SELECT pg_backend_pid()").fetchone()
        backend = int(row[0]) if row else 0
        stat = Path(f"/proc/{backend}/stat").read_text()
        pids += _children(int(stat.rsplit(") ", 1)[1].split()[1]))  # the postmaster's
    except (OSError, IndexError, ValueError):
        pass  # a remote server
    client = redis.Redis.from_url(redis_url)
    try:
        valkey = int(client.info("server")["process_id"])
        if Path(f"/proc/{valkey}").exists():
            pids.append(valkey)
    except (redis.RedisError, KeyError, ValueError):
        pass
    finally:
        client.close()
    return pids


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


def post_callback(http: httpx.Client, signer: Signer, session_id: str, url: str) -> Sample:
    body, headers = signer.sign({"approved": True, "session": session_id})
    sent_at = time.time()
    started = time.perf_counter()
    response = http.post(url, content=body, headers=headers)
    accepted = time.perf_counter() - started
    if response.status_code != 202:
        raise RuntimeError(f"callback for {session_id}: {response.status_code} {response.text}")
    return Sample(session_id, sent_at, accepted)


def wait_resumed(
    poller: PG, deployment: Deployment, session_id: str, timeout: float, interval: float
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
    deployment: Deployment,
    http: httpx.Client,
    poller: PG,
    targets: list[tuple[str, str]],
) -> list[Sample]:
    signer = Signer(deployment.secret)
    samples: list[Sample] = []
    for session_id, url in targets:
        time.sleep(args.gap_ms / 1000)
        sample = post_callback(http, signer, session_id, url)
        sample.resumed_at = wait_resumed(
            poller, deployment, session_id, args.timeout, args.poll_ms / 1000
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
    deployment: Deployment,
    poller: PG,
    targets: list[tuple[str, str]],
) -> Throughput:
    signer = Signer(deployment.secret)
    work: queue.Queue[tuple[str, str]] = queue.Queue()
    for target in targets:
        work.put(target)
    samples: list[Sample] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    ready = threading.Barrier(args.concurrency + 1)

    def sender() -> None:
        try:
            with httpx.Client(base_url=deployment.base_url, timeout=args.timeout) as http:
                http.get("/healthz")  # connected and warm before the start
                ready.wait(timeout=60)
                while True:
                    try:
                        session_id, url = work.get_nowait()
                    except queue.Empty:
                        return
                    sample = post_callback(http, signer, session_id, url)
                    with lock:
                        samples.append(sample)
        except BaseException as exc:
            errors.append(exc)
            ready.abort()

    threads = [threading.Thread(target=sender) for _ in range(args.concurrency)]
    for thread in threads:
        thread.start()
    with contextlib.suppress(threading.BrokenBarrierError):  # a sender failed: reported below
        ready.wait(timeout=60)
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{len(errors)} senders failed; first: {errors[0]!r}")
    ids = [session_id for session_id, _ in targets]
    wait_statuses(poller, deployment, ids, "completed", len(ids), args.timeout, interval=0.005)
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
       extract(epoch FROM (SELECT min(e.created_at) FROM audit_events e
                           WHERE e.session_id = s.id AND e.event_type = 'resumed'))::float8,
       extract(epoch FROM (SELECT max(e.created_at) FROM audit_events e
                           WHERE e.session_id = s.id AND e.event_type = 'run_started'))::float8,
       extract(epoch FROM s.finished_at)::float8
FROM sessions s JOIN deliveries d ON d.session_id = s.id AND d.kind = 'callback'
WHERE s.id = ANY(%s::uuid[])
"""

HOP_NAMES = [
    (
        "POST sent -> callback transaction began",
        "HTTP, uvicorn, signature check, thread-pool hand-off, pool borrow",
    ),
    (
        "callback transaction -> wake statement began",
        "lock callback, dedupe lookup, insert delivery, COMMIT",
    ),
    (
        "wake statement -> worker's claim began",
        "wake UPDATE+COMMIT, Redis enqueue + wake token, BLPOP wake, fetch, thread hand-off",
    ),
    (
        "claim began -> resumed step started",
        "CLAIM_LEASE+COMMIT, step set-up",
    ),
]


@dataclass
class Hops:
    """Per-hop durations (seconds) of the phase A resumes, from database timestamps."""

    hops: list[list[float]] = field(default_factory=lambda: [[] for _ in HOP_NAMES])
    wake_to_accepted: list[float] = field(default_factory=list)
    step_to_committed: list[float] = field(default_factory=list)


def hop_breakdown(poller: PG, samples: list[Sample]) -> Hops:
    by_id = {sample.session_id: sample for sample in samples}
    rows = poller.execute(HOPS_SQL, [list(by_id)]).fetchall()
    hops = Hops()
    for session_id, received, woken, claimed, finished in rows:
        sample = by_id[str(session_id)]
        assert sample.resumed_at is not None
        points = [sample.sent_at, received, woken, claimed, sample.resumed_at]
        for index in range(len(HOP_NAMES)):
            hops.hops[index].append(points[index + 1] - points[index])
        hops.wake_to_accepted.append(sample.sent_at + sample.accepted - woken)
        hops.step_to_committed.append(finished - sample.resumed_at)
    return hops


# -- report --------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f}"


def stats_line(label: str, values: Sequence[float], width: int = 50) -> str:
    return (
        f"  {label:<{width}}{ms(percentile(values, 0.5))}{ms(percentile(values, 0.95))}"
        f"{ms(percentile(values, 0.99))}{ms(max(values))}"
    )


def header(title: str, width: int = 50) -> str:
    return f"{title:<{width + 2}}{'p50 ms':>8}{'p95':>8}{'p99':>8}{'max':>8}"


def report(
    args: argparse.Namespace,
    services: Services,
    log_dir: Path,
    http_lat: list[float],
    http_idle_lat: list[float],
    redis_lat: list[float],
    latency: list[Sample],
    hops: Hops,
    load: Throughput,
    contention: tuple[str, str],
) -> None:
    resume = [s.resume for s in latency]
    accepted = [s.accepted for s in latency]
    http50, http99 = percentile(http_lat, 0.5), percentile(http_lat, 0.99)
    idle50, idle99 = percentile(http_idle_lat, 0.5), percentile(http_idle_lat, 0.99)
    redis50, redis99 = percentile(redis_lat, 0.5), percentile(redis_lat, 0.99)
    resume50, resume99 = percentile(resume, 0.5), percentile(resume, 0.99)
    print()
    print(
        f"resumable resume benchmark: {args.sessions} sessions ({len(latency)} one at a time,"
        f" {len(load.samples)} with {args.concurrency} concurrent senders),"
        f" {args.workers} workers x {args.threads} threads, 1 web process"
    )
    print(f"servers: {services.where}; logs in {log_dir}")
    average = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"machine: {os.cpu_count()} CPUs, load average now {average} (shared with others)")
    print()
    print(header(f"floors (idle deployment, {len(http_lat)} samples each)"))
    print(stats_line("HTTP GET /healthz, keep-alive, back to back", http_lat))
    print(stats_line(f"HTTP GET /healthz, keep-alive, {args.gap_ms:g} ms apart", http_idle_lat))
    print(stats_line(f"Redis LPUSH -> BLPOP elsewhere, {args.gap_ms:g} ms apart", redis_lat))
    print()
    print(header(f"phase A: {len(latency)} callbacks one at a time ({args.gap_ms:g} ms apart)"))
    print(stats_line("callback accepted (POST -> 202)", accepted))
    print(stats_line("resume (POST -> resumed step started)", resume))
    for label, resumed, floors in (
        ("p50", resume50, (http50, idle50, redis50)),
        ("p99", resume99, (http99, idle99, redis99)),
    ):
        ratios = ", ".join(
            f"{resumed / floor:.1f}x {name} ({floor * 1e3:.2f})"
            for name, floor in zip(
                ("HTTP back to back", "HTTP after idle", "Redis wake"), floors, strict=True
            )
        )
        print(f"  resume {label} {resumed * 1e3:.2f} ms = {ratios}")
    print(f"  CPU contention: {contention[0]}")
    print(
        f"  the first callback (a cold web process and database connection) took"
        f" {latency[0].accepted * 1e3:.2f} ms to accept, {latency[0].resume * 1e3:.2f} ms to resume"
    )
    print()
    print(header("phase A, hop by hop (DB, step and sender clocks)"))
    for (name, what), values in zip(HOP_NAMES, hops.hops, strict=True):
        print(stats_line(name, values))
        print(f"    ({what})")
    print(stats_line("wake statement -> 202 received", hops.wake_to_accepted))
    print(stats_line("(after) resumed step -> its commit", hops.step_to_committed))
    sums = [sum(parts) for parts in zip(*hops.hops, strict=True)]
    print(stats_line("sum of the four hops (= resume)", sums))
    print()
    burst = load.last_accepted - load.first_sent
    print(header(f"phase B: {len(load.samples)} callbacks, {args.concurrency} senders"))
    print(stats_line("callback accepted (POST -> 202)", [s.accepted for s in load.samples]))
    print(stats_line("resume (POST -> resumed step started)", [s.resume for s in load.samples]))
    print(
        f"  accepted: {len(load.samples)} in {burst:.3f} s = {load.accepted_rate:.1f} callbacks/s;"
        f" all completed {load.last_finished - load.first_sent:.3f} s after the first POST"
        f" (max finished_at; seen by polling after {load.all_completed_seen - load.first_sent:.3f}"
        f" s) = {len(load.samples) / (load.last_finished - load.first_sent):.1f} resumes/s"
    )
    print(f"  CPU contention: {contention[1]}")
    print()
    p50_ok = resume50 * 1e3 < TARGET_P50_MS
    p99_ok = resume99 * 1e3 < TARGET_P99_MS
    print(
        f"target (phase A resume): p50 < {TARGET_P50_MS:g} ms: {'PASS' if p50_ok else 'MISS'}"
        f" ({resume50 * 1e3:.2f} ms); p99 < {TARGET_P99_MS:g} ms:"
        f" {'PASS' if p99_ok else 'MISS'} ({resume99 * 1e3:.2f} ms)"
    )


# -- main ----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=500, help="sessions (half per phase)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--threads", type=int, default=8, help="threads per worker process")
    parser.add_argument("--concurrency", type=int, default=8, help="phase B senders")
    parser.add_argument(
        "--home",
        type=Path,
        default=ROOT / ".resumable" / "bench-resume",
        help="home of the embedded servers (when DATABASE_URL/REDIS_URL are unset)",
    )
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
    parser.add_argument("--timeout", type=float, default=300, help="seconds allowed per wait")
    args = parser.parse_args(argv)
    for name in ("sessions", "workers", "threads", "concurrency", "enqueue_threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.sessions < 2:
        parser.error("--sessions must be at least 2 (one per phase)")
    if args.floor_samples < 1:
        parser.error("--floor-samples must be at least 1")
    return args


def run(args: argparse.Namespace, services: Services, log_dir: Path) -> None:
    reset_data(services.pg_url, services.redis_url, TRUNCATED)
    processes: list[ManagedProcess] = []
    try:
        deployment = start_deployment(args, services, log_dir, processes)
        print(f"web on {deployment.base_url}, {args.workers} workers x {args.threads} threads")
        with (
            connect(services.pg_url) as poller,
            httpx.Client(base_url=deployment.base_url, timeout=args.timeout) as http,
        ):
            started = time.monotonic()
            start_sessions(args, services)
            wait_statuses(poller, deployment, None, "suspended", args.sessions, args.timeout)
            print(f"{args.sessions} sessions suspended in {time.monotonic() - started:.2f} s")
            targets = callback_urls(poller)
            half = args.sessions // 2
            http_lat = http_floor(http, args.floor_samples)
            http_idle_lat = http_floor(http, args.floor_samples, args.gap_ms / 1000)
            redis_lat = redis_floor(services.redis_url, args.floor_samples, args.gap_ms / 1000)
            print(f"floors measured; phase A: {half} callbacks one at a time")
            pids = resume_path_pids(deployment, poller, services.redis_url)
            before = Contention.sample(pids)
            latency = phase_a(args, deployment, http, poller, targets[:half])
            after_a = Contention.sample(pids)
            hops = hop_breakdown(poller, latency)
            print(f"phase B: {len(targets) - half} callbacks, {args.concurrency} senders")
            before_b = Contention.sample(pids)
            load = phase_b(args, deployment, poller, targets[half:])
            after_b = Contention.sample(resume_path_pids(deployment, poller, services.redis_url))
            contention = (
                after_a.describe(before, len(latency)),
                after_b.describe(before_b, len(load.samples)),
            )
    finally:
        stop_all(processes)
    report(
        args, services, log_dir, http_lat, http_idle_lat, redis_lat, latency, hops, load, contention
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.home = args.home.expanduser().resolve()
    with bench_services(args.home) as services:
        log_dir = log_dir_for(args.home)
        run(args, services, log_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
