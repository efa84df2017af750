"""How fast do steps go through resumable, against what the database can commit?

Run from the repository root::

    .venv/bin/python benchmarks/steps.py [--sessions N --steps M --workers 2 --threads T]

1. Durable: ``--workers`` real ``resumable worker`` subprocesses with ``--threads``
   threads each run N sessions of the no-op agent in ``benchmarks/agents/noop.py``
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

3. Per step and per session run: a second durable run with the same number of
   step commits in longer sessions (``--long-steps`` each) splits the durable
   CPU as ``a x sessions + b x steps``: ``b`` is what one more step costs (the
   raw commit's counterpart), ``a`` what a session's run costs around its steps
   (``Client.start``, the queue message, the claim, the completion). The target
   is read on the first run, as always; the split says which of the two to cut.

With ``--warm-up K`` each durable run's new workers first run K one-step
sessions, untimed and then deleted, so that the run measures warm pooled
connections, as the raw runs' are (see ``warm_up``); the default, 0, measures
workers straight after their start.

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
import queue
import re
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from benchmarks.agents.noop import AGENT_NAME, STEP_NAMES
from benchmarks.harness import BenchDeployment, Services
from benchmarks.harness.cpu import CpuMeter, CpuSample
from benchmarks.harness.pg_counters import (
    Statement,
    StatementStats,
    calibrate_empty_query,
    describe_writes,
    enable_pg_stat_statements,
    let_statistics_flush,
    read_counters,
    read_statements,
    reset_statements,
    row_deltas,
)
from benchmarks.harness.report import add_deployment, bench_parser, machine, parse, percentile
from resumable.models import step_queries
from resumable.settings import Settings

AGENT_MODULE = "benchmarks.agents.noop"
RAW_AGENT = "bench_raw"
TABLES = ("sessions", "checkpoints", "audit_events")
TRUNCATED = (*TABLES, "tool_execution_cache")  # emptied (CASCADE) before each run

STATEMENT_NAMES = {  # a distinctive fragment of each hot-path statement
    "COMMIT_STEP": "RETURNING id, step_seq, state",
    "CLAIM_LEASE": "AS previous_status",
    "RENEW_LEASE": "UPDATE sessions SET lease_expires_at",
    "FAIL_SESSION": "error = $",
    "RELEASE_LEASE": "lease_expires_at = NULL, updated_at = now() WHERE",
    "CREATE_SESSION": "INSERT INTO sessions (id, agent, status",
}


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
        return float("nan") if self.cpu is None else self.cpu.used / self.steps

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


def session_timings(poller: Any) -> tuple[list[float], float, int]:
    """Per-session completion times, the server-side span of the run, committed steps
    (two transactions)."""
    latencies = [
        float(value)
        for (value,) in poller.execute(
            f"SELECT extract(epoch FROM finished_at - created_at) FROM sessions {harness.BENCH_TAG}"
        ).fetchall()
    ]
    span, steps = poller.execute(
        "SELECT extract(epoch FROM max(finished_at) - min(created_at)), sum(step_seq)"
        f" FROM sessions {harness.BENCH_TAG}"
    ).fetchone() or (0, 0)
    return latencies, float(span), int(steps)


def run_durable(
    args: argparse.Namespace,
    services: Services,
    stats: StatementStats,
    empty_query_commits: int,
    log_dir: Path,
    meter: CpuMeter,
) -> RunResult:
    pg_url = services.pg_url
    harness.reset_data(pg_url, services.redis_url, TRUNCATED, TABLES)
    env = harness.worker_env(
        args.threads,
        RESUMABLE_MAX_STEPS_PER_RUN=str(args.steps + 1),
        RESUMABLE_MAX_SECONDS_PER_RUN="3600",
    )
    settings = services.settings(worker_threads=args.threads)
    with BenchDeployment(services, log_dir, env) as deployment:
        deployment.start_workers(args.workers, AGENT_MODULE)
        if args.warm_up:
            warm_up(args, settings, pg_url, deployment, log_dir)
        time.sleep(1.0)  # idle workers: their start-up statistics are flushed

        reset_statements(pg_url, stats)
        let_statistics_flush()
        before = read_counters(pg_url, TABLES)
        own_commits = 1  # the snapshot's own transaction
        with (
            harness.bench_client(settings, args.enqueue_threads) as client,
            harness.connect(pg_url) as poller,
        ):
            cpu_before = meter.sample(deployment.pids)
            started = time.monotonic()
            inputs = [{"steps": args.steps}] * args.sessions
            harness.start_sessions(client, AGENT_NAME, inputs, args.enqueue_threads)
            enqueued = time.monotonic() - started
            own_commits += args.sessions * (1 + empty_query_commits)  # pool check + insert
            own_commits += wait_completed(
                poller, args, deployment, args.sessions, f"sessions (worker logs in {log_dir})"
            )
            elapsed = time.monotonic() - started
            cpu = meter.sample(deployment.pids).since(cpu_before)
            latencies, server_span, steps = session_timings(poller)
            own_commits += 2
    statements = read_statements(pg_url, stats, STATEMENT_NAMES)
    own_commits += 1 if stats.precise else 0
    let_statistics_flush()
    after = read_counters(pg_url, TABLES)
    if steps != args.sessions * args.steps:
        raise RuntimeError(f"expected {args.sessions * args.steps} committed steps, got {steps}")
    return RunResult(
        label="durable",
        elapsed=elapsed,
        steps=steps,
        statements=statements,
        commits=(after.xact_commit - before.xact_commit - own_commits) / steps,
        rows=row_deltas(before, after, TABLES),
        latencies=latencies,
        extra={
            "enqueue": f"{args.sessions} Client.start calls from {args.enqueue_threads} threads"
            f" took {enqueued:.3f} s ({enqueued / elapsed:.0%} of the run)"
            + (" - ENQUEUE-BOUND: raise --enqueue-threads" if enqueued / elapsed > 0.8 else ""),
            "server_span": f"{server_span:.3f} s (max finished_at - min created_at)",
            "worker_pool": f"RESUMABLE_DB_POOL_SIZE={env['RESUMABLE_DB_POOL_SIZE']}",
            "cpu": cpu.describe(steps, "workers"),
            "writes": describe_writes(before, after, steps, "sessions"),
        },
        cpu=cpu,
    )


def wait_completed(
    poller: Any, args: argparse.Namespace, deployment: BenchDeployment, count: int, what: str
) -> int:
    """Poll until `count` sessions completed; the benchmark's own commits."""
    return harness.wait_sessions(
        poller,
        lambda counts: counts["completed"] >= count,
        what=f"{count} {what} to complete",
        timeout=args.timeout,
        alive=deployment.check_alive,
        interval=0.025,
    )


def warm_up(
    args: argparse.Namespace,
    settings: Settings,
    pg_url: str,
    deployment: BenchDeployment,
    log_dir: Path,
) -> None:
    """Run ``--warm-up`` one-step sessions through the new workers, untimed, then
    delete them: every pooled connection has then prepared and planned its
    statements, as a worker that has been up a while has. Without it, a run of
    200 sessions claims mostly on new connections, whose first dozen claims
    cost 2-4x a warm one's (the claims study in docs/performance.md), while the raw runs'
    connections are warm after their first few of 250 commits."""
    with (
        harness.bench_client(settings, args.enqueue_threads) as client,
        harness.connect(pg_url) as poller,
    ):
        inputs = [{"steps": 1}] * args.warm_up
        harness.start_sessions(client, AGENT_NAME, inputs, args.enqueue_threads)
        wait_completed(
            poller, args, deployment, args.warm_up, f"warm-up sessions (worker logs in {log_dir})"
        )
        poller.execute("DELETE FROM sessions")  # their history goes with them (CASCADE)
        poller.execute(f"VACUUM {', '.join(TABLES)}")  # no dead rows left for the timed run


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


# Found once: searched for at every step, the 2 KB statement took the raw
# clients 7 us a step, which the raw baseline then charged to the database.
COMMIT_STEP_NAMES = tuple(dict.fromkeys(re.findall(r"%\((\w+)\)s", step_queries.COMMIT_STEP)))


def commit_step_params(params: dict[str, Any]) -> dict[str, Any]:
    return {name: params.get(name, COMMIT_STEP_DEFAULTS.get(name)) for name in COMMIT_STEP_NAMES}


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
    conns = [harness.connect(url, autocommit=variant == "raw-cte") for _ in range(threads)]
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
    results.put((started, finished, sum(done), "; ".join(errors), cpu))
    # Closed only once the parent has read the CPU counters: a backend that
    # exits just before is in neither its live children nor (until the
    # postmaster reaps it) their reaped time, and its CPU would be lost.
    barrier.wait(timeout=60)
    for conn in conns:
        conn.close()


def run_raw(
    args: argparse.Namespace,
    services: Services,
    stats: StatementStats,
    variant: str,
    meter: CpuMeter,
) -> RunResult:
    pg_url = services.pg_url
    harness.reset_data(pg_url, services.redis_url, TRUNCATED, TABLES)
    session_ids = [str(uuid.uuid4()) for _ in range(args.sessions)]
    with harness.connect(pg_url) as conn:
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
        let_statistics_flush()
        before = read_counters(pg_url, TABLES)
        own_commits = 1  # the snapshot's own transaction
        cpu_before = meter.sample([])
        barrier.wait(timeout=60)  # ... go
        reports = [results.get(timeout=args.timeout) for _ in procs]
        cpu = meter.sample([]).since(cpu_before)
        barrier.wait(timeout=60)  # ... and the children close their connections
    finally:
        harness.join_or_kill(procs, timeout=30)
    errors = [report[3] for report in reports if report[3]]
    if errors:
        raise RuntimeError(f"{variant} failed: {errors}")
    elapsed = max(report[1] for report in reports) - min(report[0] for report in reports)
    steps = sum(report[2] for report in reports)
    cpu.clients = sum(report[4] for report in reports)
    statements = read_statements(pg_url, stats, STATEMENT_NAMES)
    own_commits += 1 if stats.precise else 0
    let_statistics_flush()
    after = read_counters(pg_url, TABLES)
    completed = harness.scalar(pg_url, "SELECT count(*) FROM sessions WHERE status = 'completed'")
    if steps != args.sessions * args.steps or completed != args.sessions:
        raise RuntimeError(f"{variant}: {steps} steps, {completed} sessions completed")
    return RunResult(
        label=variant,
        elapsed=elapsed,
        steps=steps,
        statements=statements,
        commits=(after.xact_commit - before.xact_commit - own_commits) / steps,
        rows=row_deltas(before, after, TABLES),
        extra={
            "cpu": cpu.describe(steps, "raw clients"),
            "writes": describe_writes(before, after, steps, "sessions"),
        },
        cpu=cpu,
        # autocommit: a statement is a transaction; raw-tx: BEGIN, 3 statements, COMMIT
        statements_per_commit=5 if variant == "raw-tx" else 1,
    )


# -- per step and per session run ---------------------------------------------------------


@dataclass
class Split:
    """Durable CPU as ``per_session x sessions + per_step x steps``, from two runs
    (CPU seconds per session run and per step, for each process group)."""

    long_sessions: int
    long_steps: int
    per_session: dict[str, float]
    per_step: dict[str, float]


_GROUPS = ("clients", "postgres", "valkey", "bench")


def _group_seconds(cpu: CpuSample) -> dict[str, float]:
    return {g: 0.0 if math.isnan(getattr(cpu, g)) else getattr(cpu, g) for g in _GROUPS}


def split_costs(args: argparse.Namespace, short: RunResult, long: RunResult) -> Split | None:
    """Solve ``C = a S + b T`` for each process group from the two runs."""
    if short.cpu is None or long.cpu is None:
        return None
    s1, t1 = args.sessions, short.steps
    s2, t2 = args.long_sessions, long.steps
    det = s1 * t2 - s2 * t1
    if det == 0:
        return None
    c1, c2 = _group_seconds(short.cpu), _group_seconds(long.cpu)
    per_session = {g: (c1[g] * t2 - c2[g] * t1) / det for g in _GROUPS}
    per_step = {g: (s1 * c2[g] - s2 * c1[g]) / det for g in _GROUPS}
    return Split(s2, args.long_steps, per_session, per_step)


def report_split(split: Split, cte: RunResult | None) -> None:
    def groups(costs: dict[str, float]) -> str:
        names = {"clients": "workers", "bench": "benchmark process"}
        return ", ".join(f"{names.get(g, g)} {costs[g] * 1e3:.3f}" for g in _GROUPS)

    step, run = sum(split.per_step.values()), sum(split.per_session.values())
    print(
        f"durable CPU split by a second run of {split.long_sessions} sessions x"
        f" {split.long_steps} steps (C = a x sessions + b x steps):"
    )
    against = ""
    if cte is not None and cte.cpu is not None:
        against = f"; raw-cte's step {cte.cpu_per_step * 1e3:.3f} ms, {cte.cpu_per_step / step:.3f}"
    print(f"  a step: {step * 1e3:.3f} ms ({groups(split.per_step)}){against}")
    print(
        f"  a session's run around its steps (Client.start, queue message, claim, completion):"
        f" {run * 1e3:.3f} ms ({groups(split.per_session)})"
    )


# -- report ------------------------------------------------------------------------------

CPU_TARGET = 0.8  # durable CPU per step within 1/0.8 of the raw one-statement commit's


def report(
    args: argparse.Namespace,
    runs: list[RunResult],
    stats: StatementStats,
    empty_query_commits: int,
    where: str,
    split: Split | None = None,
) -> None:
    durable, raws = runs[0], runs[1:]

    def fmt(value: float | None, digits: int = 2) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}"

    concurrency = f"{args.workers} processes x {args.threads} threads"
    print()
    print(f"resumable step benchmark: {args.sessions} sessions x {args.steps} steps = "
          f"{args.sessions * args.steps} step commits, {concurrency}")  # fmt: skip
    print(f"servers: {where}")
    print(f"machine: {machine()}")
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
    for raw in raws:
        if raw.cpu is None or durable.cpu is None:
            continue
        client_ratio = (raw.cpu.clients / raw.steps) / (durable.cpu.clients / durable.steps)
        print(
            f"durable / {raw.label:<8} = {client_ratio:.3f} by client CPU per step (workers"
            f" {durable.cpu.clients / durable.steps * 1e3:.3f} vs raw clients"
            f" {raw.cpu.clients / raw.steps * 1e3:.3f} ms)"
        )
    cte = next((raw for raw in raws if raw.label == "raw-cte"), None)
    if cte is not None:
        ratio = cte.cpu_per_step / durable.cpu_per_step
        verdict = "PASS" if ratio >= CPU_TARGET else "MISS"
        print(f"target: durable >= {CPU_TARGET} of raw-cte by CPU per step: {ratio:.3f} {verdict}")
    if split is not None:
        report_split(split, cte)
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
    parser = bench_parser(__doc__, home="bench", timeout=600)
    parser.add_argument("--sessions", type=int, default=200, help="sessions (N)")
    parser.add_argument("--steps", type=int, default=20, help="steps per session (M)")
    add_deployment(parser, threads=8)
    parser.add_argument(
        "--enqueue-threads",
        type=int,
        default=4,
        help="threads calling Client.start (one is slower than the workers on a busy machine)",
    )
    parser.add_argument(
        "--skip-raw", action="store_true", help="only the durable run (no raw ceiling)"
    )
    parser.add_argument(
        "--long-steps",
        type=int,
        default=100,
        help="steps per session of the second durable run that splits the CPU per step"
        " and per session run (0: no second run)",
    )
    parser.add_argument(
        "--warm-up",
        type=int,
        default=0,
        help="one-step sessions each durable run's new workers run, untimed, before it"
        " (0: none; ~12 per pooled connection warms them all, e.g. 300 for 2 workers)",
    )
    args = parse(parser, argv, ("sessions", "steps", "workers", "threads", "enqueue_threads"))
    if args.long_steps < 0:
        parser.error("--long-steps must be 0 or more")
    if args.warm_up < 0:
        parser.error("--warm-up must be 0 or more")
    # As many step commits as the first run, in longer sessions.
    args.long_sessions = max(1, args.sessions * args.steps // max(args.long_steps, 1))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with harness.bench_services(args.home) as services:
        pg_url = services.pg_url
        stats = enable_pg_stat_statements(pg_url, args.home, own_server=services.own_database)
        empty_query_commits = calibrate_empty_query(pg_url)
        log_dir = harness.log_dir_for(args.home)
        print(f"durable run: {args.workers} workers x {args.threads} threads (logs in {log_dir})")
        meter = CpuMeter.find(pg_url, services.redis_url)
        runs = [run_durable(args, services, stats, empty_query_commits, log_dir, meter)]
        print(f"  {runs[0].rate:.1f} steps/s")
        split = None
        if args.long_steps and args.long_steps != args.steps:
            long_args = argparse.Namespace(
                **{**vars(args), "sessions": args.long_sessions, "steps": args.long_steps}
            )
            print(f"durable run: {args.long_sessions} sessions x {args.long_steps} steps")
            long = run_durable(long_args, services, stats, empty_query_commits, log_dir, meter)
            print(f"  {long.rate:.1f} steps/s")
            split = split_costs(args, runs[0], long)
        if not args.skip_raw:
            for variant in ("raw-cte", "raw-tx"):
                print(f"{variant} run: {args.workers} processes x {args.threads} threads")
                runs.append(run_raw(args, services, stats, variant, meter))
                print(f"  {runs[-1].rate:.1f} step commits/s")
        harness.reset_data(pg_url, services.redis_url, TRUNCATED, TABLES)
        report(args, runs, stats, empty_query_commits, services.where, split)
    return 0


if __name__ == "__main__":
    sys.exit(main())
