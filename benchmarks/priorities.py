"""Does a high-priority session skip a backlog, and what do priorities cost?

Run from the repository root::

    .venv/bin/python benchmarks/priorities.py [--backlog 3000 --probes 20
        --every 0.05 --cost-sessions 2000 --steps 5 --rounds 3 --workers 2 --threads 4]

A real deployment (``--workers`` ``resumable worker`` processes of
``--threads`` threads) runs ``benchmarks/agents/noop.py`` sessions (each step
only counts). In one run:

1. A backlog: ``--backlog`` sessions of one step each are started at once,
   all ``normal``; while the workers drain them, ``--probes`` sessions are
   started one every ``--every`` seconds, ``high`` (the target) or
   ``normal`` (the baseline, a second run). Printed: each run's probe queue
   wait (from its ``session_created`` audit event to its ``run_started``:
   both on the database's clock), p50, p95 and max, the time the backlog
   took to drain, and the ratio of the probes' p50 (high to normal).
2. What a mix costs: ``--cost-sessions`` sessions of ``--steps`` steps each,
   all ``normal`` and then a third each ``high``, ``normal`` and ``low``
   (three lanes fetched and ordered by aged priority), interleaved over
   ``--rounds`` rounds after a warm-up. Printed: steps/s and the CPU per
   step of the workers, Valkey and PostgreSQL, medians, the mix's ratio to
   all-normal.

What priorities cost a deployment that never sets one is not measurable
inside one build (every worker consumes the three lanes): compare
``benchmarks/steps.py`` on this commit with the one before (the note of
issue 42 has both).

Each run is bounded by ``--timeout``. ``DATABASE_URL``/``REDIS_URL`` are used
when set; otherwise embedded servers run under ``--home`` (default
``.resumable/bench-priorities``). Tables are truncated and Redis flushed:
never point this at a database you care about.
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from benchmarks.agents.noop import AGENT_NAME
from benchmarks.harness import BENCH_TAG, BenchDeployment, Services
from benchmarks.harness.cpu import CpuMeter
from benchmarks.harness.report import add_deployment, bench_parser, context_lines, parse
from resumable.priorities import Priority

AGENT_MODULE = "benchmarks.agents.noop"
TRUNCATED = ("sessions", "checkpoints", "audit_events", "tool_execution_cache")
LEVELS: tuple[Priority, ...] = ("high", "normal", "low")

QUEUE_WAITS = f"""
SELECT extract(epoch FROM r.created_at - c.created_at)::float8
FROM audit_events c {BENCH_TAG}
JOIN audit_events r ON r.session_id = c.session_id AND r.event_type = 'run_started'
WHERE c.event_type = 'session_created' AND c.session_id = ANY(%s::uuid[])
"""
DRAINED = "SELECT extract(epoch FROM max(finished_at) - min(created_at))::float8 FROM sessions"


def parse_args(argv: list[str] | None) -> Any:
    parser = bench_parser(__doc__, "bench-priorities", timeout=300.0)
    add_deployment(parser, threads=4)
    parser.add_argument("--backlog", type=int, default=3000, help="normal sessions queued first")
    parser.add_argument("--probes", type=int, default=20, help="sessions started into it")
    parser.add_argument("--every", type=float, default=0.05, help="seconds between two probes")
    parser.add_argument("--cost-sessions", type=int, default=2000, help="sessions per cost run")
    parser.add_argument("--steps", type=int, default=5, help="steps per session (cost)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the cost")
    return parse(
        parser,
        argv,
        ("backlog", "probes", "cost_sessions", "steps", "rounds", "workers", "threads"),
    )


def _start(client: Any, levels: Sequence[Priority], steps: int, threads: int) -> list[Any]:
    with ThreadPoolExecutor(threads) as pool:
        return list(
            pool.map(
                lambda level: client.start(AGENT_NAME, {"steps": steps}, priority=level), levels
            )
        )


def _wait_done(services: Services, deployment: BenchDeployment, n: int, timeout: float) -> None:
    with harness.connect(services.pg_url) as conn:
        harness.wait_sessions(
            conn,
            lambda counts: counts["completed"] == n,
            what=f"{n} sessions",
            timeout=timeout,
            agent=AGENT_NAME,
            alive=deployment.check_alive,
        )


@dataclass(frozen=True)
class Backlog:
    waits: list[float]  # the probes' queue waits, seconds
    drained: float  # first start to last completion, seconds

    def at(self, q: float) -> float:
        ordered = sorted(self.waits)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def backlog_run(
    args: Any, services: Services, deployment: BenchDeployment, probe_level: Priority
) -> Backlog:
    harness.reset_data(services.pg_url, services.redis_url, TRUNCATED)
    with harness.bench_client(services.settings(), args.threads + 2) as client:
        _start(client, ["normal"] * args.backlog, 1, 8)
        probes = []
        for _ in range(args.probes):
            probes.append(client.start(AGENT_NAME, {"steps": 1}, priority=probe_level))
            time.sleep(args.every)  # the probes' spacing (what the run is about)
        _wait_done(services, deployment, args.backlog + args.probes, args.timeout)
    with harness.connect(services.pg_url) as conn:
        waits = [float(row[0]) for row in conn.execute(QUEUE_WAITS, [[str(p) for p in probes]])]
        drained = conn.execute(DRAINED).fetchone()
    assert len(waits) == args.probes and drained is not None
    return Backlog(waits, float(drained[0]))


@dataclass(frozen=True)
class Cost:
    steps_per_s: float
    workers_ms: float  # CPU per step
    valkey_ms: float
    postgres_ms: float


def cost_run(
    args: Any,
    services: Services,
    deployment: BenchDeployment,
    meter: CpuMeter,
    mixed: bool,
    sessions: int,
) -> Cost:
    harness.reset_data(services.pg_url, services.redis_url, TRUNCATED)
    pids = [worker.pid for worker in deployment.workers]
    levels = [LEVELS[i % 3] if mixed else "normal" for i in range(sessions)]
    with harness.bench_client(services.settings(), args.threads + 2) as client:
        before = meter.sample(pids)
        started = time.monotonic()
        _start(client, levels, args.steps, args.threads)
        _wait_done(services, deployment, sessions, args.timeout)
        elapsed = time.monotonic() - started
        used = meter.sample(pids).since(before)
    steps = sessions * args.steps
    return Cost(
        steps / elapsed,
        used.clients / steps * 1e3,
        used.valkey / steps * 1e3,
        used.postgres / steps * 1e3,
    )


def print_backlogs(high: Backlog, normal: Backlog) -> None:
    def row(label: str, run: Backlog) -> None:
        print(
            f"  probes {label:>6}: queue wait p50 {run.at(0.5) * 1e3:9.1f} ms,"
            f" p95 {run.at(0.95) * 1e3:9.1f} ms, max {max(run.waits) * 1e3:9.1f} ms;"
            f" backlog drained in {run.drained:6.2f} s"
        )

    row("high", high)
    row("normal", normal)
    ratio = high.at(0.5) / normal.at(0.5) if normal.at(0.5) > 0 else float("nan")
    print(f"  high/normal, p50 queue wait: {ratio:.3f}")


def print_costs(results: dict[bool, list[Cost]]) -> None:
    def median(mixed: bool, field: str) -> float:
        return float(statistics.median(getattr(cost, field) for cost in results[mixed]))

    for mixed, label in ((False, "all normal"), (True, "mixed 1/3 each")):
        print(
            f"  {label:>15}: {median(mixed, 'steps_per_s'):8,.0f} steps/s;"
            f" CPU per step: workers {median(mixed, 'workers_ms'):.3f} ms,"
            f" Valkey {median(mixed, 'valkey_ms'):.3f} ms,"
            f" PostgreSQL {median(mixed, 'postgres_ms'):.3f} ms"
        )
    for field, label in (("steps_per_s", "steps/s"), ("workers_ms", "workers CPU/step")):
        ratio = median(True, field) / median(False, field)
        print(f"  mixed/all normal, {label}: {ratio:.3f}")
    for mixed, label in ((False, "all normal"), (True, "mixed")):
        rounds = "; ".join(f"{c.steps_per_s:,.0f}" for c in results[mixed])
        print(f"  {label} by round (steps/s): {rounds}")


def run(args: Any, services: Services, log_dir: Path) -> None:
    print("priorities benchmark")
    for line in context_lines(services.where):
        print(line)
    print(
        f"deployment: {args.workers} workers x {args.threads} threads; backlog {args.backlog},"
        f" {args.probes} probes every {args.every:g} s; cost {args.cost_sessions} sessions x"
        f" {args.steps} steps x {args.rounds} rounds"
    )
    with BenchDeployment(services, log_dir, harness.worker_env(args.threads)) as deployment:
        deployment.start_workers(args.workers, AGENT_MODULE)
        meter = CpuMeter.find(services.pg_url, services.redis_url)
        for mixed in (False, True):  # warm-up, not counted
            cost_run(args, services, deployment, meter, mixed, min(args.cost_sessions, 200))

        print(f"\n1. {args.probes} probes started into a backlog of {args.backlog} sessions")
        high = backlog_run(args, services, deployment, "high")
        normal = backlog_run(args, services, deployment, "normal")
        print_backlogs(high, normal)

        print(f"\n2. cost: all normal vs a mix of the three, {args.rounds} rounds (medians)")
        results: dict[bool, list[Cost]] = {False: [], True: []}
        for _, mixed in itertools.product(range(args.rounds), (False, True)):
            results[mixed].append(
                cost_run(args, services, deployment, meter, mixed, args.cost_sessions)
            )
        print_costs(results)
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"\nload average at the end: {load}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with harness.bench_services(args.home) as services:
        run(args, services, harness.log_dir_for(args.home))
    return 0


if __name__ == "__main__":
    sys.exit(main())
