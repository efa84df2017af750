"""What does each checkpoint strategy cost in storage, throughput and load time?

Run from the repository root::

    .venv/bin/python benchmarks/checkpoints.py [--steps 1000 --sessions 8 --sizes 2048,65536
                                               --workers 2 --threads 4 --rounds 3 --home DIR]

The agents in ``benchmarks/agents/checkpoints.py`` run the same steps on the same
working-memory state (a task, a plan, progress counters and memory items; about
``--sizes`` bytes of JSON, each step rewriting ~2 % of it) and differ only in their
checkpoint strategy: ``Snapshot()``, ``Incremental(snapshot_every=20)`` and
``EventSourced(reducer, snapshot_every=50)``. For every state size and strategy,
with real ``resumable worker`` subprocesses (``--workers`` x ``--threads``):

1. Throughput: ``--sessions`` sessions of ``--steps / --sessions`` steps each run
   in parallel; steps/s from the first ``Client.start`` until all completed.
2. History growth: one session of ``--steps`` steps. It suspends on a signal after
   step ``--pause-at``; on the quiet system the latest state is loaded as recovery
   reads it (``SELECT state, state_patch FROM sessions WHERE id = ...``, the patch
   applied), then it is signalled
   on, and after its last step the latest state is loaded again (also alternating
   with a session of run 1, whose history is short, so that drift on the machine
   falls on both alike), and the state at ``--old-seq`` is rebuilt from the
   history: the newest snapshot row at or before it, then the rows after it
   through ``resumable.checkpoints.rebuild`` (the event-sourced agent's reducer
   comes from the agent module), timed as query + rebuild, and once more through
   the library's ``TimeTravel.state_at``. The rebuilt states are checked against the
   session row and against the states computed here.

Bytes stored per step are measured on the one-session history: the growth of the
``checkpoints`` heap, its TOAST table and all their indexes (main forks, so the
free-space and visibility maps vacuum adds do not count), and, per row, the
stored (compressed) size of ``state`` + ``patch`` + ``events``
(``pg_column_size``). WAL bytes and CPU per step (workers + PostgreSQL + Valkey,
from /proc; steadier than steps/s on a shared machine) are from the throughput run.

Each (size, strategy) run starts from emptied tables and fresh workers; the
strategies run in turn, reversed every other round (``--rounds``, default 3), so
that drift on a shared machine falls on all of them. Steps/s are compared round by
round (incremental / snapshot of the same round), the noise being two standard
errors of those ratios. Targets: at 64 KB incremental stores under 15 % of the
snapshot bytes with no loss in steps/s beyond the noise; loading the latest state
stays flat as the history grows (p50 after ``--steps`` within 25 % or 0.05 ms of
p50 after ``--pause-at``).

``DATABASE_URL``/``REDIS_URL`` are used when set; otherwise embedded servers run
under ``--home`` (default ``.resumable/bench-checkpoints``). The tables are
truncated and Redis is flushed: never point this at a database you care about.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from benchmarks.agents import checkpoints as agents
from benchmarks.harness import BenchDeployment, Services
from benchmarks.harness.cpu import CpuMeter
from benchmarks.harness.report import (
    add_deployment,
    bench_parser,
    context_lines,
    mean,
    parse,
    percentile,
    verdict,
)
from resumable.agent import AgentRegistry
from resumable.checkpoints import EventSourced, Incremental, Reducer, rebuild
from resumable.client import Client
from resumable.models import live_state
from resumable.services.inbox import Inbox, Verdict
from resumable.services.time_travel import TimeTravel
from resumable.settings import Settings

AGENT_MODULE = "benchmarks.agents.checkpoints"
STRATEGIES = tuple(agents.AGENTS)  # snapshot, incremental, event-sourced
TRUNCATED = ("sessions", "checkpoints", "audit_events", "tool_execution_cache", "deliveries")
VACUUMED = ("sessions", "checkpoints", "audit_events")
GROWTH_SEED = 1_000_000  # the one-session run's seed; throughput sessions use 0..N-1
FLAT_RATIO = 1.25  # "flat": p50 after the long history within 25 % of p50 after the short
FLAT_FLOOR_MS = 0.05  # ... or within this much (timer and scheduling noise)
BYTES_TARGET = 0.15
SETTLE = 0.3  # seconds of quiet before timing loads

DictConnection = psycopg.Connection[dict[str, Any]]

# The checkpoints heap, its TOAST table and the indexes of both; main forks only.
HISTORY_BYTES = """
WITH t AS (SELECT oid, reltoastrelid FROM pg_class WHERE oid = 'checkpoints'::regclass)
SELECT coalesce(sum(pg_relation_size(c.oid, 'main')), 0)::bigint AS bytes
FROM pg_class c, t
WHERE c.oid IN (t.oid, t.reltoastrelid)
   OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid IN (t.oid, t.reltoastrelid))
"""
WAL_POSITION = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint AS lsn"
COLUMN_BYTES = """
SELECT count(*) AS rows,
       count(*) FILTER (WHERE kind = 'snapshot') AS snapshots,
       coalesce(sum(coalesce(pg_column_size(state), 0) + coalesce(pg_column_size(patch), 0)
                    + coalesce(pg_column_size(events), 0)), 0)::bigint AS stored,
       coalesce(sum(coalesce(octet_length(state::text), 0) + coalesce(octet_length(patch::text), 0)
                    + coalesce(octet_length(events::text), 0)), 0)::bigint AS text
FROM checkpoints WHERE session_id = ANY(%(ids)s)
"""
LOAD_LATEST = "SELECT state, state_patch FROM sessions WHERE id = %(id)s"
LOAD_CHAIN = """
SELECT seq, kind, state, patch, events FROM checkpoints
WHERE session_id = %(id)s AND seq <= %(seq)s
  AND seq >= (SELECT max(seq) FROM checkpoints
              WHERE session_id = %(id)s AND kind = 'snapshot' AND seq <= %(seq)s)
ORDER BY seq
"""


def dict_connect(url: str) -> DictConnection:
    return psycopg.connect(
        url, autocommit=True, row_factory=dict_row, prepare_threshold=harness.prepare_threshold()
    )


def one(conn: DictConnection, sql: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    row = conn.execute(sql, params).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {sql.strip()[:60]!r}")
    return row


def strategy_reducer(strategy: str) -> Reducer | None:
    checkpoints = agents.AGENTS[strategy].checkpoints
    return checkpoints.reducer if isinstance(checkpoints, EventSourced) else None


def strategy_label(strategy: str) -> str:
    checkpoints = agents.AGENTS[strategy].checkpoints
    if isinstance(checkpoints, Incremental | EventSourced):
        return f"{strategy} K={checkpoints.snapshot_every}"
    return strategy


# -- measurements ------------------------------------------------------------------------


@dataclass
class Storage:
    """What a set of sessions left in the history."""

    steps: int
    relation_bytes: int  # growth of heap + TOAST + indexes
    stored_bytes: int  # sum of pg_column_size(state) + (patch) + (events)
    text_bytes: int  # the same columns as JSON text (uncompressed)
    rows: int
    snapshots: int

    @property
    def relation_per_step(self) -> float:
        return self.relation_bytes / self.steps

    @property
    def stored_per_step(self) -> float:
        return self.stored_bytes / self.steps


@dataclass
class Timing:
    samples: list[float]  # milliseconds

    @property
    def p50(self) -> float:
        return percentile(self.samples, 0.5)

    @property
    def p95(self) -> float:
        return percentile(self.samples, 0.95)


@dataclass
class OldLoad:
    seq: int
    rows: int  # history rows read
    total: Timing
    fetch: Timing  # the query, rows decoded
    apply: Timing  # resumable.checkpoints.rebuild
    library: Timing  # the same through the library's TimeTravel.state_at (pooled connection)


@dataclass
class RunResult:
    strategy: str
    size: int
    elapsed: float  # throughput run, client side
    server_span: float  # max(finished_at) - min(created_at)
    steps: int  # throughput run
    wal_bytes: int  # throughput run, all tables
    worker_cpu: float  # seconds, throughput run
    postgres_cpu: float
    valkey_cpu: float
    throughput_storage: Storage
    growth_storage: Storage
    growth_rate: float  # steps/s of the one session after its pause
    latest_early: Timing
    latest_late: Timing
    latest_short: Timing  # a throughput session (short history), alternating with ...
    latest_long: Timing  # ... the long one, both after the long one's last step
    old: OldLoad

    @property
    def rate(self) -> float:
        return self.steps / self.elapsed

    @property
    def cpu_per_step(self) -> float:
        """Milliseconds of CPU per step: workers + PostgreSQL + Valkey (steadier than
        steps/s when other processes share the machine)."""
        valkey = 0.0 if math.isnan(self.valkey_cpu) else self.valkey_cpu
        return (self.worker_cpu + self.postgres_cpu + valkey) / self.steps * 1e3


def history_bytes(conn: DictConnection) -> int:
    return int(one(conn, HISTORY_BYTES)["bytes"])


def wal_position(conn: DictConnection) -> int:
    return int(one(conn, WAL_POSITION)["lsn"])


def column_bytes(conn: DictConnection, ids: Sequence[uuid.UUID]) -> dict[str, int]:
    row = one(conn, COLUMN_BYTES, {"ids": list(ids)})
    return {key: int(value) for key, value in row.items()}


def storage(conn: DictConnection, ids: Sequence[uuid.UUID], steps: int, before: int) -> Storage:
    columns = column_bytes(conn, ids)
    if columns["rows"] != steps:
        raise RuntimeError(f"expected {steps} checkpoint rows, found {columns['rows']}")
    return Storage(
        steps=steps,
        relation_bytes=history_bytes(conn) - before,
        stored_bytes=columns["stored"],
        text_bytes=columns["text"],
        rows=columns["rows"],
        snapshots=columns["snapshots"],
    )


def timed(reps: int, action: Callable[[], Any], warmup: int = 5) -> tuple[list[float], list[Any]]:
    """Milliseconds per call of `action` after `warmup` calls, and what the calls returned."""
    for _ in range(warmup):
        action()
    samples: list[float] = []
    results: list[Any] = []
    for _ in range(reps):
        started = time.perf_counter()
        results.append(action())
        samples.append((time.perf_counter() - started) * 1e3)
    return samples, results


def load_latest(conn: DictConnection, session_id: uuid.UUID) -> dict[str, Any]:
    row = one(conn, LOAD_LATEST, {"id": session_id})
    return live_state.apply(row["state"], row["state_patch"])


def time_latest(conn: DictConnection, session_id: uuid.UUID, reps: int) -> Timing:
    samples, _ = timed(
        reps, lambda: conn.execute(LOAD_LATEST, {"id": session_id}, prepare=True).fetchone()
    )
    return Timing(samples)


def time_latest_pair(
    conn: DictConnection, short: uuid.UUID, long: uuid.UUID, reps: int
) -> tuple[Timing, Timing]:
    """Load-latest of two sessions, calls alternating, so drift on the machine falls
    on both alike."""
    samples: dict[uuid.UUID, list[float]] = {short: [], long: []}
    for index in range(reps + 5):
        for session_id in (short, long) if index % 2 else (long, short):
            started = time.perf_counter()
            conn.execute(LOAD_LATEST, {"id": session_id}, prepare=True).fetchone()
            if index >= 5:
                samples[session_id].append((time.perf_counter() - started) * 1e3)
    return Timing(samples[short]), Timing(samples[long])


def fetch_chain(conn: DictConnection, session_id: uuid.UUID, seq: int) -> list[dict[str, Any]]:
    return conn.execute(LOAD_CHAIN, {"id": session_id, "seq": seq}, prepare=True).fetchall()


def state_at(
    conn: DictConnection, session_id: uuid.UUID, seq: int, reducer: Reducer | None
) -> dict[str, Any]:
    """The state after step `seq`, rebuilt from the history."""
    return rebuild(fetch_chain(conn, session_id, seq), reducer)


def time_old(
    conn: DictConnection,
    history: TimeTravel,
    session_id: uuid.UUID,
    seq: int,
    reducer: Reducer | None,
    reps: int,
) -> OldLoad:
    fetch: list[float] = []
    apply: list[float] = []
    rows = 0
    for index in range(reps + 5):
        started = time.perf_counter()
        chain = fetch_chain(conn, session_id, seq)
        fetched = time.perf_counter()
        rebuild(chain, reducer)
        done = time.perf_counter()
        rows = len(chain)
        if index >= 5:  # warm-up calls are not counted
            fetch.append((fetched - started) * 1e3)
            apply.append((done - fetched) * 1e3)
    total = [a + b for a, b in zip(fetch, apply, strict=True)]
    library, _ = timed(reps, lambda: history.state_at(session_id, seq))
    return OldLoad(seq, rows, Timing(total), Timing(fetch), Timing(apply), Timing(library))


# -- one run -----------------------------------------------------------------------------


class Run:
    """Workers, client and connections for one (size, strategy) run."""

    def __init__(
        self,
        args: argparse.Namespace,
        services: Services,
        settings: Settings,
        log_dir: Path,
        meter: CpuMeter,
    ) -> None:
        self.args = args
        self.services = services
        self.settings = settings
        self.log_dir = log_dir
        self.meter = meter
        self.deployment: BenchDeployment | None = None

    def wait_sessions(
        self,
        conn: DictConnection,
        ids: Sequence[uuid.UUID],
        done: Callable[[Counter[str]], bool],
        what: str,
    ) -> None:
        assert self.deployment is not None
        harness.wait_sessions(
            conn,
            done,
            what=f"{what} (worker logs in {self.log_dir})",
            timeout=self.args.timeout,
            ids=ids,
            alive=self.deployment.check_alive,
        )

    def execute(self, size: int, strategy: str) -> RunResult:
        args, services = self.args, self.services
        harness.reset_data(services.pg_url, services.redis_url, TRUNCATED, VACUUMED)
        env = harness.worker_env(
            args.threads,
            RESUMABLE_MAX_STEPS_PER_RUN=str(args.steps + 10),
            RESUMABLE_MAX_SECONDS_PER_RUN="3600",
        )
        with (
            BenchDeployment(services, self.log_dir, env) as self.deployment,
            harness.bench_client(self.settings, pool_size=2) as client,
            dict_connect(services.pg_url) as conn,
        ):
            self.deployment.start_workers(args.workers, AGENT_MODULE)
            time.sleep(0.5)  # let the workers settle into their idle wait
            inbox = Inbox(self.settings, client.db, client.broker)
            history = TimeTravel(client.db, AgentRegistry(agents.AGENTS.values()))
            return self._measure(conn, client, inbox, history, size, strategy)

    def _measure(
        self,
        conn: DictConnection,
        client: Client,
        inbox: Inbox,
        history: TimeTravel,
        size: int,
        strategy: str,
    ) -> RunResult:
        args = self.args
        agent = agents.AGENTS[strategy].name
        per_session = args.steps // args.sessions
        assert self.deployment is not None
        pids = [worker.pid for worker in self.deployment.workers]

        # 1. throughput: sessions in parallel
        relation_before, wal_before = history_bytes(conn), wal_position(conn)
        cpu_before = self.meter.sample(pids)
        started = time.monotonic()
        ids = [
            client.start(
                agent,
                {
                    "size": size,
                    "seed": seed,
                    "steps": per_session,
                    "pause_at": None,
                    "change": args.change_bytes or None,
                },
            )
            for seed in range(args.sessions)
        ]
        self.wait_sessions(conn, ids, lambda c: c.get("completed") == len(ids), "completion")
        elapsed = time.monotonic() - started
        cpu = self.meter.sample(pids).since(cpu_before)
        wal_bytes = wal_position(conn) - wal_before
        span = one(
            conn,
            "SELECT extract(epoch FROM max(finished_at) - min(created_at))::float8 AS span,"
            " sum(step_seq)::int AS steps FROM sessions WHERE id = ANY(%(ids)s)",
            {"ids": ids},
        )
        steps = int(span["steps"])
        if steps != per_session * args.sessions:
            raise RuntimeError(f"expected {per_session * args.sessions} steps, got {steps}")
        throughput_storage = storage(conn, ids, steps, relation_before)

        # 2. one long history, paused at --pause-at
        relation_before = history_bytes(conn)
        growth = client.start(
            agent,
            {
                "size": size,
                "seed": GROWTH_SEED,
                "steps": args.steps,
                "pause_at": args.pause_at,
                "change": args.change_bytes or None,
            },
        )
        self.wait_sessions(
            conn,
            [growth],
            lambda c: c.get("suspended") == 1 or c.get("completed") == 1,
            f"the session to pause after step {args.pause_at}",
        )
        seq = int(
            one(conn, "SELECT step_seq FROM sessions WHERE id = %(id)s", {"id": growth})["step_seq"]
        )
        if seq != args.pause_at:
            raise RuntimeError(f"the session paused at step {seq}, not {args.pause_at}")
        time.sleep(SETTLE)  # the worker finishes suspending; the system is quiet
        latest_early = time_latest(conn, growth, args.load_reps)
        resumed = time.monotonic()
        receipt = inbox.signal(growth, agents.CONTINUE_TOPIC, None, None, actor="benchmark")
        if receipt.verdict != Verdict.ACCEPTED:
            raise RuntimeError(f"signal not accepted: {receipt.message}")
        self.wait_sessions(conn, [growth], lambda c: c.get("completed") == 1, "completion")
        growth_rate = (args.steps - args.pause_at) / (time.monotonic() - resumed)
        growth_storage = storage(conn, [growth], args.steps, relation_before)
        time.sleep(SETTLE)
        latest_late = time_latest(conn, growth, args.load_reps)
        latest_short, latest_long = time_latest_pair(conn, ids[0], growth, args.load_reps)
        reducer = strategy_reducer(strategy)
        old = time_old(conn, history, growth, args.old_seq, reducer, args.load_reps)
        self._verify(conn, history, growth, size, reducer)
        return RunResult(
            strategy=strategy,
            size=size,
            elapsed=elapsed,
            server_span=float(span["span"]),
            steps=steps,
            wal_bytes=wal_bytes,
            worker_cpu=cpu.clients,
            postgres_cpu=cpu.postgres,
            valkey_cpu=cpu.valkey,
            throughput_storage=throughput_storage,
            growth_storage=growth_storage,
            growth_rate=growth_rate,
            latest_early=latest_early,
            latest_late=latest_late,
            latest_short=latest_short,
            latest_long=latest_long,
            old=old,
        )

    def _verify(
        self,
        conn: DictConnection,
        history: TimeTravel,
        session_id: uuid.UUID,
        size: int,
        reducer: Reducer | None,
    ) -> None:
        """The loads return the right states: checked against the session row and
        against the states computed in this process."""
        args = self.args
        latest = load_latest(conn, session_id)
        old = agents.expected_state(size, GROWTH_SEED, args.old_seq, args.change_bytes or None)
        checks = {
            "latest state": (
                latest,
                agents.expected_state(size, GROWTH_SEED, args.steps, args.change_bytes or None),
            ),
            f"rebuilt state at {args.steps}": (
                state_at(conn, session_id, args.steps, reducer),
                latest,
            ),
            f"rebuilt state at {args.old_seq}": (
                state_at(conn, session_id, args.old_seq, reducer),
                old,
            ),
            f"TimeTravel.state_at({args.old_seq})": (
                history.state_at(session_id, args.old_seq).state,
                old,
            ),
        }
        for what, (got, expected) in checks.items():
            if got != expected:
                raise RuntimeError(f"{what} of session {session_id} is not the expected state")


# -- report ------------------------------------------------------------------------------


def kb(value: float) -> str:
    return f"{value / 1024:.1f} KB" if value >= 1024 else f"{value:.0f} B"


def describe_size(size: int, change: int | None) -> str:
    state = agents.build_state(size, GROWTH_SEED, change)
    encoded = len(json.dumps(state, ensure_ascii=False, separators=(",", ":")))
    items = len(state["memory"])
    per_step = agents.items_per_step(size, change)
    return (
        f"{encoded:,} B of JSON: {items} memory items of {agents.item_text_length(size)}"
        f" characters, {per_step} rewritten per step (+ counters, a plan tick every"
        f" {agents.PLAN_EVERY} steps)"
    )


def report_size(
    args: argparse.Namespace, size: int, results: dict[str, list[RunResult]]
) -> list[str]:
    """Print one size's table; return its target verdict lines."""
    per_session = args.steps // args.sessions

    def avg(strategy: str, measure: Callable[[RunResult], float]) -> float:
        return mean([measure(run) for run in results[strategy]])

    def bytes_per_step(run: RunResult) -> float:
        return run.growth_storage.relation_per_step

    def stored_per_step(run: RunResult) -> float:
        return run.growth_storage.stored_per_step

    def rate(run: RunResult) -> float:
        return run.rate

    def cpu(run: RunResult) -> float:
        return run.cpu_per_step

    snap_bytes, snap_stored = avg("snapshot", bytes_per_step), avg("snapshot", stored_per_step)
    snap_rate, snap_cpu = avg("snapshot", rate), avg("snapshot", cpu)
    print()
    print(f"state {kb(size)}: {describe_size(size, args.change_bytes or None)}")
    header = (
        f"{'strategy':<18} {'B/step':>8} {'x snap':>6} {'col B/step':>10} {'x snap':>6}"
        f" {'steps/s (rounds)':>24} {'x snap':>6} {'CPU ms/step':>11} {'x snap':>6}"
        f" {'latest ms @' + str(args.pause_at):>15} {'@' + str(args.steps):>6}"
        f" {'old ms @' + str(args.old_seq):>11} {'rows':>4} {'WAL/step':>9}"
    )
    print(header)
    print("-" * len(header))
    for strategy in STRATEGIES:
        runs = results[strategy]
        rounds = ", ".join(f"{run.rate:.0f}" for run in runs)
        print(
            f"{strategy_label(strategy):<18} {avg(strategy, bytes_per_step):>8,.0f}"
            f" {avg(strategy, bytes_per_step) / snap_bytes:>6.3f}"
            f" {avg(strategy, stored_per_step):>10,.0f}"
            f" {avg(strategy, stored_per_step) / snap_stored:>6.3f}"
            f" {f'{avg(strategy, rate):.0f} ({rounds})':>24}"
            f" {avg(strategy, rate) / snap_rate:>6.3f}"
            f" {avg(strategy, cpu):>11.2f} {avg(strategy, cpu) / snap_cpu:>6.3f}"
            f" {avg(strategy, lambda r: r.latest_early.p50):>15.3f}"
            f" {avg(strategy, lambda r: r.latest_late.p50):>6.3f}"
            f" {avg(strategy, lambda r: r.old.total.p50):>11.3f} {runs[0].old.rows:>4}"
            f" {kb(avg(strategy, lambda r: r.wal_bytes / r.steps)):>9}"
        )
    print()
    for strategy in STRATEGIES:
        first = results[strategy][0]
        tput, growth = first.throughput_storage, first.growth_storage
        print(
            f"  {strategy}: history {growth.rows} rows ({growth.snapshots} snapshots), stored"
            f" {kb(growth.stored_per_step)}/step of {kb(growth.text_bytes / growth.steps)} JSON"
            f" text; in the throughput run ({tput.snapshots} snapshots in {tput.steps} rows)"
            f" {kb(tput.relation_per_step)}/step"
        )
        print(
            f"    steps/s by server timestamps"
            f" {avg(strategy, lambda r: r.steps / r.server_span):.0f};"
            f" one session alone {avg(strategy, lambda r: r.growth_rate):.0f} steps/s;"
            f" CPU ms/step: workers {avg(strategy, lambda r: r.worker_cpu / r.steps) * 1e3:.3f},"
            f" postgres {avg(strategy, lambda r: r.postgres_cpu / r.steps) * 1e3:.3f}"
        )
        print(
            f"    load latest p95 {avg(strategy, lambda r: r.latest_early.p95):.3f} /"
            f" {avg(strategy, lambda r: r.latest_late.p95):.3f} ms; alternating with a"
            f" {per_session}-step history (p50): {avg(strategy, lambda r: r.latest_short.p50):.3f}"
            f" vs {avg(strategy, lambda r: r.latest_long.p50):.3f} ms"
        )
        print(
            f"    load old p50 = query {avg(strategy, lambda r: r.old.fetch.p50):.3f}"
            f" + rebuild {avg(strategy, lambda r: r.old.apply.p50):.3f} ms, p95"
            f" {avg(strategy, lambda r: r.old.total.p95):.3f} ms; through TimeTravel.state_at"
            f" p50 {avg(strategy, lambda r: r.old.library.p50):.3f} ms"
        )

    lines: list[str] = []
    label = kb(size)
    inc_bytes = avg("incremental", bytes_per_step) / snap_bytes
    inc_stored = avg("incremental", stored_per_step) / snap_stored
    # Runs of one round are adjacent in time: compare them pairwise, so that slow
    # drift of the machine cancels, and take the noise from how the ratios vary.
    ratios = [
        inc.rate / snap.rate
        for inc, snap in zip(results["incremental"], results["snapshot"], strict=True)
    ]
    ratio = mean(ratios)
    noise = 2 * statistics.stdev(ratios) / math.sqrt(len(ratios)) if len(ratios) > 1 else math.nan
    loss = 1 - ratio
    within = loss <= 0 or (not math.isnan(noise) and loss <= noise)
    cpu_ratio = avg("incremental", cpu) / snap_cpu
    speed = (
        f"incremental steps/s x{ratio:.2f} of snapshot (per round"
        f" {', '.join(f'{r:.2f}' for r in ratios)}; noise +/-{noise:.0%} = 2 standard errors);"
        f" CPU per step x{cpu_ratio:.2f}"
    )
    if within and loss > 0:
        speed += f"; a loss of {loss:.0%} is within the noise (more --rounds narrow it)"
    if size >= 64 * 1024:
        lines.append(
            f"{label}: incremental stores {inc_bytes:.1%} of the snapshot bytes (column sizes"
            f" {inc_stored:.1%}); target < {BYTES_TARGET:.0%}: {verdict(inc_bytes < BYTES_TARGET)}"
        )
        lines.append(f"{label}: {speed}; target no loss beyond the noise: {verdict(within)}")
    else:
        lines.append(
            f"{label} (no target): incremental stores {inc_bytes:.1%} of the snapshot bytes; "
            + speed
        )
    for strategy in STRATEGIES:
        early = avg(strategy, lambda r: r.latest_early.p50)
        late = avg(strategy, lambda r: r.latest_late.p50)
        flat = late <= early * FLAT_RATIO or late - early <= FLAT_FLOOR_MS
        lines.append(
            f"{label} {strategy}: load latest p50 {early:.3f} ms after {args.pause_at} steps,"
            f" {late:.3f} ms after {args.steps}; target flat (within {FLAT_RATIO - 1:.0%}"
            f" or {FLAT_FLOOR_MS} ms): {verdict(flat)}"
        )
    return lines


# -- main --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = bench_parser(__doc__, home="bench-checkpoints", timeout=600)
    parser.add_argument("--steps", type=int, default=1000, help="steps per measurement")
    parser.add_argument(
        "--sessions", type=int, default=8, help="parallel sessions of the throughput run"
    )
    parser.add_argument(
        "--sizes", default="2048,65536", help="state sizes in bytes of JSON, comma-separated"
    )
    add_deployment(parser, threads=4)
    parser.add_argument("--rounds", type=int, default=3, help="repetitions of every run")
    parser.add_argument(
        "--pause-at", type=int, default=100, help="step after which 'load latest' is first timed"
    )
    parser.add_argument("--old-seq", type=int, default=100, help="the old step to rebuild")
    parser.add_argument("--load-reps", type=int, default=200, help="timed loads per measurement")
    parser.add_argument(
        "--change-bytes",
        type=int,
        default=0,
        help="bytes of memory text each step rewrites (default 0: about 2 %% of the state)",
    )
    args = parse(parser, argv, ("steps", "sessions", "workers", "threads", "rounds", "load_reps"))
    try:
        args.sizes = [int(part) for part in str(args.sizes).split(",") if part.strip()]
    except ValueError:
        parser.error("--sizes takes integers, e.g. 2048,65536")
    if not args.sizes or min(args.sizes) < 256:
        parser.error("--sizes must be at least 256 bytes each")
    if args.change_bytes < 0:
        parser.error("--change-bytes must not be negative")
    if args.sessions > args.steps:
        parser.error("--sessions must not exceed --steps")
    if not 1 <= args.pause_at < args.steps:
        parser.error("--pause-at must be between 1 and --steps - 1")
    if not 1 <= args.old_seq <= args.steps:
        parser.error("--old-seq must be between 1 and --steps")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    per_session = args.steps // args.sessions
    with harness.bench_services(args.home) as services:
        settings = services.settings(worker_threads=args.threads)
        log_dir = harness.log_dir_for(args.home)
        meter = CpuMeter.find(services.pg_url, services.redis_url)
        for line in context_lines(f"{services.where}; worker logs in {log_dir}"):
            print(line)
        print(
            f"throughput: {args.sessions} sessions x {per_session} steps, {args.workers}"
            f" workers x {args.threads} threads; history: 1 session x {args.steps} steps;"
            f" {args.rounds} rounds"
        )
        results: dict[int, dict[str, list[RunResult]]] = {
            size: {strategy: [] for strategy in STRATEGIES} for size in args.sizes
        }
        run = Run(args, services, settings, log_dir, meter)
        for round_index in range(args.rounds):
            order = STRATEGIES if round_index % 2 == 0 else tuple(reversed(STRATEGIES))
            for size in args.sizes:
                for strategy in order:
                    result = run.execute(size, strategy)
                    results[size][strategy].append(result)
                    print(
                        f"  round {round_index + 1} {kb(size):>7} {strategy:<13}"
                        f" {result.rate:7.0f} steps/s,"
                        f" {result.growth_storage.relation_per_step:9,.0f} B/step,"
                        f" latest {result.latest_early.p50:.3f}/{result.latest_late.p50:.3f} ms,"
                        f" old {result.old.total.p50:.3f} ms",
                        flush=True,
                    )
        harness.reset_data(services.pg_url, services.redis_url, TRUNCATED, ())
        verdicts: list[str] = []
        for size in args.sizes:
            verdicts += report_size(args, size, results[size])
        print()
        print("targets:")
        for line in verdicts:
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
