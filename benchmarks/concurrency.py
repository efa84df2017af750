"""What do concurrency limits cost per step: unused, used but never binding,
and binding?

Run from the repository root::

    .venv/bin/python benchmarks/concurrency.py [--sessions 400 --steps 5 --tenants 8
        --rounds 3 --workers 2 --threads 8]

A real deployment (``--workers`` ``resumable worker`` processes of
``--threads`` threads, running ``benchmarks/agents/limited.py``) runs, in
each of ``--rounds`` interleaved rounds, ``--sessions`` sessions of
``--steps`` counting steps of three agents with the same step:

- ``free``: no limit, the claim every agent had before limits existed (the
  cost of the feature unused is this run against the same command on the
  commit before it);
- ``loose``: ``Concurrency(limit=100000, key="tenant")``, a limit that never
  binds: each run's claim takes the key's advisory lock, counts the key's
  holders and waiters, and its end wakes the key's waiters (none);
- ``tight``: ``Concurrency(limit=2, key="tenant")`` over ``--tenants``
  tenants: at most 2 x tenants sessions run at once, the rest wait for a
  slot (parked, then woken by the end of a run of their key).

Printed per agent: steps/s (the median of the rounds), CPU per step of the
workers and of PostgreSQL (ms), and the ratio of each to ``free`` in the
same run; for ``tight``, the most sessions of one key seen running at once
(from the audit log: must not pass the limit) and how many parks it took.

``DATABASE_URL``/``REDIS_URL`` are used when set; otherwise embedded servers run
under ``--home`` (default ``.resumable/bench-concurrency``). Tables are
truncated and Redis flushed: never point this at a database you care about.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from benchmarks.agents.limited import FREE, LOOSE, TIGHT, TIGHT_LIMIT
from benchmarks.harness import BenchDeployment, Services
from benchmarks.harness.cpu import CpuMeter
from benchmarks.harness.report import add_deployment, bench_parser, machine, parse

AGENT_MODULE = "benchmarks.agents.limited"
TRUNCATED = ("sessions", "checkpoints", "audit_events")
AGENTS = {"free": FREE, "loose": LOOSE, "tight": TIGHT}

# The most runs of one key in flight at once, from the claims' and the ends'
# audit events in order (a run starts at run_started and ends at the event
# that took it out of `running`).
MOST_AT_ONCE = """
WITH ev AS (
    SELECT s.input ->> 'tenant' AS tenant, e.id,
           CASE WHEN e.event_type IN ('run_started', 'retry_started', 'lease_recovered')
                THEN 1 ELSE -1 END AS d
    FROM audit_events e JOIN sessions s ON s.id = e.session_id
    WHERE s.agent = %(agent)s
      AND e.event_type IN ('run_started', 'retry_started', 'lease_recovered',
                           'session_completed', 'run_yielded')
), running AS (
    SELECT tenant, sum(d) OVER (PARTITION BY tenant ORDER BY id) AS n FROM ev
)
SELECT coalesce(max(n), 0) FROM running
"""
PARKS = """
SELECT count(*) FROM audit_events e JOIN sessions s ON s.id = e.session_id
WHERE s.agent = %(agent)s AND e.event_type = 'slot_waiting'
"""


def parse_args(argv: list[str] | None) -> Any:
    parser = bench_parser(__doc__, "bench-concurrency", timeout=300.0)
    add_deployment(parser, threads=8)
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--steps", type=int, default=5, help="steps per session")
    parser.add_argument("--tenants", type=int, default=8, help="keys of the tight limit")
    parser.add_argument("--rounds", type=int, default=3)
    return parse(parser, argv, ("sessions", "steps", "tenants", "rounds", "workers", "threads"))


def one_run(
    args: Any, services: Services, deployment: BenchDeployment, meter: CpuMeter, agent: str
) -> tuple[float, float, float, int, int]:
    """Steps/s, worker and PostgreSQL CPU ms per step, most at once per key, parks."""
    harness.reset_data(services.pg_url, services.redis_url, TRUNCATED)
    inputs = [
        {"steps": args.steps, "tenant": f"t{index % args.tenants}"}
        for index in range(args.sessions)
    ]
    pids = [worker.pid for worker in deployment.workers]
    with harness.bench_client(services.settings(), args.threads + 2) as client:
        before = meter.sample(pids)
        started = time.monotonic()
        ids = harness.start_sessions(client, agent, inputs, args.threads)
        with harness.connect(services.pg_url) as conn:
            harness.wait_sessions(
                conn,
                lambda counts: counts["completed"] == len(ids),
                what=agent,
                timeout=args.timeout,
                ids=ids,
                alive=deployment.check_alive,
            )
            elapsed = time.monotonic() - started
            used = meter.sample(pids).since(before)
            most = conn.execute(MOST_AT_ONCE, {"agent": agent}).fetchone()
            parks = conn.execute(PARKS, {"agent": agent}).fetchone()
    steps = args.sessions * args.steps
    assert most is not None and parks is not None
    return (
        steps / elapsed,
        used.clients / steps * 1e3,
        used.postgres / steps * 1e3,
        int(most[0]),
        int(parks[0]),
    )


def run(args: Any, services: Services, log_dir: Path) -> None:
    print(f"concurrency benchmark: {machine()}")
    print(
        f"servers: {services.where}; {args.workers} workers x {args.threads} threads;"
        f" {args.sessions} sessions x {args.steps} steps per run, {args.rounds} rounds"
    )
    results: dict[str, list[tuple[float, float, float, int, int]]] = {k: [] for k in AGENTS}
    with BenchDeployment(services, log_dir, harness.worker_env(args.threads)) as deployment:
        deployment.start_workers(args.workers, AGENT_MODULE)
        meter = CpuMeter.find(services.pg_url, services.redis_url)
        one_run(args, services, deployment, meter, FREE)  # warm-up, not counted
        for _ in range(args.rounds):
            for label, agent in AGENTS.items():
                results[label].append(one_run(args, services, deployment, meter, agent))

    def median(label: str, index: int) -> float:
        return statistics.median(r[index] for r in results[label])

    base_rate, base_worker, base_pg = median("free", 0), median("free", 1), median("free", 2)
    print(
        f"\n{'agent':<8}{'steps/s':>10}{'x free':>8}{'worker ms/step':>16}{'x free':>8}"
        f"{'postgres ms/step':>18}{'x free':>8}  notes"
    )
    for label in AGENTS:
        rate, worker, pg = median(label, 0), median(label, 1), median(label, 2)
        note = ""
        if label == "tight":
            most = max(r[3] for r in results[label])
            parks = statistics.median(r[4] for r in results[label])
            note = f"most of one key at once {most} (limit {TIGHT_LIMIT}); {parks:.0f} parks/run"
            assert most <= TIGHT_LIMIT, f"{most} sessions of one key ran at once"
        print(
            f"{label:<8}{rate:>10,.0f}{rate / base_rate:>8.2f}{worker:>16.3f}"
            f"{worker / base_worker:>8.2f}{pg:>18.3f}{pg / base_pg:>8.2f}  {note}"
        )
    for label in AGENTS:
        rates = ", ".join(f"{r[0]:,.0f}" for r in results[label])
        print(f"  {label} steps/s by round: {rates}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with harness.bench_services(args.home) as services:
        run(args, services, harness.log_dir_for(args.home))
    return 0


if __name__ == "__main__":
    sys.exit(main())
