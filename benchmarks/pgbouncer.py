"""What does PgBouncer in transaction mode cost steps, with and without
prepared statements?

Run from the repository root::

    .venv/bin/python benchmarks/pgbouncer.py [--pgbouncer /path/to/pgbouncer-1.21+
                                              --rounds 2 --sessions 400 --steps 20]

The durable run of ``benchmarks/steps.py`` (real workers, no-op steps, each
committed) four ways, interleaved round by round so that each way meets the
same machine:

- ``direct, prepared``: workers connect to PostgreSQL, the default;
- ``direct, not prepared``: the same with ``RESUMABLE_DB_PREPARED_STATEMENTS=false``;
- ``PgBouncer 1.18, not prepared``: the installed ``pgbouncer`` (Debian 12's
  1.18) in transaction mode, which cannot keep prepared statements, so the
  setting is off;
- ``PgBouncer 1.2x, prepared``: a PgBouncer 1.21 or later (``--pgbouncer``,
  or the installed one when it is that recent) in transaction mode with
  ``max_prepared_statements = 200``, the setting on.

A way whose PgBouncer is missing is left out and said so. Printed per way and
round: steps/s and CPU per step (workers, PostgreSQL, Valkey, the benchmark
process and, behind a PgBouncer, PgBouncer itself), then each way's best
round against ``direct, prepared``'s.

The benchmark and the database's own bookkeeping (polling, counters) talk to
PostgreSQL directly; only the workers and the client that starts sessions go
through PgBouncer, as in a deployment.

``DATABASE_URL``/``REDIS_URL`` are used when set; otherwise embedded servers
run under ``--home`` (default ``.resumable/bench-pgbouncer``). The tables are
truncated and Redis is flushed: never point this at a database you care about.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness, steps
from benchmarks.harness import Services, pgbouncer
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


@dataclass(frozen=True)
class Way:
    label: str
    prepared: bool
    program: str | None = None  # a PgBouncer binary; None: straight to PostgreSQL


def ways(args: argparse.Namespace) -> tuple[list[Way], list[str]]:
    """The ways this machine can run, and why any other is left out."""
    found: list[Way] = [Way("direct, prepared", True), Way("direct, not prepared", False)]
    missing: list[str] = []
    installed = pgbouncer.binary()
    old = (
        installed
        if installed and not pgbouncer.keeps_prepared_statements(pgbouncer.version_of(installed))
        else None
    )
    recent = args.pgbouncer or (installed if installed and old is None else None)
    if old is not None:
        found.append(Way(f"{pgbouncer.version_of(old)}, not prepared", False, old))
    else:
        missing.append("a PgBouncer older than 1.21 (Debian 12: apt-get install pgbouncer)")
    if recent is not None:
        version = pgbouncer.version_of(recent)
        if not pgbouncer.keeps_prepared_statements(version):
            raise SystemExit(
                f"--pgbouncer {recent} is {version}: 1.21 or later keeps prepared ones"
            )
        found.append(Way(f"{version}, prepared", True, recent))
    else:
        missing.append("a PgBouncer 1.21 or later (--pgbouncer PATH)")
    return found, missing


def run_way(
    args: argparse.Namespace,
    services: Services,
    way: Way,
    context: tuple[StatementStats, int, Path, CpuMeter],
) -> WayRun:
    """One durable run: steps/s, CPU ms per step in all, and its parts."""
    stats, empty_query_commits, log_dir, meter = context
    with contextlib.ExitStack() as stack:
        stack.enter_context(pgbouncer.prepared_setting(way.prepared))
        through = services
        bouncer_pid: int | None = None
        if way.program is not None:
            bouncer = stack.enter_context(
                pgbouncer.running(
                    services.database_url,
                    program=way.program,
                    pool_size=args.workers * args.threads + 8,
                    prepared_statements=pgbouncer.KEPT_PER_CONNECTION if way.prepared else 0,
                )
            )
            through = dataclasses.replace(services, database_url=bouncer.url)
            bouncer_pid = bouncer.pid
        counted = MeterWithServer(meter, bouncer_pid)
        result = steps.run_durable(args, through, stats, empty_query_commits, log_dir, counted)
    assert result.cpu is not None
    parts = counted.parts_per_step(result.cpu, result.steps, "PgBouncer")
    return result.rate, result.cpu_per_step * 1e3, parts


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, "bench-pgbouncer", timeout=600.0)
    add_deployment(parser, threads=8)
    parser.add_argument("--sessions", type=int, default=400, help="sessions per run")
    parser.add_argument("--steps", type=int, default=20, help="steps per session")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    parser.add_argument("--warm-up", type=int, default=100, help="untimed one-step sessions first")
    parser.add_argument("--enqueue-threads", type=int, default=4, help="Client.start threads")
    parser.add_argument("--pgbouncer", help="a PgBouncer 1.21 or later to run as well")
    args = parse(parser, argv, ["sessions", "steps", "rounds", "workers", "threads"])
    chosen, missing = ways(args)
    with harness.bench_services(args.home) as services:
        for line in context_lines(services.where):
            print(line)
        for reason in missing:
            print(f"# left out: {reason}")
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
            [way.label for way in chosen],
            args.rounds,
            lambda index: run_way(args, services, chosen[index], context),
        )
        harness.reset_data(services.pg_url, services.redis_url, steps.TRUNCATED, steps.TABLES)
    print_best_rounds(results, "direct, prepared")
    return 0


if __name__ == "__main__":
    sys.exit(main())
