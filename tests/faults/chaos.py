"""Does anything get lost or done twice when everything that can fail, fails?

Run from the repository root::

    .venv/bin/python -m tests.faults.chaos [--sessions 300 --steps 8 --workers 3 --kills 50]

N sessions of ``tests/faults/chaos_agent.py`` (M steps, one ledger call each) run
on ``--workers`` real ``resumable worker`` processes and one ``resumable
scheduler``, and more are started while faults remain, so that at least
``--backlog`` are unfinished at every fault (a fault on an idle system proves
nothing: with a fixed N, a faster machine finished its work with half the
kills still to come), while the run

- SIGKILLs a random worker every ``--kill-every`` seconds and starts a new one
  (``--kills`` times),
- SIGSTOPs one worker for longer than its lease, then SIGCONTs it (its late
  writes must be rejected),
- flushes Redis once (every queued message gone),
- terminates every PostgreSQL connection of the database once.

The ledger is a real HTTP server in this process. It counts requests per
idempotency key and per logical call (session, step number), so the report
can tell a repeated request (harmless: the key dedupes it) from a repeated
effect (a logical call that arrived under two keys, or was recorded twice).

Then it measures recovery on a quiet system: one session whose step is
blocked, its worker SIGKILLed, and the time until another worker runs the
step again, with the lease and heartbeat settings printed beside it.

``DATABASE_URL``/``REDIS_URL`` are used when set; otherwise embedded servers
run under ``--home``. Tables are truncated and Redis is flushed: never point
this at a database you care about.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import psycopg
import redis

from benchmarks.harness import (
    ROOT,
    BenchDeployment,
    Services,
    bench_client,
    bench_services,
    log_dir_for,
    reset_data,
    wait_sessions,
)
from benchmarks.harness.report import percentile
from resumable.dev.processes import Process
from tests.faults.chaos_agent import AGENT_NAME, ASYNC_AGENT_NAME, INCREMENTAL_AGENT_NAME
from tests.faults.ledger import Ledger
from tests.tables import RUNTIME_TABLES

# The run's own polling connection, spared when every other one is terminated.
OBSERVER = "chaos-observer"


# -- the deployment ------------------------------------------------------------------------


class Fleet:
    """Workers and one scheduler on the run's deployment; killed workers are replaced."""

    def __init__(self, deployment: BenchDeployment) -> None:
        self.deployment = deployment
        self.workers: list[Process] = []

    def add_worker(self) -> Process:
        (worker,) = self.deployment.start_workers(1, "tests.faults.chaos_agent")
        self.workers.append(worker)
        return worker

    def add_scheduler(self) -> Process:
        return self.deployment.processes.scheduler().wait_ready(60)

    def kill(self, worker: Process) -> None:
        self.deployment.processes.kill(worker)
        self.workers.remove(worker)


# -- the run -------------------------------------------------------------------------------


@dataclass
class Faults:
    kills: int = 0
    stops: int = 0
    flushes: int = 0
    terminations: int = 0
    last_at: float = 0.0
    on_idle: int = 0  # faults that found every session finished (proved nothing)
    log: list[str] = field(default_factory=list)

    def note(self, started: float, what: str, pg_url: str) -> None:
        self.last_at = time.monotonic()
        counts = statuses(pg_url)
        unfinished = sum(counts.values()) - counts["completed"]
        self.on_idle += unfinished == 0
        self.log.append(f"{self.last_at - started:6.1f} s  {what} ({unfinished} unfinished)")


def statuses(pg_url: str) -> Counter[str]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute("SELECT status, count(*) FROM sessions GROUP BY status").fetchall()
    return Counter({str(status): int(n) for status, n in rows})


def terminate_connections(pg_url: str) -> int:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND application_name <> %s",
            (OBSERVER,),
        ).fetchall()
    return len(rows)


def inject_faults(
    args: argparse.Namespace,
    fleet: Fleet,
    services: Services,
    faults: Faults,
    started: float,
    done: threading.Event,
) -> None:
    """Kill a random worker every `kill_every` seconds, with the one-off faults in between."""
    rng = random.Random(args.seed)
    # The one-off faults are spread over the run (a short run still sees each).
    stop_at, flush_at, terminate_at = (max(1, k * args.kills // 5) for k in (1, 2, 3))
    while faults.kills < args.kills and not done.wait(args.kill_every):
        victim = rng.choice(fleet.workers)
        fleet.kill(victim)
        faults.kills += 1
        faults.note(
            started, f"SIGKILL worker pid {victim.proc.pid} (kill {faults.kills})", services.pg_url
        )
        fleet.add_worker()
        if faults.kills == stop_at:
            paused = rng.choice(fleet.workers)
            paused.proc.send_signal(signal.SIGSTOP)
            faults.stops += 1
            faults.note(started, f"SIGSTOP worker pid {paused.proc.pid}", services.pg_url)
            time.sleep(args.lease * 2.5)
            paused.proc.send_signal(signal.SIGCONT)
            faults.note(
                started,
                f"SIGCONT worker pid {paused.proc.pid} after {args.lease * 2.5:g} s",
                services.pg_url,
            )
        if faults.kills == flush_at:
            client = redis.Redis.from_url(services.redis_url)
            client.flushdb()
            client.close()
            faults.flushes += 1
            faults.note(started, "Redis FLUSHDB", services.pg_url)
        if faults.kills == terminate_at:
            n = terminate_connections(services.pg_url)
            faults.terminations += 1
            faults.note(started, f"terminated {n} PostgreSQL connections", services.pg_url)


@dataclass
class Outcome:
    sessions: int
    completed: int
    statuses: Counter[str]
    logical_calls: int
    calls_with_two_keys: int
    calls_requested_twice: int
    raw_requests: int
    gapless: int
    wall: float
    after_last_fault: float
    faults_on_idle: int


def keep_busy(
    start: Callable[[int], None], pg_url: str, backlog: int, first: int, over: threading.Event
) -> None:
    """Until `over`, start sessions (numbered from `first`) whenever fewer than
    `backlog` are unfinished. A start that a fault interrupts (every connection
    terminated) is not retried: its session may exist; the count is taken from
    the database at the end."""
    index = first
    while not over.wait(0.25):
        try:
            counts = statuses(pg_url)
            for _ in range(backlog - (sum(counts.values()) - counts["completed"])):
                index += 1
                start(index)
        except Exception as exc:  # a fault: the next round starts more
            print(f"  (a start met a fault: {type(exc).__name__}; going on)")


def check(services: Services, args: argparse.Namespace) -> tuple[int, int]:
    """(sessions with checkpoints 1..M each exactly once, sessions completed)."""
    with psycopg.connect(services.pg_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT s.id, s.status, array_agg(c.seq ORDER BY c.seq)"
            " FROM sessions s LEFT JOIN checkpoints c ON c.session_id = s.id GROUP BY s.id"
        ).fetchall()
    expected = list(range(1, args.steps + 1))
    gapless = sum(1 for _id, _status, seqs in rows if list(seqs) == expected)
    completed = sum(1 for _id, status, _seqs in rows if status == "completed")
    return gapless, completed


def run_chaos(args: argparse.Namespace, services: Services, log_dir: Path) -> Outcome:
    faults = Faults()
    done = threading.Event()
    env = {
        "RESUMABLE_LEASE_SECONDS": f"{args.lease:g}",
        "RESUMABLE_WORKER_THREADS": str(args.threads),
        "RESUMABLE_SCHEDULER_INTERVAL_SECONDS": "0.5",
    }
    with (
        Ledger() as ledger,
        BenchDeployment(services, log_dir, env) as deployment,
        bench_client(services.settings(), pool_size=4) as client,
        psycopg.connect(services.pg_url, autocommit=True, application_name=OBSERVER) as conn,
    ):
        fleet = Fleet(deployment)
        fleet.add_scheduler()
        for _ in range(args.workers):
            fleet.add_worker()
        agent = AGENT_NAME
        if args.use_async:
            agent = ASYNC_AGENT_NAME
        elif args.incremental:
            agent = INCREMENTAL_AGENT_NAME
        session_input = {
            "ledger": f"{ledger.url}/effects",
            "steps": args.steps,
            "work_ms": args.work_ms,
            "padding": 4096 if args.incremental else 0,
        }

        def start(index: int) -> None:
            client.start(agent, session_input, session_id=uuid.UUID(int=index))

        started = time.monotonic()
        for index in range(1, args.sessions + 1):
            start(index)
        faults_over = threading.Event()

        def chaos_then_over() -> None:
            try:
                inject_faults(args, fleet, services, faults, started, done)
            finally:
                faults_over.set()

        chaos = threading.Thread(target=chaos_then_over)
        feeder = threading.Thread(
            target=keep_busy,
            args=(start, services.pg_url, args.backlog, args.sessions, faults_over),
        )
        chaos.start()
        feeder.start()
        try:
            wait_sessions(
                conn,
                lambda counts: (
                    faults_over.is_set()
                    and not feeder.is_alive()
                    and counts["completed"] == sum(counts.values())
                ),
                what="every session to complete",
                timeout=args.timeout,
                interval=0.2,
            )
        finally:
            done.set()
            faults_over.set()
            chaos.join()
            feeder.join()
        finished = time.monotonic()
    for line in faults.log:
        print(f"  {line}")
    gapless, completed = check(services, args)
    counts = statuses(services.pg_url)
    return Outcome(
        sessions=sum(counts.values()),
        completed=completed,
        statuses=counts,
        logical_calls=len(ledger.keys_per_call),
        calls_with_two_keys=sum(1 for keys in ledger.keys_per_call.values() if len(keys) > 1),
        calls_requested_twice=sum(1 for n in ledger.requests_per_call.values() if n > 1),
        raw_requests=sum(ledger.requests.values()),
        gapless=gapless,
        wall=finished - started,
        after_last_fault=finished - faults.last_at,
        faults_on_idle=faults.on_idle,
    )


def measure_recovery(
    args: argparse.Namespace, services: Services, log_dir: Path, env: dict[str, str]
) -> list[float]:
    """Seconds from SIGKILL of the worker running a step until another worker runs it again."""
    times: list[float] = []
    with (
        Ledger() as ledger,
        BenchDeployment(services, log_dir, env) as deployment,
        bench_client(services.settings(), pool_size=2) as client,
    ):
        fleet = Fleet(deployment)
        fleet.add_scheduler()
        for _ in range(2):
            fleet.add_worker()
        for _ in range(args.recovery_rounds):
            sid = client.start(
                AGENT_NAME,
                {
                    "ledger": f"{ledger.url}/effects",
                    "announce": f"{ledger.url}/attempts",
                    "steps": 2,
                    "work_ms": 120_000,
                },
            )
            call = (str(sid), "1")
            wait_for(partial(ledger.attempted, call, 1), 30, "the step to start")
            fleet.kill(_owner(services.pg_url, sid, fleet))
            killed = time.monotonic()
            fleet.add_worker()
            # The step announces each start: its second start is the recovery.
            wait_for(partial(ledger.attempted, call, 2), 300, "recovery")
            times.append(time.monotonic() - killed)
            client.cancel(sid, actor="chaos", reason="measured")
    return times


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


def _owner(pg_url: str, session_id: uuid.UUID, fleet: Fleet) -> Process:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT lease_owner FROM sessions WHERE id = %s", (session_id,)
        ).fetchone()
    owner = str(row[0]) if row and row[0] else ""
    pid = owner.split(":")[1] if owner.count(":") >= 2 else ""
    for worker in fleet.workers:
        if str(worker.pid) == pid:
            return worker
    raise RuntimeError(f"no live worker owns {session_id} (owner {owner!r})")


def report(outcome: Outcome, recovery: list[float], args: argparse.Namespace) -> bool:
    lost = outcome.sessions - outcome.completed
    print("\nresult")
    print(f"  sessions completed          {outcome.completed} / {outcome.sessions} (lost {lost})")
    print(f"  statuses                    {dict(outcome.statuses)}")
    print(
        f"  logical calls               {outcome.logical_calls}"
        f" (expected {outcome.sessions * args.steps})"
    )
    print(f"  raw requests                {outcome.raw_requests}")
    print(f"  calls requested again       {outcome.calls_requested_twice} (same key: deduped)")
    print(f"  calls under two keys        {outcome.calls_with_two_keys} (duplicated effects)")
    print(f"  gapless checkpoint seqs     {outcome.gapless} / {outcome.sessions}")
    print(f"  wall time                   {outcome.wall:.1f} s")
    print(f"  last fault -> all done      {outcome.after_last_fault:.1f} s")
    print(f"  faults on an idle system    {outcome.faults_on_idle} (they test nothing)")
    if recovery:
        print(
            f"  recovery after a kill       p50 {percentile(recovery, 0.5):.1f} s,"
            f" max {max(recovery):.1f} s over {len(recovery)} kills (default settings)"
        )
    return (
        lost == 0
        and outcome.calls_with_two_keys == 0
        and outcome.gapless == outcome.sessions
        and outcome.logical_calls == outcome.sessions * args.steps
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.faults.chaos", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--sessions", type=int, default=300, help="sessions started first")
    parser.add_argument(
        "--backlog",
        type=int,
        default=None,
        help="while faults remain, start more whenever fewer are unfinished"
        " (default: twice the worker threads)",
    )
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument(
        "--work-ms", type=float, default=600.0, help="Time a step works after its call."
    )
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--kill-every", type=float, default=1.5)
    parser.add_argument(
        "--lease", type=float, default=3.0, help="RESUMABLE_LEASE_SECONDS for the run."
    )
    parser.add_argument("--recovery-rounds", type=int, default=3)
    parser.add_argument(
        "--recovery-only", action="store_true", help="measure only the recovery after a kill"
    )
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--incremental",
        action="store_true",
        help="run the agent with incremental checkpoints (steps append patches to the row)",
    )
    parser.add_argument(
        "--async",
        dest="use_async",
        action="store_true",
        help="run the agent's async version (the step on the event loop, its call's"
        " result usually recorded with the step's commit)",
    )
    parser.add_argument("--home", type=Path, default=ROOT / ".resumable" / "bench")
    args = parser.parse_args(argv)
    if args.use_async and args.incremental:
        parser.error("--async and --incremental are separate runs")
    if args.backlog is None:
        args.backlog = 2 * args.workers * args.threads
    if args.backlog < 0:
        parser.error("--backlog must not be negative")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with bench_services(args.home) as services:
        reset_data(services.pg_url, services.redis_url, RUNTIME_TABLES)
        log_dir = log_dir_for(args.home)
        print(
            f"chaos: {args.sessions} sessions x {args.steps} steps on {args.workers} workers,"
            f" more while faults remain (at least {args.backlog} unfinished)"
        )
        print(f"  servers: {services.where}; logs in {log_dir}")
        print(f"  faults: {args.kills} SIGKILLs every {args.kill_every:g} s, one SIGSTOP past")
        print(f"  the {args.lease:g} s lease, one Redis flush, one termination of every connection")
        outcome = None if args.recovery_only else run_chaos(args, services, log_dir)
        recovery_logs = log_dir / "recovery"
        recovery_logs.mkdir(exist_ok=True)
        # The defaults, but one process per worker: the process killed is then
        # the one that holds the lease (a child of the default layout would be
        # restarted by its parent).
        recovery = measure_recovery(
            args, services, recovery_logs, env={"RESUMABLE_WORKER_PROCESSES": "1"}
        )
    if outcome is None:
        print(
            f"recovery after a kill: p50 {percentile(recovery, 0.5):.1f} s, min"
            f" {min(recovery):.1f} s, max {max(recovery):.1f} s over {len(recovery)} kills"
            " (default settings)"
        )
        return 0
    ok = report(outcome, recovery, args)
    print("\nOK: nothing lost, no effect doubled" if ok else "\nFAILED: see above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
