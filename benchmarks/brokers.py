"""What does RabbitMQ as the broker cost steps, against Redis?

Run from the repository root::

    .venv/bin/python benchmarks/brokers.py [--rounds 2 --sessions 400 --steps 20]

The durable run of ``benchmarks/steps.py`` (real workers, no-op steps, each
committed) two ways, interleaved round by round so that each meets the same
machine:

- ``redis``: Redis carries the messages (the default; the embedded Valkey,
  or ``REDIS_URL``);
- ``rabbitmq``: a RabbitMQ node of the benchmark's own
  (``resumable/dev/disposable_rabbitmq.py``, Debian's ``rabbitmq-server``)
  does, with publisher confirms, as ``RESUMABLE_BROKER_URL`` makes it.

Printed per way and round: steps/s and CPU per step (workers, PostgreSQL,
Valkey, the RabbitMQ node's VM, the benchmark process), then each way's best
round against Redis's. A step is committed to PostgreSQL whichever broker
runs: the broker's share is one message per session start (and per resume),
not per step, so the difference shows mostly in the CPU of its process.
Resume latency on each: ``benchmarks/resume.py --broker rabbitmq``.

``DATABASE_URL``/``REDIS_URL`` are used when set; otherwise embedded servers
run under ``--home`` (default ``.resumable/bench-brokers``). The tables are
truncated and Redis is flushed: never point this at a database you care about.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness, steps
from benchmarks.harness import Services
from benchmarks.harness.cpu import CpuMeter, MeterWithServer
from benchmarks.harness.pg_counters import (
    StatementStats,
    calibrate_empty_query,
    enable_pg_stat_statements,
)
from benchmarks.harness.report import (
    WayRun,
    add_deployment,
    bench_parser,
    context_lines,
    interleaved_ways,
    parse,
    print_best_rounds,
)
from resumable.dev.disposable_rabbitmq import DisposableRabbitMQ, rabbitmq_installed

WAYS = ("redis", "rabbitmq")


def run_way(
    args: argparse.Namespace,
    services: Services,
    rabbitmq: DisposableRabbitMQ | None,
    context: tuple[StatementStats, int, Path, CpuMeter],
) -> WayRun:
    """One durable run: steps/s, CPU ms per step in all, and its parts."""
    stats, empty_query_commits, log_dir, meter = context
    counted = MeterWithServer(meter, rabbitmq.pid if rabbitmq else None)
    with harness.broker_named(rabbitmq.url if rabbitmq else None):
        result = steps.run_durable(args, services, stats, empty_query_commits, log_dir, counted)
    assert result.cpu is not None
    parts = counted.parts_per_step(result.cpu, result.steps, "RabbitMQ")
    return result.rate, result.cpu_per_step * 1e3, parts


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, "bench-brokers", timeout=600.0)
    add_deployment(parser, threads=8)
    parser.add_argument("--sessions", type=int, default=400, help="sessions per run")
    parser.add_argument("--steps", type=int, default=20, help="steps per session")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    parser.add_argument("--warm-up", type=int, default=100, help="untimed one-step sessions first")
    parser.add_argument("--enqueue-threads", type=int, default=4, help="Client.start threads")
    args = parse(parser, argv, ["sessions", "steps", "rounds", "workers", "threads"])
    if not rabbitmq_installed():
        raise SystemExit("rabbitmq-server is not installed (apt-get install rabbitmq-server)")
    with (
        harness.bench_services(args.home) as services,
        DisposableRabbitMQ(args.home / "rabbitmq") as rabbitmq,
    ):
        for line in context_lines(services.where):
            print(line)
        print(f"# RabbitMQ: node {rabbitmq.node} (pid {rabbitmq.pid}) at 127.0.0.1:{rabbitmq.port}")
        stats = enable_pg_stat_statements(services.pg_url, args.home, services.own_database)
        context = (
            stats,
            calibrate_empty_query(services.pg_url),
            harness.log_dir_for(args.home),
            CpuMeter.find(services.pg_url, services.redis_url),
        )
        print(
            f"# {args.workers} workers x {args.threads} threads, {args.sessions} sessions x "
            f"{args.steps} steps a run, {args.rounds} interleaved rounds"
        )
        results = interleaved_ways(
            WAYS,
            args.rounds,
            lambda index: run_way(
                args, services, rabbitmq if WAYS[index] == "rabbitmq" else None, context
            ),
        )
        harness.reset_data(services.pg_url, services.redis_url, steps.TRUNCATED, steps.TABLES)
    print_best_rounds(results, "redis")
    return 0


if __name__ == "__main__":
    sys.exit(main())
